"""The heartbeat, the reaper's scan and the pulse's cancel read cost the same whether or
not PostgreSQL can vacuum (issue 43; docs/design-notes/hot-path.md, "The rule").

While another session holds the xmin horizon, no row version that died after it began
is removed and no index entry pointing at one is marked dead: a statement that walks an
index range where finished jobs leave entries walks one more for each job claimed since.
This holds a snapshot, claims and finishes jobs under it, and compares each statement's
counts (buffers touched, index entries its scans returned: `bench/held_leases.py`) with
those it had when nothing had been claimed since the pin. Counts, not times.

The heartbeat renews its worker's row, and the reaper reads the workers past their lease
and the detached attempts past their deadline (docs/design/leases.md, "Leases and heartbeats"):
flat. Before the lease was the worker's they failed it (the heartbeat rewrote every
attempt's row at each beat; the reap scan walked `jobs_lease_idx`, an entry per job
claimed since the pin): 2,000 jobs and 10 beats took the heartbeat of 50 attempts from
100 index entries to 1,206 and the reap scan from 0 to 2,000. The reclaim of a dead
worker's attempts still walks (`held_leases.WALK`, measured, not asserted).

The pulse's cancel read passes (it looks up the attempts the worker holds by key): a
test of the default suite, seconds long.
"""

from __future__ import annotations

import psycopg
import pytest

from bench import held_leases
from heartq.lifecycle.fate import succeeded
from heartq.model import NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.connection import parse_url
from tests import pg_harness

JOBS = 2000
BEATS = 10
RUNNING = 50


@pytest.mark.heavy
def test_the_heartbeat_and_the_reap_scan_stay_flat_under_a_held_horizon(
    pg_server_url: str,
) -> None:
    with pg_harness.schema_url(pg_server_url) as url:
        figures = held_leases.run(url, jobs=JOBS, running=RUNNING, lease=60.0, beats=BEATS)
    pinned, churned = figures["pinned"], figures["churned"]
    # What a flat statement may still meet: its own worker row's versions (one a beat)
    # and a few more entries and pages, never one per job or per attempt and beat.
    grown = {
        name: (churned[name][0] - pinned[name][0], churned[name][1] - pinned[name][1])
        for name in pinned
        if name != held_leases.WALK  # the walk the design keeps: once per gone worker
    }
    for name, (buffers, entries) in grown.items():
        assert entries <= BEATS + 25, (name, grown, figures)
        assert buffers <= 4 * BEATS + 50, (name, grown, figures)


def test_the_pulses_cancel_read_stays_flat_under_a_held_horizon(pg_server_url: str) -> None:
    """The pulse's cancel read (`RUNNING_CANCELS`) of a worker holding 10 attempts, one
    of them asked to cancel, while another session holds the horizon and the same worker
    claims and finishes 3,000 more jobs: the same buffers and index entries after as
    before (47 buffers, 21 index entries: measured), and the cancel still heard. A read
    of the worker's running jobs (through `jobs_worker_idx`) walks a dead entry per
    running version of each of them: 17 buffers and 11 entries, then 189 and 3,011."""
    with pg_harness.schema_url(pg_server_url) as url:
        store = PostgresStore(url)
        try:
            store.link.migrate()
            store.enqueue([NewJob("t", "{}") for _ in range(3010)])  # the index depth, now
            held = store.claim("w", ["default"], 10, lease=600)
            store.cancel_job(held[3].id)
            params = {"worker_id": "w", "ids": [j.id for j in held]}
            with psycopg.connect(parse_url(url)[0]) as holder:
                holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                holder.execute("SELECT pg_current_xact_id()")  # a snapshot and an xid held
                pinned = held_leases.measure(url, pg_q.RUNNING_CANCELS, params)
                for _ in range(6):
                    batch = store.claim("w", ["default"], 500, lease=600)
                    assert len(batch) == 500
                    assert store.finish([succeeded(j, None) for j in batch]) == []
                churned = held_leases.measure(url, pg_q.RUNNING_CANCELS, params)
                heard = store.cancel_requests("w", [j.lease for j in held])
                holder.rollback()
        finally:
            store.link.close()
    assert heard == [held[3].lease]
    (buffers, entries), (buffers_after, entries_after) = pinned, churned
    assert entries_after <= entries + 2, (pinned, churned)  # not one per job
    # Buffers move by a few pages with what else the server does (47 -> 57 once beside a
    # CPU burner); a walk of the 3,000 finished jobs' versions multiplies them (17 -> 189).
    assert buffers_after <= 2 * buffers, (pinned, churned)
