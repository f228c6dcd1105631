"""The worker monitor: workers silent for longer than their own `stale_after` become
`inactive` and their jobs are reclaimed at once, without waiting for each lease (every
`reap_interval`).

A worker records its `stale_after` (3 of its heartbeats) when it registers; the
monitoring worker's own only applies to workers that recorded none (older versions), so
a worker with a slow heartbeat is never judged by a peer with a fast one. Like the
reaper, it judges only while its worker has been in unbroken contact with the database.
Events: `worker_deactivated` (with `heartbeat_age`), `orphaned_jobs_detected`, and per
job `job_reenqueued` or `job_dead`, with `detected_by=stale_worker`.
"""

from __future__ import annotations

from heartq.maintenance.findings import Findings
from heartq.model import DetectedBy
from heartq.reclaim_events import report_stale_workers
from heartq.store.interface import Reclaimer


class WorkerMonitor:
    """Marks workers silent past their own `stale_after` inactive and reclaims their jobs;
    `stale_after` here only applies to workers that recorded none."""

    name = "worker_monitor"

    def __init__(
        self,
        store: Reclaimer,
        stale_after: float,
        interval: float = 0.0,
        observer: str | None = None,
    ) -> None:
        self.store = store
        self.stale_after = stale_after
        self.interval = interval
        self.observer = observer

    def run_once(self) -> Findings:
        stale = self.store.mark_stale_workers(
            self.stale_after, DetectedBy.STALE_WORKER, observer=self.observer
        )
        report_stale_workers(stale, DetectedBy.STALE_WORKER)
        return Findings(workers=[(w, DetectedBy.STALE_WORKER) for w in stale])
