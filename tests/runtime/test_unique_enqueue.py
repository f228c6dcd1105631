"""`unique_key=` on every enqueue path of the Python API: the same key answers the live
job's id and stores nothing, whichever path enqueued it (docs/INTERFACE.md); and the key
a task's `unique=True` (or an enqueue's) derives from its task and arguments."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
from typing import Any

import psycopg
import pytest

import heartq
from heartq.errors import ConfigError
from heartq.store.postgres.connection import parse_url
from tests.conftest import on_every_backend
from tests.support import wait_for

from .test_outcomes import wait_status


def _jobs(app: heartq.App) -> list[dict[str, Any]]:
    return app.store.list_jobs(limit=100)


def test_every_python_path_answers_the_live_job(app: heartq.App) -> None:
    @app.task
    def report(ctx: heartq.JobContext, day: int) -> None:
        """A job that should run once per day at a time."""

    first = report.options(unique_key="report:1").enqueue(day=1)
    assert app.enqueue("report", {"day": 1}, unique_key="report:1") == first
    assert report.enqueue_with({"day": 1}, unique_key="report:1", unique_for=30) == first
    assert app.enqueue_many("report", [{"day": 1}], unique_key="report:1") == [first]
    assert asyncio.run(app.enqueue_async("report", {"day": 1}, unique_key="report:1")) == first
    bound = report.options(unique_key="report:1")
    assert asyncio.run(bound.enqueue_async(day=1)) == first
    # a key from each job's arguments: one job per day
    ids = app.enqueue_many(
        "report", [{"day": d} for d in (1, 2, 2, 3)], unique_key=lambda a: f"report:{a['day']}"
    )
    assert ids[0] == first and ids[1] == ids[2] and len(set(ids)) == 3
    assert len(_jobs(app)) == 3


@on_every_backend  # the caller's own connection
def test_a_transactional_enqueue_with_a_key(app: heartq.App) -> None:
    app.migrate()
    url = app.store.link.url
    if url.startswith("sqlite"):
        conn: Any = sqlite3.connect(app.store.link.path)  # type: ignore[attr-defined]
    else:
        conn = psycopg.connect(parse_url(url)[0])
    try:
        first = app.enqueue("report", {}, unique_key="k", connection=conn)
        assert app.enqueue("report", {}, unique_key="k", connection=conn) == first
        conn.commit()
        assert app.enqueue("report", {}, unique_key="k") == first
        second = app.enqueue("report", {}, unique_key="k2", connection=conn)
        conn.rollback()  # nothing stored: the key is free again
        assert app.enqueue("report", {}, unique_key="k2") != second
    finally:
        conn.close()
    assert len(_jobs(app)) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_key": ""}, "unique_key must be a non-empty string"),
        ({"unique_key": "x" * 1001}, "over 1000"),
        ({"unique_for": 5}, "unique_for needs a unique_key or unique=True"),
        ({"unique_key": "k", "unique_for": -1}, "unique_for must be"),
    ],
)
def test_bad_unique_options_are_refused(
    app: heartq.App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        app.enqueue("report", {}, **options)


def test_on_conflict_raise_names_the_holder_and_stores_nothing(app: heartq.App) -> None:
    """The quiet default answers the holder's id; `on_conflict="raise"` says so
    (`heartq.AlreadyEnqueued`, with the holder's id and the key), on every path."""

    @app.task
    def report(day: int) -> None:
        """One job per day at a time."""

    first = report.options(unique_key="day:1").enqueue(day=1)
    with pytest.raises(heartq.AlreadyEnqueued) as held:
        report.options(unique_key="day:1", on_conflict="raise").enqueue(day=1)
    assert (held.value.job_id, held.value.key) == (first, "day:1")
    assert str(held.value) == f"job {first} already holds unique key 'day:1': nothing stored"
    with pytest.raises(heartq.AlreadyEnqueued):
        asyncio.run(
            app.enqueue_async("report", {"day": 1}, unique_key="day:1", on_conflict="raise")
        )
    # a batch: the others are stored, the exception carries every answer
    with pytest.raises(heartq.AlreadyEnqueued) as batch:
        app.enqueue_many(
            "report",
            [{"day": 2}, {"day": 1}],
            unique_key=lambda a: f"day:{a['day']}",
            on_conflict="raise",
        )
    assert batch.value.ids[1] == first and batch.value.ids[0] != first
    assert len(_jobs(app)) == 2  # day 1 once, day 2 stored
    # a fresh key raises nothing
    assert report.options(unique_key="day:3", on_conflict="raise").enqueue(day=3) != first
    with pytest.raises(ConfigError, match="on_conflict needs a unique_key"):
        report.options(on_conflict="raise").enqueue(day=4)
    with pytest.raises(ConfigError, match="on_conflict must be one of 'return', 'raise', got"):
        report.options(unique_key="k", on_conflict="ignore").enqueue(day=4)


def test_a_batch_whose_jobs_differ_under_one_key_is_refused(app: heartq.App) -> None:
    """Two jobs of one batch with one key and different arguments: only one could be
    stored, so none is, and the error names both; repeats of one job still answer one."""

    @app.task
    def report(day: int) -> None:
        """One job per day at a time."""

    with pytest.raises(ConfigError) as refused:
        app.enqueue_many("report", [{"day": 1}, {"day": 2}], unique_key="nightly")
    assert str(refused.value) == (
        "jobs 0 and 1 of the batch share unique key 'nightly' but differ (arguments "
        '{"day":1} and {"day":2}): only one could be stored; nothing was'
    )
    assert _jobs(app) == []
    same = app.enqueue_many("report", [{"day": 1}, {"day": 1}], unique_key="nightly")
    assert same[0] == same[1] and len(_jobs(app)) == 1


def test_jobs_made_first_are_stored_under_their_ids(app: heartq.App) -> None:
    """`Producer.enqueue_made`: jobs made earlier (`make`: ids chosen then) stored later
    under those ids, as a framework storing at its transaction's commit needs
    (heartq.contrib.django); a unique key held by then answers the holder instead."""
    from heartq.options import Options

    @app.task
    def report(ctx: heartq.JobContext, day: int) -> None:
        """A job of one day."""

    plain = Options()
    made = app.producer.make("report", [{"day": 1}], plain)
    assert app.store.list_jobs(limit=10) == []  # made, not stored
    assert app.producer.enqueue_made(made, [{"day": 1}], plain) == [made.jobs[0].id]
    assert app.get_job(str(made.jobs[0].id))["args"] == {"day": 1}

    keyed = Options(unique_key="day:2")
    holder = app.enqueue("report", {"day": 2}, unique_key="day:2")
    late = app.producer.make("report", [{"day": 2}], keyed)
    assert app.producer.enqueue_made(late, [{"day": 2}], keyed) == [holder]
    assert len(_jobs(app)) == 2


def _args_key(task: str, canonical: str) -> str:
    """The derived key as docs/INTERFACE.md states it, computed here on its own."""
    return f"args:{task}:{hashlib.sha256(canonical.encode()).hexdigest()}"


@on_every_backend  # declared with the task; the keys held by each backend's index
def test_a_unique_task_keys_its_jobs_by_their_arguments(app: heartq.App, run_worker) -> None:
    release = threading.Event()
    ran: list[dict[str, Any]] = []

    @app.task(unique=True)
    def sync_account(account_id: int, filters: dict[str, Any] | None = None) -> None:
        ran.append({"account_id": account_id, "filters": filters})
        release.wait(10)

    with run_worker(app):
        wait_for(lambda: app.store.task_policies().get("sync_account"), 10, what="declared")
        assert app.store.task_policies()["sync_account"].unique
        first = sync_account.enqueue(5, {"since": "2026-11-01", "kind": "full"})
        wait_status(app, first, "running")
        # the same arguments, however given: positional or by name, keys in any order
        assert sync_account.enqueue(
            account_id=5, filters={"kind": "full", "since": "2026-11-01"}
        ) == first
        client = heartq.App(app.url)  # by name, without the task's code: declared
        try:
            by_name = {"filters": {"since": "2026-11-01", "kind": "full"}, "account_id": 5}
            assert client.enqueue("sync_account", by_name) == first
            with pytest.raises(heartq.AlreadyEnqueued) as held:
                client.enqueue("sync_account", by_name, on_conflict="raise")
            assert held.value.job_id == first
        finally:
            client.close()
        other = sync_account.enqueue(5)  # other arguments: another job
        opted_out = sync_account.options(unique=False).enqueue(5, {"since": "2026-11-01",
                                                                   "kind": "full"})
        assert len({first, other, opted_out}) == 3
        release.set()
        for job_id in (first, other, opted_out):
            wait_status(app, job_id, "succeeded")
        again = sync_account.enqueue(5)  # finished, and no window: a new job
        wait_status(app, again, "succeeded")
    assert again != other
    assert len(ran) == 4
    assert app.get_job(first)["unique_key"] == _args_key(
        "sync_account", '{"account_id":5,"filters":{"kind":"full","since":"2026-11-01"}}'
    )
    assert app.get_job(opted_out)["unique_key"] is None


@on_every_backend
def test_unique_true_at_enqueue_with_a_window(app: heartq.App, run_worker) -> None:
    """A task that keys nothing, keyed by one enqueue; `unique_for` counts a finished
    job too. Unicode is kept as written in the canonical JSON."""

    @app.task
    def render(title: str, size: int = 1) -> str:
        return title

    keyed = render.options(unique=True, unique_for=600)
    with run_worker(app):
        first = keyed.enqueue("Zürich", size=2)
        wait_status(app, first, "succeeded")
        assert keyed.enqueue(size=2, title="Zürich") == first  # finished within the window
        assert render.options(unique=True).enqueue("Zürich", size=2) != first  # no window
        assert keyed.enqueue("Zürich") != first  # size left to its default: other args
    assert app.get_job(first)["unique_key"] == _args_key(
        "render", '{"size":2,"title":"Zürich"}'
    )


def test_unique_is_refused_where_it_cannot_mean_one_thing(app: heartq.App) -> None:
    @app.task
    def report(day: int) -> None:
        pass

    refusals = [
        ({"unique": True, "unique_key": "k"},
         "give unique=True (a key from the task and its arguments) or a unique_key, not both"),
        ({"unique": "yes"}, "unique must be True or False, got 'yes'"),
        ({"unique": True, "depends_on": ["x"]}, "depends_on cannot be combined with unique=True"),
    ]  # fmt: skip
    for options, message in refusals:
        with pytest.raises(ConfigError) as refused:
            report.options(**options).enqueue(day=1)
        assert str(refused.value) == message
    with pytest.raises(ConfigError, match=r"^r: unique_for needs unique=True"):
        app.task(name="r", unique_for=60)(lambda: None)
    with pytest.raises(ConfigError, match=r"^r: unique must be True or False"):
        app.task(name="r", unique=1)(lambda: None)  # type: ignore[arg-type]
