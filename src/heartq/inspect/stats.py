"""The queue at a glance: jobs by queue and state, the workers' capacity, the longest
wait, concurrency and rate limits (`heartq.inspect.limits`), fairness keys
(`heartq.inspect.fairness`), the queues an operator
paused or capped (`heartq.queue_controls`), the dead-letter queue.
`heartq stats` prints it, the worker's metrics endpoint exports the job counts, and the
dashboard's overview draws the same counts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from heartq.inspect import fairness, fleet
from heartq.inspect.limits import limits_in_use
from heartq.inspect.states import SHOWN_STATUSES, shown_counts
from heartq.model import JobCount, JobStatus
from heartq.store import Store, redact


def jobs_by_queue(counts: Iterable[JobCount]) -> dict[str, dict[str, int]]:
    """`Store.job_counts()` as queue -> shown state -> count, every state present (0 if
    none): `claimed` (claimed ahead) apart from `running` (started)."""
    by_queue: dict[str, dict[str, int]] = {}
    for queue, status, count in shown_counts(counts):
        by_queue.setdefault(queue, dict.fromkeys(SHOWN_STATUSES, 0))[status] = count
    return by_queue


def count_totals(by_queue: dict[str, dict[str, int]]) -> dict[str, int]:
    """Jobs by shown state over every queue, every state present (0 if none)."""
    out = dict.fromkeys(SHOWN_STATUSES, 0)
    for statuses in by_queue.values():
        for status, count in statuses.items():
            out[status] += count
    return out


def collect_stats(store: Store) -> dict[str, Any]:
    """What `heartq stats` shows (`--json` as is): the figures of the metrics endpoint
    and more, read once from the store."""
    now = store.clock()
    by_queue = jobs_by_queue(store.job_counts())
    totals = count_totals(by_queue)
    listed = fleet.workers(store, include_all=False, now=now)
    workers = [w for w in listed if not w["gone"]]
    gone = [w for w in listed if w["gone"]]
    waits = store.queue_waits()
    oldest = max(
        (w for w in waits.values() if w.oldest_age is not None),
        key=lambda w: w.oldest_age or 0.0,
        default=None,
    )
    scheduled = sum(w.scheduled for w in waits.values())
    limits = limits_in_use(store).summary()
    fair = fairness.summary(fairness.fair_keys(store))
    controls = store.queue_controls()
    schedules = store.list_schedules()
    next_ticks = [s["next_tick"] for s in schedules if s["next_tick"] is not None]
    return {
        "url": redact(store.link.url),
        "jobs": by_queue,
        "totals": dict(totals, all=sum(totals.values())),
        "workers": {
            "active": len(workers),
            "running_jobs": sum(w["running"] for w in workers),
            "claimed_ahead_jobs": sum(w["claimed_ahead"] for w in workers),
            "slots": sum(w["concurrency"] for w in workers),
            "max_heartbeat_age": max(
                (w["heartbeat_age"] for w in workers if w["heartbeat_age"] is not None),
                default=None,
            ),
            "gone": len(gone),
            "gone_running_jobs": sum(w["running"] for w in gone),
            "gone_claimed_ahead_jobs": sum(w["claimed_ahead"] for w in gone),
        },
        "oldest_queued_age": None if oldest is None else round(oldest.oldest_age or 0.0, 3),
        "oldest_queued_job": None if oldest is None else oldest.oldest_job_id,
        "scheduled": scheduled,
        "dead": totals[JobStatus.DEAD],
        "paused_queues": sorted(q for q, c in controls.items() if c.paused),
        "capped_queues": {
            q: c.concurrency for q, c in controls.items() if c.concurrency is not None
        },
        "concurrency": limits["concurrency"],
        "rate_limits": limits["rate_limits"],
        "fairness": fair,
        "periodic": {
            "schedules": len(schedules),
            "next_tick_in": None if not next_ticks else round(max(0.0, min(next_ticks) - now), 3),
        },
    }
