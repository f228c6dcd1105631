"""The reclaimers: the maintenance services that find work nobody will finish and take
it back, and `heartq reap`, which runs each of them once (`reclaim_pass`).

In the order a worker finds things:

- `LivenessProbe`, every `liveness_interval` (default 1 s): active workers whose liveness
  lock can be taken, i.e. dead processes; their jobs are reclaimed at once. Where the
  store believes a free lock only after a grace (`liveness_grace`: PostgreSQL), a lock
  found free is a suspect until then. Events: `worker_deactivated`,
  `orphaned_jobs_detected`, `job_reenqueued`/`job_dead`, with
  `detected_by=liveness_lock`.
- `WorkerMonitor`, every `reap_interval`: workers silent past their own `stale_after`
  (3 of their heartbeats, recorded when they registered; the monitoring worker's own
  only for workers that recorded none, older versions, so a worker with a slow heartbeat
  is never judged by a peer with a fast one) become `inactive` and their jobs are
  reclaimed at once, without waiting for each lease. Events: `worker_deactivated` (with
  `heartbeat_age`), `orphaned_jobs_detected`, `job_reenqueued`/`job_dead`, with
  `detected_by=stale_worker`.
- `Reaper`, every `reap_interval` (default: the heartbeat interval, 30 s): running jobs
  whose lease expired, `reap_batch` (100) at a time, at most `MAX_REAP_ROUNDS` batches a
  pass. Events: `stale_jobs_detected`, then `job_reenqueued`/`job_dead`, with
  `detected_by=lease_expired`.

The monitor and the reaper judge as their worker (`observer`): only while it has been in
unbroken contact with the database for a staleness threshold, because after a pause of
the database every heartbeat and lease looks old. Each pass returns what it found and
reclaimed (`Findings`): the runner tells the worker's fetch loop, the transport and the
crash hooks of it, and `heartq reap` prints it. Reclaimed jobs and dead workers are
told to the app's stream as each pass finds them, the same way the worker's own
hand-backs tell theirs (`EventStream.reclaimed`, `stale_workers`).

One module for the three, not one each: they are one idea (find the attempts whose
worker can no longer report them; the store closes them, `Reclaimer`), a few lines each
around one store call, and `heartq reap` is their sequence; read together, the order a
death is found in and what each pass returns read top to bottom.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from heartq.event_stream import EventStream
from heartq.events import STALE_JOBS_DETECTED
from heartq.model import DetectedBy, JobStatus, Reclaimed, StaleWorker
from heartq.store.interface import Reclaimer

GRACE_SLACK = 0.2
"""Seconds past the store's `liveness_grace` before a one-shot caller probes again."""
MAX_REAP_ROUNDS = 50
"""One reaper pass reclaims at most 50 batches, then yields until its next interval."""


# -- what a pass found -------------------------------------------------------------------
@dataclass
class Findings:
    """What maintenance found and reclaimed, each with the mechanism that found it: dead or
    stale workers (with the jobs taken from them), and jobs whose lease expired."""

    workers: list[tuple[StaleWorker, DetectedBy]] = field(default_factory=list)
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
        """Every job taken back here: from stale or dead workers, expired, reconciled."""
        taken = [job for worker, _ in self.workers for job in worker.reclaimed]
        return taken + self.expired + self.reconciled

    def requeued(self) -> list[Reclaimed]:
        """The jobs found here that went back to the queue (not dead, not cancelled)."""
        return [job for job in self.reclaimed() if job.status is JobStatus.QUEUED]


class PassCutShort(Exception):
    """A pass that failed after some of its writes had landed (a reaper's later round,
    `heartq reap`'s later reclaimer): `found` is what those reclaimed, to be told like
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
        dead = self.store.liveness_probe(DetectedBy.LIVENESS_LOCK, observer=self.observer)
        self.events.stale_workers(dead, DetectedBy.LIVENESS_LOCK)
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
        self.events.stale_workers(stale, DetectedBy.STALE_WORKER)
        return Findings(workers=[(w, DetectedBy.STALE_WORKER) for w in stale])


class Reaper:
    """Reclaims running jobs whose lease expired, in batches, at most `MAX_REAP_ROUNDS`."""

    name = "reaper"

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
        for _ in range(MAX_REAP_ROUNDS):
            with landed_before(found):  # each round commits: a later one's failure keeps it
                reclaimed = self.store.reap_expired(
                    DetectedBy.LEASE_EXPIRED, self.batch, observer=self.observer
                )
            if reclaimed:
                self.events.emit(
                    STALE_JOBS_DETECTED,
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


# -- `heartq reap` -----------------------------------------------------------------------
def reclaim_pass(store: Reclaimer, events: EventStream, stale_after: float, batch: int) -> Findings:
    """One pass of every reclaimer, in the order a worker's would find things (liveness
    probe, worker monitor, reaper), telling `events` the same events; for `heartq reap`.
    Each commits on its own: a failing one raises `PassCutShort` with what the others
    took."""
    found = Findings()
    with landed_before(found):
        found += LivenessProbe(store, events).run_until_sure()
    with landed_before(found):
        found += WorkerMonitor(store, events, stale_after).run_once()
    with landed_before(found):
        found += Reaper(store, events, batch).run_once()
    return found
