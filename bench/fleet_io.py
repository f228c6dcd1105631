"""A thousand slots of jobs that wait on I/O: what they cost while they run, and how
close to the ideal rate the fleet drains them.

Parts of `bench.fleet` (it runs both after its processing part), on its private cluster:

- **Held.** The large fleet with jobs that sleep `--hold` seconds (10): once the slots
  are full, `--window` seconds (60: two heartbeat intervals at the default 30 s) of what
  a thousand running jobs cost: statements/s by statement, commits/s, and the CPU of the
  server's processes and of the workers'.
- **Sleeping.** The large fleet drains `--sleeping-jobs` jobs (6,000) that each sleep
  `--sleep` seconds (1): the rate, jobs / (last `finished_at` - first `started_at`), over
  the ideal, slots / sleep (1,000 jobs/s). What a slot loses between one job's end and
  the next one's start is what keeps the fleet from the ideal.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench import fleet_setup as setup
from bench import fleet_stats as stats
from bench.fleet_setup import CHECK, DONE, Sizes
from bench.servers.postgres import PrivateCluster
from heartq.app import App


def held(cluster: PrivateCluster, scratch: Path, sizes: Sizes) -> dict[str, Any]:
    """What `workers x concurrency` running jobs of `hold` seconds cost over `window`."""
    database = "fleet_held"
    url = setup.database(cluster.url, database)
    slots = sizes.workers * sizes.concurrency
    jobs = int(slots * ((sizes.window + 120) / sizes.hold + 2))
    record: dict[str, Any] = {
        "part": "held",
        "workers": sizes.workers,
        "slots": slots,
        "hold_s": sizes.hold,
        "window_s": sizes.window,
        "jobs_enqueued": jobs,
    }
    app = App(url)
    app.migrate()
    with setup.registered(cluster.url, url, scratch, sizes.workers, sizes) as session:
        admin, watch, fleet = session.admin, session.watch, session.workers
        for offset in range(0, jobs, 5000):
            app.enqueue_many("hold", [{"seconds": sizes.hold}] * min(5000, jobs - offset))
        setup.until(
            lambda: setup.running(watch) >= 0.98 * slots, 300, f"{slots} jobs running", fleet
        )
        postmaster = cluster.postmaster_pid()
        stats.reset_statements(admin)
        before = stats.commits(admin, database)
        server_cpu = stats.cpu_seconds(stats.server_pids(postmaster))
        fleet_cpu = stats.cpu_seconds(fleet.pids)
        started, lowest, polls = time.monotonic(), slots, 0
        load = os.getloadavg()[0]
        while (elapsed := time.monotonic() - started) < sizes.window:
            lowest, polls = min(lowest, setup.running(watch)), polls + 1
            time.sleep(min(1.0, max(0.0, sizes.window - elapsed)))
        after = stats.commits(admin, database)
        server_cpu = stats.cpu_seconds(stats.server_pids(postmaster)) - server_cpu
        fleet_cpu = stats.cpu_seconds(fleet.pids) - fleet_cpu
        found = stats.statements(admin, database)
    record["failures"] = fleet.errors
    app.close()
    calls = sum(s["calls"] for s in found)
    record |= {
        "lowest_running": lowest,
        "load_average": setup.load(load),
        "statements_per_s": calls / elapsed,
        "commits_per_s": (after - before - polls - 1) / elapsed,
        "server_cpu_cores": server_cpu / elapsed,
        "workers_cpu_cores": fleet_cpu / elapsed,
        "by_statement": [s | {"per_s": s["calls"] / elapsed} for s in found[:12]],
    }
    setup.drop(cluster.url, database)
    return record


SLOTS_IN_USE = f"""{setup.M}
SELECT extract(epoch from sum(finished_at - started_at))::float8 AS busy,
       avg((result->>0)::float8 - extract(epoch from started_at))::float8 AS to_start,
       avg((result->>1)::float8 - (result->>0)::float8)::float8 AS ran,
       avg(extract(epoch from finished_at) - (result->>1)::float8)::float8 AS to_end,
       extract(epoch from (array_agg(started_at ORDER BY started_at))[%(slots)s]
                          - min(started_at))::float8 AS filled
FROM heartq.jobs"""
"""Where a slot's time went, the mean of each job (the server's clock for the claim's
`started_at` and the end's `finished_at`, the task's own for its sleep: one machine):
from the claim to the task's start, the task's sleep, from its return to the recorded
end; the slot-seconds held in all, and how long the fleet took to fill every slot."""


def sleeping(cluster: PrivateCluster, scratch: Path, sizes: Sizes) -> dict[str, Any]:
    """The large fleet drains `sleeping_jobs` jobs of `sleep` seconds: its rate over the
    ideal, and where a slot's time went (the job's wait, its start and end, the gap
    between one job's end and the next one's claim)."""
    database = "fleet_sleeping"
    url = setup.database(cluster.url, database)
    slots = sizes.workers * sizes.concurrency
    jobs = sizes.sleeping_jobs
    record: dict[str, Any] = {
        "part": "sleeping",
        "workers": sizes.workers,
        "slots": slots,
        "sleep_s": sizes.sleep,
        "jobs": jobs,
        "ideal_rate": slots / sizes.sleep,
    }
    app = App(url)
    app.migrate()
    with setup.registered(cluster.url, url, scratch, sizes.workers, sizes) as session:
        admin, watch, fleet = session.admin, session.watch, session.workers
        stats.reset_statements(admin)
        postmaster = cluster.postmaster_pid()
        server_cpu = stats.cpu_seconds(stats.server_pids(postmaster))
        load = os.getloadavg()[0]
        fleet_cpu = stats.cpu_seconds(fleet.pids)
        app.enqueue_many("hold", [{"seconds": sizes.sleep}] * jobs)
        drained = f"{jobs} jobs of {sizes.sleep:g} s drained"
        setup.until(
            lambda: setup.count(watch, DONE) >= jobs, 120 + 10 * jobs / slots, drained, fleet
        )
        fleet_cpu = stats.cpu_seconds(fleet.pids) - fleet_cpu
        server_cpu = stats.cpu_seconds(stats.server_pids(postmaster)) - server_cpu
        found = stats.statements(admin, database)
        row = watch.execute(CHECK).fetchone()
        used = watch.execute(SLOTS_IN_USE, {"slots": min(slots, jobs)}).fetchone()
    record["failures"] = fleet.errors
    app.close()
    assert row is not None and used is not None
    succeeded, other, retried, executions, span, _ = row
    if (succeeded, other, retried, executions) != (jobs, 0, 0, jobs):
        record["failures"].append(
            f"sleeping: {succeeded} succeeded, {other} not, {retried} retried, "
            f"{executions} executions of {jobs} jobs"
        )
    busy, to_start, ran, to_end, filled = used
    record |= {
        "rate": jobs / span,
        "of_ideal": jobs / span / record["ideal_rate"],
        "span_s": span,
        "load_average": setup.load(load),
        "filled_s": filled,
        "claim_to_start_ms": to_start * 1000,
        "sleep_overshoot_ms": (ran - sizes.sleep) * 1000,
        "return_to_end_ms": to_end * 1000,
        "idle_share": 1 - busy / (slots * span),
        "workers_cpu_us_per_job": fleet_cpu / jobs * 1e6,
        "server_cpu_us_per_job": server_cpu / jobs * 1e6,
        "claim": stats.claim_summary(found),
        "top_statements": found[:8],
    }
    setup.drop(cluster.url, database)
    return record


def sleeping_line(z: dict[str, Any]) -> str:
    """The sleeping part's figures as one sentence (printed, and in the markdown)."""
    return (
        f"{z['jobs']:,} jobs of {z['sleep_s']:g} s on {z['slots']:,} slots "
        f"({z['workers']} workers): {z['rate']:,.0f} jobs/s, **{z['of_ideal']:.2f}** of the "
        f"ideal {z['ideal_rate']:,.0f} (goal 0.9); every slot filled "
        f"{z['filled_s']:.2f} s after the first claim; a job's mean from its claim to its "
        f"start {z['claim_to_start_ms']:.0f} ms, its sleep's overshoot "
        f"{z['sleep_overshoot_ms']:.0f} ms, from its return to its recorded end "
        f"{z['return_to_end_ms']:.0f} ms; slots idle between jobs "
        f"{z['idle_share']:.1%} of the span; {z['claim']['jobs_per_claim']:.1f} jobs a "
        f"claim; CPU a job {z['server_cpu_us_per_job']:.0f} µs server, "
        f"{z['workers_cpu_us_per_job']:.0f} µs workers."
    )
