"""Chains, groups and `depends_on` through the client API, run by a real worker
(`heartq.testing.drain`: a real `Worker` on a thread), on both backends."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import psycopg
import pytest

import heartq
from heartq.store.postgres.connection import parse_url
from heartq.testing import drain
from tests.conftest import on_every_backend


def _tasks(app: heartq.App) -> dict[str, Any]:
    @app.task(max_retries=0)
    def square(x: int) -> int:
        if x < 0:
            raise ValueError("no negative squares")
        return x * x

    @app.task
    def total(results: list[Any], label: str = "sum") -> str:
        return f"{label}={sum(r or 0 for r in results)} of {results}"

    @app.task
    async def add(x: int, y: int = 0) -> int:
        return x + y

    @app.task
    def cannot_take_results(*, label: str) -> None: ...

    return {"square": square, "total": total, "add": add, "odd": cannot_take_results}


def test_a_group_callback_gets_every_result_in_order(app: heartq.App) -> None:
    t = _tasks(app)
    members = [t["square"].s(x) for x in (3, 1, 2)]
    pipeline = heartq.group(*members, callback=t["total"].s(label="squares")).enqueue()
    assert isinstance(pipeline, heartq.Pipeline) and len(pipeline.ids) == 4
    assert pipeline.tail == (pipeline.last,) == (pipeline.ids[-1],)
    callback = app.get_job(pipeline.last)
    assert callback["status"] == "waiting" and callback["dependency_results"]
    assert callback["args"] == {"label": "squares"}  # the results come at run time
    drain(app)
    assert app.result(pipeline.last, timeout=5) == "squares=14 of [9, 1, 4]"


def test_a_chain_runs_its_steps_in_order(app: heartq.App) -> None:
    t = _tasks(app)
    inner = heartq.group(t["square"].s(4), t["square"].s(5), callback=t["total"].s())
    pipeline = heartq.chain(t["add"].s(1, 2), inner, t["add"].s(10).set(priority=5)).enqueue()
    first, g1, g2, callback, last = pipeline.ids
    assert [d["id"] for d in app.get_job(g1)["depends_on"]] == [first]
    assert [d["id"] for d in app.get_job(callback)["depends_on"]] == [g1, g2]
    assert [d["id"] for d in app.get_job(last)["depends_on"]] == [callback]
    assert app.get_job(last)["priority"] == 5
    drain(app)
    started = {i: app.get_job(i)["started_at"] for i in pipeline.ids}
    ended = {i: app.get_job(i)["finished_at"] for i in pipeline.ids}
    assert ended[first] <= started[g1] and ended[g2] <= started[callback]
    assert ended[callback] <= started[last]
    assert app.result(callback, timeout=5) == "sum=41 of [16, 25]"
    assert app.result(last, timeout=5) == 10


def test_a_failed_member_blocks_the_callback_cancels_it_or_it_runs_anyway(
    app: heartq.App,
) -> None:
    t = _tasks(app)
    blocked = heartq.group(t["square"].s(-1), t["square"].s(2), callback=t["total"].s())
    cancelled = heartq.group(
        t["square"].s(-1),
        t["square"].s(2),
        callback=t["total"].s().set(on_dependency_failure="cancel"),
    )
    anyway = heartq.group(
        t["square"].s(-1),
        t["square"].s(2),
        callback=t["total"].s().set(on_dependency_failure="run"),
    )
    first, second, third = blocked.enqueue(), cancelled.enqueue(), anyway.enqueue()
    drain(app)
    with pytest.raises(heartq.JobDead, match="no negative squares") as held:
        app.result(first.last, timeout=5)  # the root cause: the member's own error
    assert (held.value.job_id, held.value.blocked) == (first.ids[0], first.last)
    with pytest.raises(heartq.JobCancelled, match=r"dependency_failed: job .* ended dead"):
        app.result(second.last, timeout=5)
    assert app.result(third.last, timeout=5) == "sum=4 of [None, 4]"


def test_a_pipeline_is_one_transaction(app: heartq.App) -> None:
    t = _tasks(app)
    before = len(app.store.list_jobs())
    with pytest.raises(heartq.BadArguments):
        heartq.chain(t["add"].s(1), t["add"].s(nope=1)).enqueue()
    with pytest.raises(heartq.BadArguments, match="cannot take its dependencies' results"):
        heartq.group(t["add"].s(1), callback=t["odd"].s(label="x")).enqueue()
    with pytest.raises(heartq.DependencyNotFound):
        heartq.chain(t["add"].s(1), t["add"].s(2).set(depends_on=["no-such-job"])).enqueue()
    assert len(app.store.list_jobs()) == before
    with pytest.raises(heartq.ConfigError):
        heartq.chain()


@pytest.mark.parametrize(
    ("option", "value"),
    [("unique_key", "x"), ("unique", True), ("unique_for", 5.0), ("on_conflict", "raise")],
)
def test_a_step_takes_no_unique_key(app: heartq.App, option: str, value: object) -> None:
    """A step answered by the id of the job holding its key would not be stored, and the
    steps after it would wait for it: such a chain, enqueued twice, named as its `last` a
    job that never was. `Signature.set` refuses the unique key's options (its type says
    so too: `StepOptions`), in one line, and nothing is stored."""
    t = _tasks(app)
    set_options: Any = t["add"].s(1, 2).set
    with pytest.raises(heartq.ConfigError) as refused:
        heartq.chain(set_options(**{option: value}), t["add"].s(3)).enqueue()
    said = str(refused.value)
    assert said.startswith(
        "Signature.set() takes any enqueue option but unique_key, unique, unique_for, "
        "on_conflict, "
        f"got {option}: a step answered by the id of a job holding its key would not be "
        "stored"
    )
    assert "\n" not in said
    assert app.store.list_jobs() == []


def test_a_step_of_a_unique_task_is_not_keyed(app: heartq.App) -> None:
    """A task's `unique=True` keys its plain enqueues, never a pipeline's steps, nor a job
    that waits for others: the same chain enqueued twice is stored twice."""

    @app.task(unique=True)
    def export(part: int) -> int:
        return part

    first = heartq.chain(export.s(1), export.s(2)).enqueue(app)
    second = heartq.chain(export.s(1), export.s(2)).enqueue(app)
    assert set(first.ids).isdisjoint(second.ids)
    waiting = export.options(depends_on=[first.last]).enqueue(1)
    assert waiting not in first.ids
    assert all(job["unique_key"] is None for job in app.store.list_jobs(limit=10))
    keyed = export.enqueue(7)
    assert app.get_job(keyed)["unique_key"].startswith("args:export:")


def test_a_pipeline_warns_once_per_task_not_declared(app: heartq.App) -> None:
    """Enqueued through an app that neither registers its tasks nor finds them declared,
    a pipeline warns its caller once per such task, as `App.enqueue` does: the caller's
    line, the queue its steps chose, how many of its jobs take the defaults."""
    t = _tasks(app)
    other = heartq.App(app.url)
    try:
        steps = [t["add"].s(1), t["add"].s(2), t["square"].s(3)]
        with pytest.warns(heartq.TaskNotDeclaredWarning) as heard:
            pipeline = heartq.chain(*(s.set(queue="fast") for s in steps)).enqueue(other)
    finally:
        other.close()
    warned = [w for w in heard if issubclass(w.category, heartq.TaskNotDeclaredWarning)]
    assert [w.filename for w in warned] == [__file__, __file__]
    add, square = (str(w.message) for w in warned)
    assert add.startswith("task 'add' is not declared yet") and "the 2 jobs take" in add
    assert square.startswith("task 'square' is not declared yet") and "the job takes" in square
    assert "queue 'fast'" in add and "queue 'fast'" in square
    assert [app.get_job(i)["queue"] for i in pipeline.ids] == ["fast"] * 3


def test_depends_on_through_every_way_in(app: heartq.App) -> None:
    t = _tasks(app)
    first = t["add"].enqueue(1, 1)
    pipeline = heartq.chain(t["add"].s(2)).enqueue()
    by_name = app.enqueue("add", {"x": 3}, depends_on=[first, pipeline])
    bound = t["add"].options(depends_on=first).enqueue(4)
    many = app.enqueue_many("add", [{"x": 5}, {"x": 6}], depends_on=[by_name])
    for job_id, deps in [
        (by_name, [first, pipeline.last]),
        (bound, [first]),
        (many[0], [by_name]),
        (many[1], [by_name]),
    ]:
        job = app.get_job(job_id)
        assert job["status"] == "waiting" and [d["id"] for d in job["depends_on"]] == deps
    drain(app)
    assert [app.result(i, timeout=5) for i in (by_name, bound, *many)] == [3, 4, 5, 6]


@on_every_backend  # the caller's own connection
def test_a_pipeline_in_the_callers_transaction(app: heartq.App) -> None:
    t = _tasks(app)
    app.migrate()
    url = app.store.link.url
    if url.startswith("sqlite"):
        conn: Any = sqlite3.connect(app.store.link.path)  # type: ignore[attr-defined]
    else:
        conn = psycopg.connect(parse_url(url)[0])
    try:
        rolled_back = heartq.chain(t["add"].s(1), t["add"].s(2)).enqueue(connection=conn)
        conn.rollback()
        kept = heartq.chain(t["add"].s(1), t["add"].s(2)).enqueue(connection=conn)
        conn.commit()
    finally:
        conn.close()
    ids = {job["id"] for job in app.store.list_jobs()}
    assert not ids & set(rolled_back.ids) and set(kept.ids) <= ids
    drain(app)
    assert app.result(kept.last, timeout=5) == 2


def test_cancelling_a_waiting_step_cancels_the_rest(app: heartq.App) -> None:
    t = _tasks(app)
    first, second, third = heartq.chain(t["add"].s(1), t["add"].s(2), t["add"].s(3)).enqueue().ids
    assert app.cancel(second) is heartq.CancelResult.CANCELLED
    assert [app.get_job(i)["status"] for i in (second, third)] == ["cancelled", "cancelled"]
    drain(app)
    assert app.get_job(first)["status"] == "succeeded"
    assert app.get_job(third)["status"] == "cancelled"


@on_every_backend  # the caller's own connection
def test_depends_on_in_an_asyncio_connections_transaction(app: heartq.App) -> None:
    """The enqueue's program of statements runs on a `psycopg.AsyncConnection` too: the
    dependency locked and checked there, the job waiting once the transaction commits."""
    if app.store.link.url.startswith("sqlite"):
        pytest.skip("SQLite takes no asyncio connection")
    t = _tasks(app)
    first = t["add"].enqueue(1)

    async def main() -> tuple[str, str]:
        conninfo = parse_url(app.store.link.url)[0]
        async with await psycopg.AsyncConnection.connect(conninfo) as conn:
            async with conn.transaction():
                then = await app.enqueue_async("add", {"x": 2}, depends_on=[first], connection=conn)
                after = await t["add"].options(depends_on=then, connection=conn).enqueue_async(3)
            with pytest.raises(heartq.DependencyNotFound):
                async with conn.transaction():
                    await app.enqueue_async("add", {"x": 4}, depends_on=["nope"], connection=conn)
        return then, after

    then, after = asyncio.run(main())
    assert [app.get_job(i)["status"] for i in (then, after)] == ["waiting", "waiting"]
    drain(app)
    assert app.result(after, timeout=5) == 3
