"""`ctx.transaction()` with real worker processes: the task's writes and its job's
completion commit together, so a process killed between its writes and the commit
leaves neither, and the next attempt's land exactly once (docs/design/pipelines.md, "Effects
exactly once")."""

from __future__ import annotations

import pytest

from tests.conftest import on_every_backend, only_on

from .conftest import Harness

pytestmark = pytest.mark.slow


def ledger_table(harness: Harness) -> str:
    """The application's table, in the queue's database (PostgreSQL: the test's schema,
    named in full, since a task's statements run on the default search path)."""
    name = "ledger" if harness.backend == "sqlite" else f"{harness.schema}.ledger"
    harness.sql(f"CREATE TABLE {name} (job_id text NOT NULL, execution_id integer NOT NULL)")
    return name


@on_every_backend  # a task's transaction on the queue's own database
@pytest.mark.parametrize("pool", ["process", "thread"])
def test_a_process_killed_inside_the_transaction_leaves_nothing(
    harness: Harness, pool: str
) -> None:
    table = ledger_table(harness)
    worker = harness.start_worker("--pool", pool, "--concurrency", "2")
    job_id = harness.enqueue("ledger_write", {"table": table, "crash_first": "process"})
    ok_id = harness.enqueue("ledger_write", {"table": table})
    harness.wait_for(lambda: harness.path(f"wrote-{job_id}-1").exists(), 15, "the write")
    if pool == "thread":  # the worker itself died: another one takes its jobs over
        harness.wait_for(lambda: not worker.alive(), 10, "the worker to die")
        harness.start_worker("--pool", pool)
    # the result lands just after the commit that succeeded the job: wait for both
    done = harness.wait_job(job_id, lambda j: j["result"], 30, "the job's result")
    ok = harness.wait_status(ok_id, "succeeded", 30)
    rows = harness.sql(f"SELECT job_id, execution_id FROM {table}")
    # Each job's effect exactly once, from the execution that succeeded it: never the
    # write of the execution killed inside its transaction.
    assert sorted(rows) == sorted([(job_id, 2), (ok_id, winner(ok))]), rows
    assert [e["outcome"] for e in done["executions"]] == ["crashed", "succeeded"]
    assert done["result"]["execution_id"] == 2


def winner(job: dict[str, object]) -> int:
    (succeeded,) = [e for e in job["executions"] if e["outcome"] == "succeeded"]  # type: ignore[attr-defined]
    return int(succeeded["execution_id"])


@only_on("postgres")
def test_tasks_enqueuing_in_their_transactions_fill_every_slot(harness: Harness) -> None:
    """Eight tasks at concurrency 4, at the default pool size (2), each enqueuing a job
    into a new lane of the ready log inside its `ctx.transaction()`: the enqueue needs
    no second pooled connection (its clock read on the task's own, the lane made aside
    when none is free), so no task waits for one another holds. Each waited for a pooled
    connection to read the clock and make the lane, while the others held both in their
    transactions: after 8 s one of eight had succeeded, its peers' leases lost."""
    # A 4 s lease (the suites' steady one): this test is not about lease timing. Its
    # tasks' results are saved after their commits, by a completer that may wait for a
    # connection the tasks also use, longer on a loaded machine than FAST's 0.6 s: kept
    # while the worker beats (test_lost_results.py), but a late beat lapses a 0.6 s lease.
    harness.start_worker("--concurrency", "4", settings={"--lease": "4"})
    jobs = [harness.enqueue("enqueue_in_transaction", {"priority": p}) for p in range(8)]
    # each result lands just after the commit that succeeded its job: wait for it
    children = [harness.wait_job(job, lambda j: j["result"], 30, "its result")["result"]
                for job in jobs]  # fmt: skip
    for child in children:
        harness.wait_status(child, "succeeded", 30)
