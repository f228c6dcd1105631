"""The reaper: reclaims running jobs whose lease expired (every `reap_interval`).

It judges as its worker (`observer`): only while that worker has been in unbroken
contact with the database for a staleness threshold, since after a pause of the
database every lease looks expired. Events: `stale_jobs_detected`, then `job_reenqueued`
or `job_dead` per job, with `detected_by=lease_expired`.
"""

from __future__ import annotations

import logging

from heartq import events
from heartq.maintenance.findings import Findings, landed_before
from heartq.model import DetectedBy
from heartq.reclaim_events import report_reclaimed
from heartq.store.interface import Reclaimer

MAX_REAP_ROUNDS = 50
"""One reaper pass reclaims at most 50 batches, then yields until its next interval."""


class Reaper:
    """Reclaims running jobs whose lease expired, in batches, at most `MAX_REAP_ROUNDS`."""

    name = "reaper"

    def __init__(
        self, store: Reclaimer, batch: int, interval: float = 0.0, observer: str | None = None
    ) -> None:
        self.store = store
        self.batch = batch
        self.interval = interval
        self.observer = observer

    def run_once(self) -> Findings:
        found = Findings()
        for _ in range(MAX_REAP_ROUNDS):
            with landed_before(found):  # each round commits: a later one's failure keeps it
                reclaimed = self.store.reap_expired(
                    DetectedBy.LEASE_EXPIRED, self.batch, observer=self.observer
                )
            if reclaimed:
                events.emit(
                    events.STALE_JOBS_DETECTED,
                    logging.WARNING,
                    count=len(reclaimed),
                    job_ids=[j.job_id for j in reclaimed],
                    detected_by=DetectedBy.LEASE_EXPIRED.value,
                )
                report_reclaimed(reclaimed, DetectedBy.LEASE_EXPIRED)
            found.expired += reclaimed
            if len(reclaimed) < self.batch:
                break
        return found
