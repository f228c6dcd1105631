"""The liveness probe: tries the liveness locks of the active workers (every
`liveness_interval`); a lock that can be taken means a dead process, whose jobs are
reclaimed at once. Where the store believes a free lock only after a grace
(`liveness_grace`: PostgreSQL), a lock found free is a suspect until then.
Events: `worker_deactivated`, `orphaned_jobs_detected`, `job_reenqueued`/`job_dead`,
with `detected_by=liveness_lock`.
"""

from __future__ import annotations

import time

from heartq.maintenance.findings import Findings, landed_before
from heartq.model import DetectedBy
from heartq.reclaim_events import report_stale_workers
from heartq.store.interface import Reclaimer

GRACE_SLACK = 0.2
"""Seconds past the store's `liveness_grace` before a one-shot caller probes again."""


class LivenessProbe:
    """Reclaims the jobs of workers whose liveness lock is free (their process is gone)."""

    name = "liveness_probe"

    def __init__(
        self, store: Reclaimer, interval: float = 0.0, observer: str | None = None
    ) -> None:
        self.store = store
        self.interval = interval
        self.observer = observer

    def run_once(self) -> Findings:
        dead = self.store.liveness_probe(DetectedBy.LIVENESS_LOCK, observer=self.observer)
        report_stale_workers(dead, DetectedBy.LIVENESS_LOCK)
        return Findings(workers=[(w, DetectedBy.LIVENESS_LOCK) for w in dead])

    def run_until_sure(self) -> Findings:
        """One probe, and, when the store holds suspects (a lock found free but not yet
        for its `liveness_grace`), a second one once that grace has passed: for a caller
        that probes once rather than every interval (`heartq reap`)."""
        found = self.run_once()
        with landed_before(found):
            if self.store.liveness_suspects():
                time.sleep(self.store.liveness_grace + GRACE_SLACK)
                found += self.run_once()
        return found
