"""`ctx.transaction()`: a task's own writes and its job's completion in one transaction,
fenced by the execution id, so the effects land exactly once (docs/design/pipelines.md, "Effects
exactly once"). In-process pools here, both backends; the process pool and real crashes
are in tests/integration/test_transactional.py, the exactly-once ledger under faults in
the chaos runner."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import heartq
from heartq.model import DetectedBy, JobStatus, NewJob
from heartq.store.postgres.connection import parse_url
from tests.conftest import on_every_backend

PLACEHOLDER = {"sqlite": "?", "postgres": "%s"}


class Effects:
    """The application's own table in the queue's database, and how to write and count
    its rows from a task's transaction (`?` on SQLite, `%s` on PostgreSQL)."""

    def __init__(self, app: heartq.App) -> None:
        self.backend = "sqlite" if app.store.link.url.startswith("sqlite") else "postgres"
        self.table = f"payments_{uuid.uuid4().hex[:12]}"
        if self.backend == "postgres":
            # In the test's schema, not public: it goes with the schema, even after a run
            # that was killed (tests/leftovers.py), as no table left in public would.
            self.table = f"{parse_url(app.store.link.url)[1]}.{self.table}"
        self.mark = PLACEHOLDER[self.backend]
        self.app = app

    def sql(self, template: str) -> str:
        return template.format(table=self.table, p=self.mark)

    def run(self, statement: str, *params: Any) -> list[Any]:
        """A statement on a connection of its own, committed (setup and checks)."""
        with PlainConnection(self.app) as conn:
            cursor = conn.execute(self.sql(statement), params)
            rows = cursor.fetchall() if cursor.description else []
            conn.commit()
            return list(rows)

    def count(self, order_id: int | None = None) -> int:
        if order_id is None:
            return int(self.run("SELECT count(*) FROM {table}")[0][0])
        return int(self.run("SELECT count(*) FROM {table} WHERE order_id = {p}", order_id)[0][0])


class PlainConnection:
    """A plain connection to the queue's database (the application's own)."""

    def __init__(self, app: heartq.App) -> None:
        self.app = app

    def __enter__(self) -> Any:
        url = self.app.store.link.url
        if url.startswith("sqlite"):
            self.conn: Any = sqlite3.connect(self.app.store.link.path)  # type: ignore[attr-defined]
        else:
            self.conn = psycopg.connect(parse_url(url)[0])
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


@pytest.fixture
def effects(app: heartq.App) -> Iterator[Effects]:
    app.migrate()
    fx = Effects(app)
    fx.run("CREATE TABLE {table} (order_id integer NOT NULL, execution_id integer NOT NULL)")
    yield fx
    fx.run("DROP TABLE {table}")


def test_the_effects_and_the_completion_commit_together(
    app: heartq.App, effects: Effects, run_worker: Callable[..., Any]
) -> None:
    insert = effects.sql("INSERT INTO {table} VALUES ({p}, {p})")

    @app.task
    def pay(ctx: heartq.JobContext, order_id: int) -> str:
        with ctx.transaction() as conn:
            conn.execute(insert, (order_id, ctx.execution_id))
        return f"paid {order_id}"

    @app.task
    async def pay_async(ctx: heartq.JobContext, order_id: int) -> str:
        async with ctx.transaction() as conn:
            conn.execute(insert, (order_id, ctx.execution_id))
        return f"paid {order_id} (async)"

    with run_worker(app):
        assert app.result(pay.enqueue(order_id=1), timeout=15) == "paid 1"
        assert app.result(pay_async.enqueue(order_id=2), timeout=15) == "paid 2 (async)"
    assert effects.count(1) == 1 and effects.count(2) == 1
    for job in app.store.list_jobs():
        done = app.get_job(job["id"])
        assert [e["outcome"] for e in done["executions"]] == ["succeeded"]


def test_an_error_in_the_block_rolls_back_the_task_s_writes(
    app: heartq.App, effects: Effects, run_worker: Callable[..., Any]
) -> None:
    insert = effects.sql("INSERT INTO {table} VALUES ({p}, {p})")

    @app.task(max_retries=1, retry_backoff=0.05)
    def pay_twice(ctx: heartq.JobContext, order_id: int) -> int:
        with ctx.transaction() as conn:
            conn.execute(insert, (order_id, ctx.execution_id))
            if ctx.attempt == 1:
                raise RuntimeError("the card was declined after the write")
        return ctx.attempt

    with run_worker(app):
        job_id = pay_twice.enqueue(order_id=7)
        assert app.result(job_id, timeout=15) == 2
    assert effects.count(7) == 1
    rows = effects.run("SELECT execution_id FROM {table}")
    assert [r[0] for r in rows] == [2]
    outcomes = [e["outcome"] for e in app.get_job(job_id)["executions"]]
    assert outcomes == ["failed", "succeeded"]


def test_a_stale_attempt_rolls_back_and_raises_lease_lost(
    app: heartq.App, effects: Effects
) -> None:
    """The store's side, driven by hand: attempt 1 is reclaimed while it runs; its
    transaction's writes roll back and it is told `LeaseLost`; attempt 2's land."""
    store = app.store
    insert = effects.sql("INSERT INTO {table} VALUES ({p}, {p})")
    (job_id,) = store.enqueue([NewJob(task="pay", args_json="{}", max_retries=3)])
    first = store.claim("w1", ["default"], 1, 60.0)[0]
    store.crash_attempt(first.lease, {"reason": "presumed dead"}, DetectedBy.LEASE_EXPIRED)
    second = store.claim("w2", ["default"], 1, 60.0)[0]
    assert second.execution_id == first.execution_id + 1

    with pytest.raises(heartq.LeaseLost), store.completing(first.lease) as conn:
        conn.execute(insert, (1, first.execution_id))
    assert effects.count() == 0
    assert store.get_job(job_id)["status"] == JobStatus.RUNNING

    with store.completing(second.lease) as conn:
        conn.execute(insert, (1, second.execution_id))
    assert effects.count() == 1
    assert store.get_job(job_id)["status"] == JobStatus.SUCCEEDED
    assert store.save_result(second.lease, '"ok"') and not store.save_result(first.lease, "1")
    assert store.get_job(job_id)["result"] == "ok"


def test_once_per_attempt_and_a_failure_after_the_commit_keeps_the_job_succeeded(
    app: heartq.App, effects: Effects, run_worker: Callable[..., Any]
) -> None:
    insert = effects.sql("INSERT INTO {table} VALUES ({p}, {p})")

    @app.task(max_retries=3)
    def greedy(ctx: heartq.JobContext) -> None:
        with ctx.transaction() as conn:
            conn.execute(insert, (1, ctx.execution_id))
        with ctx.transaction() as conn:  # the job is done: refused, nothing written
            conn.execute(insert, (2, ctx.execution_id))

    with run_worker(app):
        job_id = greedy.enqueue()
        # succeeded at the first commit; what the code did after cost it its result,
        # which its reader is told rather than handed a None the task never returned
        with pytest.raises(heartq.ResultLost, match="ended failed after its transaction"):
            app.result(job_id, timeout=15)
    assert effects.count(1) == 1 and effects.count(2) == 0
    done = app.get_job(job_id)
    assert [e["outcome"] for e in done["executions"]] == ["succeeded"]
    assert done["result"] is None and "RuntimeError: ctx.transaction()" in done["result_lost"]


@on_every_backend
def test_a_tasks_own_uuids_read_as_on_a_connection_of_its_own(
    app: heartq.App, backend: str
) -> None:
    """heartq reads its job ids (PostgreSQL's `uuid`, schema v44) as `str`; the connection
    it lends a task reads the task's own `uuid` values as psycopg does (`uuid.UUID`), in
    text and in binary, and heartq's reads are `str` again once the block ended."""
    if backend != "postgres":
        pytest.skip("SQLite has no uuid type")
    store = app.store
    (job_id,) = store.enqueue([NewJob(task="pay", args_json="{}"), NewJob("pay", "{}")])[:1]
    job = store.claim("w1", ["default"], 1, 60.0)[0]
    made = uuid.uuid4()
    with store.completing(job.lease) as conn:
        assert conn.execute("SELECT %s::uuid AS u", [made]).fetchone()["u"] == made
        with conn.cursor(binary=True) as cursor:
            assert cursor.execute("SELECT %s::uuid AS u", [made]).fetchone()["u"] == made
    assert store.get_job(job_id)["status"] == JobStatus.SUCCEEDED
    (after,) = store.claim("w1", ["default"], 1, 60.0)  # a binary cursor's ids
    assert isinstance(after.id, str) and after.id > job_id
