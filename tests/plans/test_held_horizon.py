"""The heartbeat and the reaper's scan cost the same whether or not PostgreSQL can vacuum
(issue 43; docs/design-notes/hot-path.md, "The rule").

While another session holds the xmin horizon, no row version that died after it began
is removed and no index entry pointing at one is marked dead: a statement that walks an
index range where finished jobs leave entries walks one more for each job claimed since.
This holds a snapshot, claims and finishes jobs under it, and compares each statement's
counts (buffers touched, index entries its scans returned: `bench/held_leases.py`) with
those it had when nothing had been claimed since the pin. Counts, not times.

Today's statements fail it, and the test says so (`xfail`, strict: it must fail until
the worker's lease lands, and fails the suite once it passes so that the mark goes):
`HEARTBEAT` rewrites every attempt's row at each beat (their versions pile up under the
pin: the attempts times the beats) and `SELECT_EXPIRED` range-scans `jobs_lease_idx`,
which holds an entry for every job claimed since the pin. Measured there: 2,000 jobs and
10 beats took the heartbeat of 50 attempts from 100 index entries to 1,206 and the reap
scan from 0 to 2,000.
"""

from __future__ import annotations

import pytest

from bench import held_leases
from tests import pg_harness

JOBS = 2000
BEATS = 10
RUNNING = 50


@pytest.mark.heavy
@pytest.mark.xfail(
    strict=True,
    reason="issue 43: today's heartbeat rewrites its attempts' rows and the reap scan "
    "walks jobs_lease_idx; flat once the lease is the worker's",
)
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
    }
    for name, (buffers, entries) in grown.items():
        assert entries <= BEATS + 25, (name, grown, figures)
        assert buffers <= 4 * BEATS + 50, (name, grown, figures)
