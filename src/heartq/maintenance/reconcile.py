"""Startup reconciliation: a worker restarted under a name takes back what the earlier
workers of that name still hold, when they are gone.

A worker started with `--name` (a pod, a systemd unit) may be the restart of one that
died holding jobs; the store reclaims those at once instead of leaving them to the lease
(`Store.reclaim_by_name`). A namesake still alive (two processes given the same name)
keeps its jobs. Where a free lock is believed only after a grace (PostgreSQL: a session
dropped under a live worker looks free for a moment), a namesake found with its lock
free is suspected, not judged: `PendingReconciliation` judges it again once the grace
has passed. Events: `job_reclaimed`/`job_dead` per job taken back (with the detector
`reconciliation`), `namesake_alive` (warning) per live namesake, and
`reconciliation_complete`.
"""

from __future__ import annotations

import logging

from heartq.event_stream import EventStream
from heartq.events import NAMESAKE_ALIVE, RECONCILIATION_COMPLETE
from heartq.maintenance.reclaimers import GRACE_SLACK, Findings
from heartq.model import DetectedBy, Reconciliation
from heartq.store.interface import Reclaimer


def reconcile(
    store: Reclaimer,
    name: str,
    worker_id: str,
    events: EventStream,
    stale_after: float | None = None,
    now: float | None = None,
) -> Reconciliation:
    """Reclaim the jobs of gone workers named `name` (other than `worker_id`), and tell
    `events` what was found. `stale_after`: the silence after which a namesake that recorded no
    threshold of its own counts as gone. `now`: for tests, as everywhere in the store."""
    done = store.reclaim_by_name(
        name, worker_id, DetectedBy.RECONCILIATION, now=now, stale_after=stale_after
    )
    events.reclaimed(done.reclaimed, DetectedBy.RECONCILIATION)
    for namesake in done.alive:
        events.emit(
            NAMESAKE_ALIVE,
            logging.WARNING,
            name=name,
            worker_id=worker_id,
            namesake_id=namesake.id,
            heartbeat_age=namesake.heartbeat_age,
            reason="another live worker uses this name: its jobs are left to it",
        )
    events.emit(
        RECONCILIATION_COMPLETE,
        worker_id=worker_id,
        name=name,
        reclaimed=len(done.reclaimed),
        job_ids=[r.job_id for r in done.reclaimed],
        suspected=done.suspected,
    )
    return done


class PendingReconciliation:
    """A maintenance service for the namesakes startup reconciliation suspected: it
    reconciles again every `liveness_grace` (plus a little) until none is suspected any
    more, then does nothing. Without it a restarted worker whose probes are slow or off
    (`--liveness-interval`) would leave a gone namesake's jobs to their leases."""

    name = "reconciliation"

    def __init__(
        self,
        store: Reclaimer,
        name: str,
        worker_id: str,
        events: EventStream,
        stale_after: float | None = None,
    ) -> None:
        self.store = store
        self.namesake = name
        self.worker_id = worker_id
        self.events = events
        self.stale_after = stale_after
        self.interval = store.liveness_grace + GRACE_SLACK
        self.pending = True

    def run_once(self) -> Findings:
        if not self.pending:
            return Findings()
        done = reconcile(self.store, self.namesake, self.worker_id, self.events, self.stale_after)
        self.pending = bool(done.suspected)
        return Findings(reconciled=done.reclaimed)
