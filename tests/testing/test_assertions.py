"""`enqueued`, `assert_enqueued`, `assert_not_enqueued` and `expect_enqueued`, on the
backends of a layer (tests/testing/conftest.py; a caller's rolled-back transaction on
both): what they match (task, args and meta as subsets, queue, status, a count), how long
`within` waits, and failure messages that list the queue so a test explains itself."""

from __future__ import annotations

import threading

import pytest

import heartq
from heartq.model import JobStatus
from heartq.testing import (
    assert_enqueued,
    assert_not_enqueued,
    drain,
    enqueued,
    expect_enqueued,
)
from tests.conftest import on_every_backend


@pytest.fixture
def tasks(app: heartq.App) -> tuple[heartq.Task[..., None], heartq.Task[..., None]]:
    @app.task(queue="emails")
    def send_email(address: str, template: str = "welcome") -> None: ...

    @app.task
    def resize(url: str, size: int) -> None: ...

    return send_email, resize


def test_enqueued_lists_every_job_oldest_first_readably(app: heartq.App, tasks) -> None:
    send_email, resize = tasks
    first = send_email.enqueue("ada@example.org")
    second = resize.options(meta={"request": "r-1"}).enqueue(url="a.png", size=64)
    third = app.enqueue("by_name_only", {"x": 1}, queue="misc")

    jobs = enqueued(app)
    assert [job.id for job in jobs] == [first, second, third]
    assert [job.id for job in enqueued(app, resize)] == [second]
    assert [job.id for job in enqueued(app, "by_name_only")] == [third]
    assert [job.id for job in enqueued(app, queue="emails", status="queued")] == [first]
    assert enqueued(app, status="succeeded") == []
    assert str(jobs).splitlines() == [
        "3 job(s):",
        f"    {first}  send_email(address='ada@example.org')  queue=emails  queued",
        f"    {second}  resize(url='a.png', size=64)  queue=default  queued "
        'meta={"request": "r-1"}',
        f"    {third}  by_name_only(x=1)  queue=misc  queued",
    ]
    with pytest.raises(ValueError, match="'finished' is not a valid JobStatus"):
        enqueued(app, status="finished")


def test_assert_enqueued_matches_a_subset_and_returns_the_jobs(app: heartq.App, tasks) -> None:
    send_email, resize = tasks
    job_id = send_email.options(meta={"tenant": "acme", "trace": "t"}).enqueue("ada@x.org")
    resize.enqueue(url="a.png", size=64)

    (job,) = assert_enqueued(send_email, args={"address": "ada@x.org"})
    assert job.id == job_id
    assert_enqueued(send_email, {"address": "ada@x.org"}, meta={"tenant": "acme"})
    assert_enqueued(send_email, queue="emails", status="queued", count=1)
    assert_enqueued("resize", args={"size": 64}, app=app)
    assert_enqueued(send_email)  # any arguments


def test_a_failed_assert_enqueued_lists_the_queue(app: heartq.App, tasks) -> None:
    send_email, resize = tasks
    ada = send_email.enqueue("ada@x.org")
    other = resize.enqueue(url="a.png", size=64)

    with pytest.raises(AssertionError) as caught:
        assert_enqueued(send_email, args={"address": "bob@x.org"})
    assert str(caught.value).splitlines() == [
        "expected a job of task 'send_email' with args including {'address': 'bob@x.org'} "
        "not ended; found 0.",
        "The queue holds 2 job(s) (* marks a match):",
        f"    {ada}  send_email(address='ada@x.org')  queue=emails  queued",
        f"    {other}  resize(url='a.png', size=64)  queue=default  queued",
    ]
    expected = r"^expected 2 job\(s\) of task 'send_email' not ended; found 1"
    with pytest.raises(AssertionError, match=expected):
        assert_enqueued(send_email, count=2)
    with pytest.raises(AssertionError) as wrong_queue:
        assert_enqueued(send_email, queue="default")
    assert "of task 'send_email' in queue 'default' not ended; found 0." in str(wrong_queue.value)
    assert f"\n    {ada}  send_email(" in str(wrong_queue.value)  # listed, not marked
    with pytest.raises(AssertionError, match="task 'send_email' now succeeded; found 0"):
        assert_enqueued(send_email, status="succeeded")


def test_a_job_that_already_ran_was_enqueued_all_the_same(app: heartq.App, tasks) -> None:
    send_email, _ = tasks
    send_email.enqueue("ada@x.org")
    drain(app)
    assert_enqueued(send_email, args={"address": "ada@x.org"}, status="succeeded")
    assert_not_enqueued(send_email, status="queued")


def test_within_waits_for_an_enqueue_from_another_thread(app: heartq.App, tasks) -> None:
    send_email, _ = tasks
    app.migrate()
    later = threading.Timer(0.3, lambda: send_email.enqueue("late@x.org"))
    later.start()
    try:
        (job,) = assert_enqueued(send_email, args={"address": "late@x.org"}, within=30)
    finally:
        later.join()
    assert job.args == {"address": "late@x.org"}
    with pytest.raises(AssertionError, match=r"found 0\.\nThe queue holds \(waited 0\.2 s\) 1"):
        assert_enqueued(send_email, args={"address": "never@x.org"}, within=0.2)


def test_assert_not_enqueued_names_the_jobs_that_match(app: heartq.App, tasks) -> None:
    send_email, resize = tasks
    assert_not_enqueued(send_email)
    ada = send_email.enqueue("ada@x.org", template="reset")
    resize.enqueue(url="a.png", size=1)

    assert_not_enqueued(send_email, args={"template": "welcome"})
    assert_not_enqueued(send_email, queue="default")
    with pytest.raises(AssertionError) as caught:
        assert_not_enqueued(send_email, args={"template": "reset"})
    message = str(caught.value)
    assert message.startswith(
        "expected no job of task 'send_email' with args including {'template': 'reset'} not "
        "ended; found 1."
    )
    assert f"  * {ada}  send_email(address='ada@x.org', template='reset')" in message


def test_expect_enqueued_counts_only_what_the_block_enqueued(app: heartq.App, tasks) -> None:
    send_email, resize = tasks
    send_email.enqueue("before@x.org")

    with expect_enqueued(send_email, args={"template": "reset"}) as made:
        job_id = send_email.enqueue("ada@x.org", template="reset")
    assert [job.id for job in made] == [job_id]

    with pytest.raises(AssertionError) as caught, expect_enqueued(send_email, count=2):
        other = resize.enqueue(url="b.png", size=2)
        send_email.enqueue("one@x.org")
    lines = str(caught.value).splitlines()
    assert lines[0] == (
        "expected the block to enqueue 2 job(s) of task 'send_email' not ended; found 1."
    )
    assert lines[1] == "The block enqueued 2 job(s) (* marks a match):"
    assert lines[2].startswith(f"    {other}  resize(")


def test_bad_arguments_say_what_is_wrong_in_one_line(app: heartq.App, tasks) -> None:
    with pytest.raises(TypeError, match=r"task 'resize' is given by name: pass app="):
        assert_enqueued("resize")
    with pytest.raises(TypeError, match="args must be a mapping"):
        assert_enqueued(tasks[1], args=["a.png"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count must be a whole number >= 0"):
        assert_enqueued(tasks[1], count=-1)
    with pytest.raises(TypeError, match=r"task must be a heartq\.Task or a task's name"):
        assert_not_enqueued(42, app=app)  # type: ignore[arg-type]
    assert enqueued(app) == []


@on_every_backend
def test_a_rolled_back_enqueue_was_not_enqueued(app: heartq.App, tasks) -> None:
    """The database is the truth: an enqueue in a transaction that rolled back stored
    nothing, however far the code got."""
    send_email, _ = tasks
    if app.url.startswith("postgres"):
        import psycopg

        from heartq.store.postgres.connection import parse_url

        app.migrate()
        with psycopg.connect(parse_url(app.url)[0]) as conn:
            send_email.options(connection=conn).enqueue("ghost@x.org")
            conn.rollback()
    else:
        import sqlite3

        app.migrate()
        conn = sqlite3.connect(app.url.removeprefix("sqlite:///"))
        send_email.options(connection=conn).enqueue("ghost@x.org")
        conn.rollback()
        conn.close()
    assert_not_enqueued(send_email)
    assert enqueued(app, status=JobStatus.QUEUED) == []
