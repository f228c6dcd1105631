"""The reclaimers: the maintenance services that find work nobody will finish and take
it back, and `heartq reclaim`, which runs each of them once (`reclaim_pass`).

In the order a worker finds things:

- `LivenessProbe`, every `liveness_interval` (default 1 s): active workers whose liveness
  lock can be taken, i.e. gone processes; their jobs are reclaimed at once. Where the
  store believes a free lock only after a grace (`liveness_grace`: PostgreSQL), a lock
  found free is a suspect until then. Events: `worker_deactivated`,
  `reclaim_detected`, `job_reclaimed`/`job_dead`, with `detected_by=liveness_lock`.
- `WorkerMonitor`, every `reclaim_interval`: workers silent past their own `stale_after`
  (3 of their heartbeats, recorded when they registered; the monitoring worker's own
  only for workers that recorded none, older versions, so a worker with a slow heartbeat
  is never judged by a peer with a fast one) become `inactive` and their jobs are
  reclaimed at once, without waiting for each lease. Events: `worker_deactivated` (with
  `heartbeat_age`), `reclaim_detected`, `job_reclaimed`/`job_dead`, with
  `detected_by=stale_worker`.
- `LeaseReclaimer`, every `reclaim_interval` (default: the heartbeat interval, 30 s):
  running jobs whose lease expired, `reclaim_batch` (100) at a time, at most
  `MAX_RECLAIM_ROUNDS` batches a pass. Events: `reclaim_detected`, then
  `job_reclaimed`/`job_dead`, with `detected_by=lease_expired`.

The monitor and the lease reclaimer judge as their worker (`observer`): only while it has been in
unbroken contact with the database for a staleness threshold, because after a pause of
the database every heartbeat and lease looks old. Each pass returns what it found and
reclaimed (`Findings`): the runner tells the worker's fetch loop, the transport and the
crash hooks of it, and `heartq reclaim` prints it. Reclaimed jobs and gone workers are
told to the app's stream as each pass finds them, the same way the worker's own
hand-backs tell theirs (`EventStream.reclaimed`, `deactivated`).

One module for the three, not one each: they are one idea (find the attempts whose
worker can no longer report them; the store closes them, `Reclaimer`), a few lines each
around one store call, and `heartq reclaim` is their sequence; read together, the order a
death is found in and what each pass returns read top to bottom.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from heartq.event_stream import EventStream
from heartq.events import RECLAIM_DETECTED
from heartq.model import DeactivatedWorker, DetectedBy, JobStatus, Reclaimed
from heartq.store.interface import Reclaimer

GRACE_SLACK = 0.2
"""Seconds past the store's `liveness_grace` before a one-shot caller probes again."""
MAX_RECLAIM_ROUNDS = 50
"""One lease reclaimer pass reclaims at most 50 batches, then yields until its next interval."""


# -- what a pass found -------------------------------------------------------------------
@dataclass
class Findings:
    """What maintenance found and reclaimed, each with the mechanism that found it: gone
    or stale workers (with the jobs taken from them), and jobs whose lease expired."""

    workers: list[tuple[DeactivatedWorker, DetectedBy]] = field(default_factory=list)
    expired: list[Reclaimed] = field(default_factory=list)
    reconciled: list[Reclaimed] = field(default_factory=list)
    """Taken back from namesakes a startup reconciliation suspected, once found gone."""

    def __iadd__(self, other: Findings) -> Findings:
        self.workers += other.workers
        self.expired += other.expired
        self.reconciled += other.reconciled
        return self

    def __len__(self) -> int:
        return len(self.workers) + len(self.expired) + len(self.reconciled)

    def reclaimed(self) -> list[Reclaimed]:
        """Every job taken back here: from stale or gone workers, expired, reconciled."""
        taken = [job for worker, _ in self.workers for job in worker.reclaimed]
        return taken + self.expired + self.reconciled

    def queued_again(self) -> list[Reclaimed]:
        """The jobs found here that went back to the queue (not dead, not cancelled)."""
        return [job for job in self.reclaimed() if job.status is JobStatus.QUEUED]


class PassCutShort(Exception):
    """A pass that failed after some of its writes had landed (a lease reclaimer's later
    round, `heartq reclaim`'s later service): `found` is what those reclaimed, to be told like
    any finding (their crash hooks, their republish), `cause` why the pass stopped."""

    def __init__(self, found: Findings, cause: Exception) -> None:
        super().__init__(str(cause))
        self.found = found
        self.cause = cause


@contextlib.contextmanager
def landed_before(found: Findings) -> Iterator[None]:
    """Around a step of a pass whose earlier steps reclaimed `found` (each step its own
    commit): a failure here raises `PassCutShort` with all that landed, so no crash
    whose end was committed goes untold because a later step failed."""
    try:
        yield
    except PassCutShort as cut:  # a step that is a pass itself, cut short inside
        landed = Findings()
        landed += found
        landed += cut.found
        raise PassCutShort(landed, cut.cause) from cut.cause
    except Exception as exc:
        if not found:
            raise
        raise PassCutShort(found, exc) from exc


# -- the services ------------------------------------------------------------------------
class LivenessProbe:
    """Reclaims the jobs of workers whose liveness lock is free (their process is gone)."""

    name = "liveness_probe"

    def __init__(
        self,
        store: Reclaimer,
        events: EventStream,
        interval: float = 0.0,
        observer: str | None = None,
    ) -> None:
        self.store = store
        self.events = events
        self.interval = interval
        self.observer = observer

    def run_once(self) -> Findings:
        gone = self.store.liveness_probe(DetectedBy.LIVENESS_LOCK, observer=self.observer)
        self.events.deactivated(gone, DetectedBy.LIVENESS_LOCK)
        return Findings(workers=[(w, DetectedBy.LIVENESS_LOCK) for w in gone])

    def run_until_sure(self) -> Findings:
        """One probe, and, when the store holds suspects (a lock found free but not yet
        for its `liveness_grace`), a second one once that grace has passed: for a caller
        that probes once rather than every interval (`heartq reclaim`)."""
        found = self.run_once()
        with landed_before(found):
            if self.store.liveness_suspects():
                time.sleep(self.store.liveness_grace + GRACE_SLACK)
                found += self.run_once()
        return found


class WorkerMonitor:
    """Marks workers silent past their own `stale_after` inactive and reclaims their jobs;
    `stale_after` here only applies to workers that recorded none."""

    name = "worker_monitor"

    def __init__(
        self,
        store: Reclaimer,
        events: EventStream,
        stale_after: float,
        interval: float = 0.0,
        observer: str | None = None,
    ) -> None:
        self.store = store
        self.events = events
        self.stale_after = stale_after
        self.interval = interval
        self.observer = observer

    def run_once(self) -> Findings:
        stale = self.store.mark_stale_workers(
            self.stale_after, DetectedBy.STALE_WORKER, observer=self.observer
        )
        self.events.deactivated(stale, DetectedBy.STALE_WORKER)
        return Findings(workers=[(w, DetectedBy.STALE_WORKER) for w in stale])


class LeaseReclaimer:
    """Reclaims running jobs whose lease expired, in batches, at most `MAX_RECLAIM_ROUNDS`."""

    name = "lease_reclaimer"

    def __init__(
        self,
        store: Reclaimer,
        events: EventStream,
        batch: int,
        interval: float = 0.0,
        observer: str | None = None,
    ) -> None:
        self.store = store
        self.events = events
        self.batch = batch
        self.interval = interval
        self.observer = observer

    def run_once(self) -> Findings:
        found = Findings()
        for _ in range(MAX_RECLAIM_ROUNDS):
            with landed_before(found):  # each round commits: a later one's failure keeps it
                reclaimed = self.store.reclaim_expired(
                    DetectedBy.LEASE_EXPIRED, self.batch, observer=self.observer
                )
            if reclaimed:
                self.events.emit(
                    RECLAIM_DETECTED,
                    logging.WARNING,
                    count=len(reclaimed),
                    job_ids=[j.job_id for j in reclaimed],
                    detected_by=DetectedBy.LEASE_EXPIRED.value,
                )
                self.events.reclaimed(reclaimed, DetectedBy.LEASE_EXPIRED)
            found.expired += reclaimed
            if len(reclaimed) < self.batch:
                break
        return found


# -- `heartq reclaim` --------------------------------------------------------------------
def reclaim_pass(store: Reclaimer, events: EventStream, stale_after: float, batch: int) -> Findings:
    """One pass of every reclaimer, in the order a worker's would find things (liveness
    probe, worker monitor, lease reclaimer), telling `events` the same events; for
    `heartq reclaim`.
    Each commits on its own: a failing one raises `PassCutShort` with what the others
    took."""
    found = Findings()
    with landed_before(found):
        found += LivenessProbe(store, events).run_until_sure()
    with landed_before(found):
        found += WorkerMonitor(store, events, stale_after).run_once()
    with landed_before(found):
        found += LeaseReclaimer(store, events, batch).run_once()
    return found
