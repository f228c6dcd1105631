"""Claim, heartbeat and reclaim latency with a large table (default: one million jobs).

Fills a queue with N jobs (most of them finished, as in a long-lived queue, plus a
backlog of queued ones), then times the protocol's hot statements. Run:
    .venv/bin/python bench/scale.py --jobs 1000000 [--url postgresql://...?schema=bench]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from heartq.app import App
from heartq.model import DetectedBy, Renewal, WorkerInfo


def timed(fn, repeat: int = 50) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """Median, p99 and max of `repeat` calls, in milliseconds."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    p99 = (
        statistics.quantiles(samples, n=100, method="inclusive")[98]
        if len(samples) > 1
        else samples[0]
    )
    return statistics.median(samples), p99, max(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--url", default=None)
    parser.add_argument(
        "--finished", type=float, default=0.9, help="fraction of the jobs finished first [0.9]"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="heartq-scale-") as tmp:
        url = args.url or f"sqlite:///{Path(tmp) / 'scale.db'}"
        app = App(url)
        store = app.store
        store.link.migrate()
        started = time.perf_counter()
        batch = 10_000
        middle = ""  # a job halfway through the table, where a deep page of the list starts
        for offset in range(0, args.jobs, batch):
            ids = app.enqueue_many("noop", [{"n": offset + i} for i in range(batch)])
            if offset <= args.jobs // 2 < offset + batch:
                middle = ids[args.jobs // 2 - offset]
        fill = time.perf_counter() - started
        store.register_worker(WorkerInfo("bench", "bench", 1, ("default",), 100))
        # finish 90 % of them, as an old queue would have, in claim-sized bites
        started = time.perf_counter()
        from heartq.lifecycle import fate

        target = int(args.jobs * args.finished)
        done = 0
        while done < target:
            jobs = store.claim("bench", ["default"], 5000, 60)
            store.finish([fate.succeeded(j, None) for j in jobs])
            done += len(jobs)
        churn = time.perf_counter() - started

        held: list = []

        def claim_10() -> None:
            held.extend(store.claim("bench", ["default"], 10, 60))

        claim = timed(claim_10, repeat=200)

        def claim_10_of_3_queues() -> None:
            held.extend(store.claim("bench", ["other", "default", "third"], 10, 60))

        claim_many = timed(claim_10_of_3_queues, repeat=200)
        renewals = [Renewal(j.lease) for j in held[:200]]
        beat = timed(lambda: store.heartbeat("bench", renewals, 60))
        rec = timed(lambda: store.reclaim_expired(DetectedBy.LEASE_EXPIRED, 100))
        counts = timed(store.count_jobs, repeat=5)
        # the dashboard's reads: a page of the job list (first, deep, a filter nothing
        # matches, which reads its whole window), and the overview's chart
        first_page = timed(lambda: store.browse_jobs(limit=50), repeat=20)
        deep_page = timed(lambda: store.browse_jobs(before=middle, limit=50), repeat=20)
        rare = timed(lambda: store.browse_jobs(status="dead", before=middle, limit=50), repeat=20)
        chart = timed(store.finished_per_minute, repeat=5)
        print(f"backend           {url.split(':', 1)[0]}")
        print(f"rows              {args.jobs:,} jobs ({target:,} finished, rest queued/running)")
        rates = f"{args.jobs / fill:,.0f} jobs/s enqueue_many; churn {done / churn:,.0f} jobs/s"
        print(f"fill              {rates}")
        print(f"claim 10          median {claim[0]:.2f} ms, p99 {claim[1]:.2f}, max {claim[2]:.2f}")
        print(
            f"claim 10, 3 queues median {claim_many[0]:.2f} ms, p99 {claim_many[1]:.2f}, "
            f"max {claim_many[2]:.2f}"
        )
        print(f"heartbeat 200     median {beat[0]:.2f} ms, p99 {beat[1]:.2f}, max {beat[2]:.2f}")
        print(f"reclaim, none due median {rec[0]:.2f} ms, p99 {rec[1]:.2f}, max {rec[2]:.2f}")
        print(f"count_jobs        median {counts[0]:.1f} ms (full GROUP BY, for stats)")
        print(f"jobs page 1       median {first_page[0]:.2f} ms, max {first_page[2]:.2f}")
        print(f"jobs page, middle median {deep_page[0]:.2f} ms, max {deep_page[2]:.2f}")
        print(f"jobs page, no match median {rare[0]:.2f} ms (reads its 10,000-id window)")
        print(f"chart, last hour  median {chart[0]:.1f} ms (jobs finished per minute)")
        app.close()


if __name__ == "__main__":
    main()
