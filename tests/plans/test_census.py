"""The plan census (`census.py`): no hot statement's plan turns with the statistics.

One queue is taken through the states a production queue goes through, each with the
statistics it would have: empty, then 1,000 and 100,000 jobs queued (fresh ones in the
ready log, due ones in the claim index), each before PostgreSQL analyzed the table (its
statistics those of the state before) and after; several queues; 300 lanes with work; a
burst drained (statistics of the backlog, then analyzed); the table pruned; 100,000
queued again (statistics of the pruned table, then analyzed); a held xmin horizon. With
`HEARTQ_CENSUS_MILLION=1` the queue is refilled with 1,000,000 jobs after the prune
instead (docs/TESTING.md, "heartq's own suite": the census 73 s against 46 s alone);
every statement's plans and bounds held there as with the 100,000 (`REFILL`). In each,
heartq's own store runs every hot statement (`census.WATCHED`) as a worker, the reaper
and the pruner do, and each run is explained
twice: on the generic plan a worker's session prepares, and planned for its values (a
transaction-mode pooler's case). The checks:

- **no plan turns**: each statement walks the same relations through the same indexes
  in every state (`Plan.walks`), and those pinned in `census/NAME.txt` (written anew
  with `HEARTQ_CENSUS_WRITE=1`, so a change shows in review);
- **no compilation**: no plan is JIT-compiled, though the census asks for it at any cost
  (where the server has JIT: Debian's packages do, `pgserver`'s wheel does not);
- **cost by what is taken**: the buffers a statement reads in each state stay within
  three times those it read with 1,000 jobs queued (plus 200): a claim of ten reads
  what ten cost, whatever is queued (a plan that reads a table or an index whole reads
  thousands). The held horizon is left out of this one (its dead
  versions cost the lease statements what `test_held_horizon.py` bounds).

With PostgreSQL's defaults (JIT on, sequential and bitmap scans allowed) and the index
of running jobs by worker as it was before schema v28, this census found 47 turns,
among them claims that read a whole table, keyed claims that read every running job per
key, and JIT at every statement.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from heartq.lifecycle.fate import succeeded
from heartq.store.postgres import PostgresStore
from heartq.store.postgres.connection import parse_url
from tests import pg_harness, support
from tests.plans import census

GOLDEN = Path(__file__).parent / "census"
REFERENCE = "1,000 queued, analyzed"
REFILL = 1_000_000 if os.environ.get("HEARTQ_CENSUS_MILLION", "") not in ("", "0") else 100_000
"""The jobs queued again after the prune, before the horizon is held: a million under
`HEARTQ_CENSUS_MILLION=1` (its fill and statistics a third of that census's time), else
100,000. Every statement walked the same plans in the million's states as in the
100,000's, its buffers at most 92 more, none past 43% of its bound."""
HORIZON = f"{REFILL:,} queued again, horizon held"
FAST = {
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "autovacuum": "off",
    "shared_buffers": "512MB",
    "max_wal_size": "4GB",
}
"""The census cluster's settings: its data is thrown away, so it writes only as fast as it
can (the fills are a third of the census's time), and autovacuum never runs
(a state's statistics are those its own steps took). None is a planner setting: the plans
are those of PostgreSQL's defaults."""


def _states(store: PostgresStore, record: census.Census, mp: pytest.MonkeyPatch) -> None:
    """The queue through its states, the census recorded in each."""
    exercise = census.Exercise(store)

    def sql(*statements: str) -> None:
        with store.link.pool.autocommit() as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]

    def fill(count: int, queue: str = "default", ready: bool = True, lanes: int = 1) -> None:
        with store.link.pool.autocommit() as conn:
            census.fill(conn, count, queue, ready, lanes)

    def state(name: str) -> None:
        began = time.monotonic()
        exercise.run()  # the state's first run pays what its change left (dead entries)
        with record.recording(name, mp):
            exercise.run()
        print(f"census: {name}: {time.monotonic() - began:.1f} s", flush=True)

    # Statistics and vacuums only where a state says: autovacuum's would fall at random
    # moments, and a statement's buffers with them (the dead entries a vacuum removes).
    tables = ("job_documents", "leases", "ready", "job_ends", "ended_executions", "claim_marks",
              "lanes", "workers")
    sql(*(f"ALTER TABLE {table} SET (autovacuum_enabled = false)" for table in tables))
    state("empty")
    sql("ANALYZE")
    state("empty, analyzed")
    fill(1000)
    state("1,000 queued, statistics of none")
    sql("ANALYZE")
    state(REFERENCE)
    fill(99_000)
    state("100,000 queued, statistics of 1,000")
    sql("ANALYZE")
    state("100,000 queued, analyzed")
    fill(100_000, ready=False)
    state("100,000 due, statistics of fresh ones")
    sql("ANALYZE")
    state("100,000 due, analyzed")
    fill(20_000, queue="other")
    fill(20_000, queue="other", ready=False)
    state("several queues")
    fill(3000, lanes=300)
    state("300 lanes")
    # The burst drained: every queued job of both queues succeeded (finished later than
    # the pruner's retention reaches), the tables vacuumed as autovacuum would. A job of
    # the ready log ends on a row of its own, its document left as it was; a due one on
    # its document.
    sql("INSERT INTO job_ends (job_id, status, execution_id, attempts, started_at,"
        " heartbeat_at, finished_at, claimed_ahead)"
        " SELECT id, 'succeeded', 1, 1, now(), now(), now() + interval '1 day', false"
        " FROM job_documents WHERE status = 'queued' AND ready_xid IS NOT NULL"
        " AND queue IN ('default', 'other')",
        "UPDATE job_documents SET status = 'succeeded', finished_at = now() + interval '1 day'"
        " WHERE status = 'queued' AND ready_xid IS NULL AND queue IN ('default', 'other')",
        "DELETE FROM ready WHERE queue IN ('default', 'other')",
        "VACUUM job_documents, ready, job_ends")  # fmt: skip
    fill(1000)
    state("a burst drained, statistics of the backlog")
    sql("ANALYZE")
    state("a burst drained, analyzed")
    sql("DELETE FROM job_documents AS d USING job_ends AS e WHERE e.job_id = d.id",
        "DELETE FROM job_ends", "DELETE FROM job_documents WHERE status = 'succeeded'",
        "VACUUM ANALYZE")
    state("pruned")
    fill(REFILL)
    state(f"{REFILL:,} queued again, statistics of the pruned table")
    sql("ANALYZE")
    state(f"{REFILL:,} queued again, analyzed")
    with psycopg.connect(parse_url(store.link.url)[0]) as held:
        held.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        held.execute("SELECT pg_current_xact_id()")  # a snapshot and an id held
        for _ in range(20):
            batch = store.claim(census.WORKER, ["default"], 500, lease=census.LEASE)
            store.finish([succeeded(job, None) for job in batch])
        state(HORIZON)
        held.rollback()


@pytest.fixture(scope="module")
def taken() -> Iterator[census.Census]:
    """The census of every state (built once: about 45 s, a third of it the fills),
    on a private cluster: no other session's transactions in the marks' pending lists
    (every one running in the cluster is listed, and probed once it ended), no other
    run's load in the statements' buffers."""
    record = census.Census()
    mp = pytest.MonkeyPatch()
    cluster = pg_harness.PrivateCluster(settings=FAST)
    try:
        support.wait_for(lambda: pg_harness.answers(cluster.url), 30, "the private cluster")
        with psycopg.connect(cluster.url) as conn:
            row = conn.execute("SELECT pg_jit_available()").fetchone()
        record.jit_available = bool(row and row[0])
        store = PostgresStore(f"{cluster.url}?schema=census")
        try:
            store.link.migrate()
            _states(store, record, mp)
        finally:
            store.link.close()
    finally:
        cluster.close()
    yield record


def _golden(name: str, plans: list[census.Plan]) -> str:
    lines = [f"# {name}: the walks of its plans in every state (tests/plans/test_census.py)"]
    for mode in census.MODES:
        for case in sorted({p.case for p in plans if p.mode == mode}):
            walks = next(p.walks for p in plans if (p.mode, p.case) == (mode, case))
            lines += [f"{mode}, case {case}:", *(f"  {walk}" for walk in walks)]
    return "\n".join(lines) + "\n"


SLACK = 250
"""Buffers a statement may read in any state over three times what it read in the
reference state. A claim's in the state of 300 lanes is what it reads lane by lane (up to
its limit, never the backlog): 704 of v39's at a reference of 185, 652-664 of v40's at
141-153 (its claim reads fewer in every state, its reference most: 200 was then too
little, 2026-11-28)."""


STANDS_IN_FOR = {"CLAIM_IN_ORDER": "CLAIM_ONE_QUEUE", "CLAIM_QUEUES_IN_ORDER": "CLAIM"}
"""Statements held to the bound of the one they stand in for, where that is larger. A
run is matched with the reference state's by its place among the exercise's runs, and
the claim in order's second run of `default` answers there that turns are due (23
buffers: the key's lane is met first), while in the state of 300 lanes the key's lane
lies below ten lanes of higher priorities and that run takes ten jobs (506-515 buffers,
2026-11-28). A run that took jobs is what the claim with turns' reference is (154-166
buffers, as the claim in order's first run)."""


@pytest.mark.long(40)
@pytest.mark.timeout(600)  # building the states takes 30 s on a quiet machine
def test_the_plan_census(taken: census.Census) -> None:
    """Every hot statement seen in both modes; its walks the same in every state and as
    pinned; nothing JIT-compiled; its buffers bounded by what it took."""
    by_name: dict[str, list[census.Plan]] = {}
    for plans in taken.plans.values():
        for plan in plans:
            by_name.setdefault(plan.name, []).append(plan)
    problems = [f"{n}: never sent" for n in census.WATCHED if n not in by_name]
    reference = {(p.name, p.mode, p.case): p.buffers for p in taken.plans[REFERENCE]}
    for name, plans in sorted(by_name.items()):
        golden = GOLDEN / f"{name}.txt"
        expected = _golden(name, plans)
        if os.environ.get("HEARTQ_CENSUS_WRITE"):
            golden.write_text(expected)
        elif not golden.exists() or golden.read_text() != expected:
            problems.append(f"{name}: its walks are not those pinned in {golden.name}:\n"
                            f"{expected}")  # fmt: skip
    for state, plans in taken.plans.items():
        for plan in plans:
            first = next(p for p in by_name[plan.name]
                         if (p.mode, p.case) == (plan.mode, plan.case))  # fmt: skip
            if plan.walks != first.walks:
                problems.append(f"{plan.name} ({plan.mode}, {plan.case}) turned in {state!r}:\n"
                                f"  {first.walks}\n  {plan.walks}\n{plan.shape}")  # fmt: skip
            if plan.jit:
                problems.append(f"{plan.name} ({plan.mode}) JIT-compiled in {state!r}")
            read = reference.get((plan.name, plan.mode, plan.case), plan.buffers)
            stands_in = [b for (n, m, _), b in reference.items()
                         if (n, m) == (STANDS_IN_FOR.get(plan.name), plan.mode)]  # fmt: skip
            bound = 3 * max([read, *stands_in]) + SLACK
            if state != HORIZON and plan.buffers > bound:
                problems.append(f"{plan.name} ({plan.mode}) read {plan.buffers} buffers in"
                                f" {state!r}, over {bound}:\n{plan.shape}")  # fmt: skip
    if not taken.jit_available:
        problems = [p for p in problems if "JIT" not in p]  # nothing to compile with
    assert not problems, "\n".join(problems)
