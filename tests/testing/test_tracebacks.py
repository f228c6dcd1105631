"""A failing heartq.testing assertion, as a user's pytest run shows it: the traceback ends
at the user's own line and the message that lists the queue, without a page of heartq's
source (its helpers' frames are hidden, `__tracebackhide__`). A real `pytest` run in a
subprocess on a tiny project (SQLite: frames do not differ by backend)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.testing.inner import make_project, run_pytest

FAILING = """
from heartq import testing

import tasks


def test_assert_enqueued(heartq_app):
    tasks.greet.enqueue("bob")
    testing.assert_enqueued(tasks.greet, args={"name": "ada"})  # USER LINE 1


def test_assert_enqueued_within(heartq_app):
    testing.assert_enqueued(tasks.greet, within=0.05)  # USER LINE 2


def test_assert_not_enqueued(heartq_app):
    tasks.greet.enqueue("ada")
    testing.assert_not_enqueued(tasks.greet)  # USER LINE 3


def test_expect_enqueued(heartq_app):
    with testing.expect_enqueued(tasks.greet, args={"name": "ada"}):  # USER LINE 4
        tasks.greet.enqueue("bob")


def test_run(heartq_app):
    testing.run(tasks.greet, "bad")  # USER LINE 5
"""

HEARTQ_SOURCE = re.compile(r"heartq/(testing|worker)/\w+\.py|contextlib\.py|raise _failure")
"""What showed before: heartq's files (and contextlib's, around `expect_enqueued`) as
traceback entries, their source lines (`raise _failure(...)`); for `run`, its own frame
and the worker's that called the task."""


def test_a_failing_assertion_shows_the_user_s_line_not_heartq_s_source(tmp_path: Path) -> None:
    project = make_project(tmp_path, FAILING)

    for style in ("auto", "long"):
        done = run_pytest(project, f"--tb={style}", "--basetemp", str(tmp_path / style))

        out = done.stdout + done.stderr
        assert done.returncode == 1 and "5 failed" in done.stdout, out
        assert HEARTQ_SOURCE.search(out) is None, out
        for n in range(1, 6):
            assert f"# USER LINE {n}" in out, out
        assert "E       AssertionError: expected a job of task 'greet' with args including" in out
        assert "E       AssertionError: expected no job of task 'greet'" in out, out
        assert "; found 1." in out, out
        assert "expected the block to enqueue a job of task 'greet'" in out, out
        assert "(waited 0.05 s)" in out, out
        assert 'raise ValueError("bad name")' in out and "tasks.py:10: ValueError" in out, out
