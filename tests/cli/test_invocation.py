"""How commands are typed: global options on either side of the command, a bad
`HEARTQ_*` variable, and read commands in a directory that holds no queue; and that
`python -m heartq` reaches the same commands as the tests run in their own process."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

import pytest

from tests.cli.conftest import without_the_queue
from tests.cli.helpers import SAME, HeartqCli, wait_for
from tests.conftest import on_every_backend


def test_url_and_debug_before_or_after_the_command(heartq: HeartqCli) -> None:
    job_id = heartq.add("ok")
    before = heartq("--url", heartq.url, "jobs", "list", "--json", url=None).json()
    assert [j["id"] for j in before] == [job_id]
    after = heartq("jobs", "list", "--json").json()
    assert before == after
    # typed after the command beats typed before it, which beats HEARTQ_URL
    elsewhere = "sqlite:////nonexistent/dir/x.db"
    run = heartq("--url", elsewhere, "jobs", "list", "--json", HEARTQ_URL=elsewhere)
    assert [j["id"] for j in run.json()] == [job_id]
    run = heartq("--url", heartq.url, "jobs", "show", job_id, "--json", url=None,
                 HEARTQ_URL=elsewhere)  # fmt: skip
    assert run.json()["id"] == job_id
    # --debug after the command is the group's flag: the traceback is shown
    run = heartq("jobs", "show", "no-such-job", "--debug")
    assert run.code == 1 and "Traceback" in run.err and "JobNotFound" in run.err, run.explain()
    run = heartq("--debug", "jobs", "show", "no-such-job")
    assert run.code == 1 and "Traceback" in run.err, run.explain()


def test_url_before_the_command_reaches_the_worker(heartq: HeartqCli) -> None:
    job_id = heartq.add("ok")
    heartq("--url", heartq.url, "worker", "tasks:app", "--burst", "--poll-interval", "0.05",
           url=None).ok()  # fmt: skip
    assert heartq.job(job_id)["status"] == "succeeded"


@without_the_queue
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["jobs", "--help"], ["worker", "-h"]])
def test_a_bad_setting_never_breaks_help_or_version(heartq: HeartqCli, args: list[str]) -> None:
    run = heartq(*args, url=None, HEARTQ_LEASE="1")
    assert run.code == 0 and "Traceback" not in run.err, run.explain()
    assert run.out


def test_a_bad_setting_is_one_line_from_the_commands_that_use_it(heartq: HeartqCli) -> None:
    job_id = heartq.add("ok")
    for args in (["jobs", "list"], ["jobs", "show", job_id], ["stats"], ["workers", "--all"],
                 ["dlq", "list"], ["tasks"]):  # fmt: skip
        heartq(*args, HEARTQ_LEASE="1").ok()  # they do not use the timings
    for args in (["enqueue", "ok"], ["worker", "tasks:app", "--burst"], ["reclaim"]):
        run = heartq(*args, HEARTQ_LEASE="1").fails(1)
        assert "lease (1 s) must be longer than heartbeat_interval" in run.err, run.explain()
        assert "HEARTQ_LEASE=1" in run.err, run.explain()
    run = heartq("reclaim", HEARTQ_HEARTBEAT_INTERVAL="soon").fails(1)
    assert "HEARTQ_HEARTBEAT_INTERVAL must be a number of seconds, got 'soon'" in run.err


READ_COMMANDS = [
    ["stats"],
    ["jobs", "list"],
    ["jobs", "show", "01a202f0"],
    ["jobs", "cancel", "01a202f0"],
    ["workers", "--all"],
    ["tasks"],
    ["dlq", "list"],
    ["dlq", "replay", "--all"],
    ["dlq", "purge", "--yes"],
    ["reclaim"],
]


@without_the_queue
def test_read_commands_where_there_is_no_queue_name_the_path(heartq: HeartqCli) -> None:
    """No `heartq.db` here: a read command says so (absolute path, what to do) and
    creates nothing; the commands that write create the queue as before. (Every command
    here runs on the default SQLite URL or names one, whichever backend `heartq` has.)"""
    where = heartq.cwd / "heartq.db"
    for run in heartq.many(READ_COMMANDS, url=None):
        run.fails(1)
        assert f"no queue at {where} (the file does not exist)" in run.err, run.explain()
        assert "heartq migrate" in run.err and "--url" in run.err and "HEARTQ_URL" in run.err
    other = heartq.cwd / "sub" / "q.db"
    other.parent.mkdir()
    run = heartq("jobs", "list", url="sqlite:///sub/q.db").fails(1)
    assert f"no queue at {other}" in run.err
    assert not where.exists() and not other.exists()
    heartq("enqueue", "ok", url=None).ok()
    assert where.exists()
    assert len(heartq("jobs", "list", "--json", url=None).json()) == 1


@without_the_queue
def test_shell_completion(heartq: HeartqCli) -> None:
    """click's own completion, as the line in docs/INTERFACE.md installs it."""
    script = heartq(url=None, _HEARTQ_COMPLETE="bash_source").ok().out
    assert "_heartq_completion()" in script and "complete -o nosort -F" in script
    run = heartq(url=None, _HEARTQ_COMPLETE="bash_complete", COMP_WORDS="heartq jobs w",
                 COMP_CWORD="2").ok()  # fmt: skip
    assert run.out.split() == ["plain,watch"]
    run = heartq(url=None, _HEARTQ_COMPLETE="zsh_complete", COMP_WORDS="heartq dlq purge --y",
                 COMP_CWORD="3").ok()  # fmt: skip
    assert "--yes" in run.out


def test_python_m_heartq_reaches_the_same_commands(heartq: HeartqCli) -> None:
    """Most tests here run a command in the test's process (tests/cli/helpers.py); the
    entry point a user types, `python -m heartq`, gives the same output and exit status:
    help, version, a read command (typed URL, or `HEARTQ_URL`), an operational error, a
    usage error, shell completion, and a traceback under `--debug`."""
    job_id = heartq.add("ok", {"n": 1})
    same: list[tuple[tuple[str, ...], dict[str, str], str | None]] = [
        (("--help",), {}, None),
        (("--version",), {}, None),
        (("jobs", "--help"), {}, None),
        (("jobs", "list", "--json"), {}, SAME),
        (("jobs", "show", job_id, "--json"), {"HEARTQ_URL": heartq.url}, None),
        (("jobs", "show", "no-such-job"), {}, SAME),
        (("jobs", "list", "--status", "finished"), {}, SAME),
        ((), {"_HEARTQ_COMPLETE": "bash_complete", "COMP_WORDS": "heartq dlq p",
              "COMP_CWORD": "2"}, None),
    ]  # fmt: skip
    for args, env, url in same:
        here = heartq.in_process(*args, url=url, **env)
        there = heartq.process(*args, url=url, **env)
        assert (here.code, here.out, here.err) == (there.code, there.out, there.err), (
            f"{here.explain()}\n--- python -m heartq:\n{there.explain()}"
        )
    assert [r.code for r in (here, there)] == [0, 0] and here.out.split() == ["plain,purge"]
    here = heartq.in_process("--debug", "jobs", "show", "no-such-job")
    there = heartq.process("--debug", "jobs", "show", "no-such-job")
    for run in (here, there):
        assert run.code == 1 and "Traceback" in run.err, run.explain()
    assert here.err.splitlines()[-1] == there.err.splitlines()[-1], (here.err, there.err)


@on_every_backend  # a PostgreSQL store has a pool, its connections and threads
def test_a_command_run_in_the_tests_process_leaves_nothing_behind(
    heartq: HeartqCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a command opened (its store, a PostgreSQL pool's connections and threads, a
    SQLite file) is closed when it ends, an error's included; what it changed in the
    process (environment, working directory, import path, loggers: `heartq reclaim` gives
    heartq's logger a handler when it has none) is put back. (No store of the test's own
    is open: SQLite keeps a closed connection's file open while another connection of
    the process holds a lock on it.)"""
    monkeypatch.setattr(logging.getLogger("heartq"), "handlers", [])

    def state() -> tuple[object, ...]:
        heartq_logger = logging.getLogger("heartq")
        return (dict(os.environ), os.getcwd(), list(sys.path), list(heartq_logger.handlers),
                heartq_logger.level, list(logging.root.handlers))  # fmt: skip

    def open_files() -> set[tuple[str, str]]:
        found = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                found.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
        return found

    before, threads, files = state(), threading.active_count(), open_files()
    job_id = heartq.in_process("enqueue", "ok").ok().out.strip()
    for args in (["jobs", "list"], ["jobs", "show", job_id], ["stats"], ["reclaim"], ["workers"],
                 ["dlq", "list"], ["tasks"], ["periodic"], ["migrate"],
                 ["jobs", "show", "no-such-job"],
                 ["--debug", "jobs", "show", "no-such-job"]):  # fmt: skip
        heartq.in_process(*args, HEARTQ_LEASE="60")
    assert state() == before
    wait_for(lambda: threading.active_count() <= threads, what="the commands' threads to end")
    wait_for(lambda: open_files() <= files, what="the commands' files and sockets to close")
