"""The lease statements under a held xmin horizon: what the heartbeat and the lease reclaimer's
scan read, in buffers and index entries, before and after jobs are claimed and finished
while another session pins the horizon (issue 43; docs/design-notes/hot-path.md, "What
goes wrong today").

On a fresh database of `--url`'s server: `--running` jobs are claimed by one worker and
stay running (the heartbeat renews them); another connection then opens a REPEATABLE
READ transaction and holds its snapshot and transaction id; `--jobs` more are enqueued,
claimed and finished by heartq's own statements under it (50 a batch, each claimed with
a lease that has expired when the reclaim scan is measured, as the leases of every job
claimed over a lease before a reclaim have), the holder's heartbeat committed `--beats`
times in between, as a worker's would. Each measured statement runs under `EXPLAIN
(ANALYZE)` in a transaction that is rolled back: the buffers it touched in the queue's
tables and indexes (`pg_stat_get_xact_blocks_fetched`: hit or read, planning included),
and the index entries its index scans returned (`pg_stat_get_xact_tuples_returned` of
the schema's indexes: dead entries a scan walks over count too), this transaction's own
counters. Counts, not times: they do not depend on the machine's load. Measured three
times: pinned with nothing claimed since (`pinned`), pinned after the churn (`churned`),
after the holder went and a VACUUM (`released`). Figures printed, never asserted here
(tests/plans/test_held_horizon.py asserts them):

    .venv/bin/python bench/held_leases.py --jobs 20000 --running 50 --beats 20
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import dict_row

from heartq.lifecycle.fate import succeeded
from heartq.model import Lease, NewJob, Renewal, WorkerInfo
from heartq.store import documents
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.connection import parse_url

DATABASE = "heartq_bench_leases"
HOLDER = "holder"
CHURN = "churn"
BATCH = 50
SHORT_LEASE = 0.001
PHASES = ("pinned", "churned", "released")
Counts = dict[str, tuple[int, int]]
"""Per statement: (buffers, index entries)."""


def _database_url(server: str, database: str) -> str:
    """`server`'s URL with its database replaced by `database`."""
    return urlsplit(server)._replace(path=f"/{database}").geturl()


def fresh_database(server: str, database: str = DATABASE) -> str:
    """The url of `database` (a plain name), dropped and made again on `server`."""
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {database}")
    return _database_url(server, database)


COUNTERS = """
SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint AS buffers,
       coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid))
                FILTER (WHERE c.relkind = 'i'), 0)::bigint AS entries
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'i', 't')
"""


def measure(url: str, statement: str, params: dict[str, Any]) -> tuple[int, int]:
    """(buffers, index entries) of one run of `statement` on the queue of heartq URL
    `url`, rolled back: this transaction's own counters of the schema's tables and
    indexes before and after it. A plan's top node does not count what a
    data-modifying CTE its result does not read did (the heartbeat's worker row): these
    counters do."""
    conninfo, schema = parse_url(url)
    options = f"-c search_path={schema}"
    with psycopg.connect(conninfo, row_factory=dict_row, options=options) as conn:
        try:
            before = conn.execute(COUNTERS, {"schema": schema}).fetchone()
            conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).fetchall()
            after = conn.execute(COUNTERS, {"schema": schema}).fetchone()
        finally:
            conn.rollback()
    assert before is not None and after is not None
    return (
        int(after["buffers"]) - int(before["buffers"]),
        int(after["entries"]) - int(before["entries"]),
    )


def statements(
    store: PostgresStore, held: list[Lease], lease: float
) -> dict[str, tuple[str, dict[str, Any]]]:
    """The measured statements with their parameters: the holder's heartbeat of its
    running jobs, and the lease reclaimer's two scans (workers past their lease; detached attempts
    past their deadline). Each must stay flat."""
    docs = [documents.renewal_doc(Renewal(x)) for x in held]
    beat = {"worker_id": HOLDER, "lease": lease, "now": None}
    return {
        "heartbeat": (pg_q.HEARTBEAT, {**store.dialect.batch("renewals", docs), **beat}),
        "reclaim: workers": (pg_q.EXPIRED_WORKERS, {"now": None, "limit": 100}),
        "reclaim: detached": (pg_q.SELECT_DETACHED, {"now": None, "limit": 100}),
    }


WALK = "a gone worker's attempts"
"""The walk the worker's lease keeps (docs/design-notes/hot-path.md, "What this design does
not make flat"): the reclaim of a worker past its lease reads its running attempts through
`jobs_worker_idx`, once per gone worker. Measured, not flat."""


def churn(store: PostgresStore, jobs: int, beat: Any, beats: int) -> None:
    """`jobs` no-op jobs enqueued, claimed and finished, `BATCH` at a time, each claimed
    with a lease of `SHORT_LEASE`; `beat()` called `beats` times, spread over the
    batches."""
    batches = -(-jobs // BATCH)
    every = max(1, batches // beats) if beats > 0 else 0
    done = batch = beaten = 0
    while done < jobs:
        store.enqueue([NewJob("noop", "{}") for _ in range(BATCH)])
        claimed = store.claim(CHURN, ["default"], BATCH, lease=SHORT_LEASE)
        if not claimed:
            raise RuntimeError("the churn claimed nothing: is another worker on the queue?")
        store.finish([succeeded(job, None) for job in claimed])
        done += len(claimed)
        batch += 1
        if every and batch % every == 0 and beaten < beats:
            beat()
            beaten += 1
    while beaten < beats:
        beat()
        beaten += 1


def run(url: str, jobs: int, running: int, lease: float, beats: int) -> dict[str, Counts]:
    """The figures of each phase (`PHASES`) on the queue of heartq URL `url` (migrated
    here; nothing else may claim from its default queue)."""
    store = PostgresStore(url)
    figures: dict[str, Counts] = {}
    try:
        store.link.migrate()
        for worker_id in (HOLDER, CHURN):  # registered, leased: their claims attached
            store.register_worker(WorkerInfo(worker_id, "bench", 0, ("default",), 1))
            store.heartbeat(worker_id, [], lease)
        store.enqueue([NewJob("hold", "{}") for _ in range(running)])
        claimed = store.claim(HOLDER, ["default"], running, lease=lease)
        renewals = [Renewal(j.lease) for j in claimed]
        measured = statements(store, [j.lease for j in claimed], lease)
        walk = {"worker_id": CHURN, "now": None, "limit": 100}

        def take(phase: str) -> None:
            figures[phase] = {name: measure(url, *s) for name, s in measured.items()}
            figures[phase][WALK] = measure(url, pg_q.SELECT_LAPSED, walk)

        conninfo, schema = parse_url(url)
        with psycopg.connect(conninfo) as holder:
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            holder.execute("SELECT pg_current_xact_id(), count(*) FROM pg_class")
            take("pinned")
            churn(store, jobs, lambda: store.heartbeat(HOLDER, renewals, lease), beats)
            take("churned")
            holder.rollback()
        options = f"-c search_path={schema}"
        with psycopg.connect(conninfo, autocommit=True, options=options) as conn:
            conn.execute("VACUUM job_documents")
            conn.execute("VACUUM workers")
        take("released")
    finally:
        store.link.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=20000, help="finished under the pin")
    parser.add_argument("--running", type=int, default=50, help="the heartbeat's attempts")
    parser.add_argument("--beats", type=int, default=20, help="heartbeats committed under the pin")
    parser.add_argument("--lease", type=float, default=60.0)
    args = parser.parse_args()
    url = fresh_database(args.url)
    figures = run(url, args.jobs, args.running, args.lease, args.beats)
    print(f"{'phase':<10} {'statement':<26} {'buffers':>9} {'index entries':>14}")
    for phase, counts in figures.items():
        for name, (buffers, entries) in counts.items():
            print(f"{phase:<10} {name:<26} {buffers:>9,} {entries:>14,}")


if __name__ == "__main__":
    main()
