"""The maintenance services every worker runs, and the thread that schedules them.

- `Reaper` (every `reap_interval`, default 30 s): reclaims running jobs whose lease
  expired, in batches of `reap_batch` (100). Event: `stale_jobs_detected`, then
  `job_reenqueued` or `job_dead` per job.
- `WorkerMonitor` (every `reap_interval`): workers silent for longer than their own
  `stale_after` (3 of their heartbeats, recorded when they registered) become `inactive`
  and their jobs are reclaimed at once, without waiting for each lease. The monitoring
  worker's own `stale_after` only applies to workers that recorded none (older versions),
  so a worker with a slow heartbeat is never judged by a peer with a fast one.
  Events: `worker_deactivated` (with `heartbeat_age`), `orphaned_jobs_detected`.
  The reaper and the monitor of a worker judge only while that worker has been in
  unbroken contact with the database for a staleness threshold: after a pause of the
  database (a freeze, a failover) every heartbeat and lease looks old, and silence the
  observer could not have heard is no evidence. Liveness locks still find real deaths.
- `LivenessProbe` (every `liveness_interval`, default 1 s): tries the liveness locks of
  the active workers; a lock that can be taken means a dead process, whose jobs are
  reclaimed at once. Same events, with `detected_by=liveness_lock`.
- `Pruner` (every `prune_interval`, default 10 min): deletes inactive/stopped workers and
  succeeded/cancelled jobs past their retention (7 days); dead jobs stay until purged.

`heartq reap` runs the three reclaimers once, with the same code (`reclaim_pass`).

Every worker runs all of them; racing is safe because each reclaim is one transaction
that only changes jobs still running under the execution it read. A failing pass is
logged (`maintenance_failed`) and retried at the next interval.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from heartq import events
from heartq.config import Settings
from heartq.model import DetectedBy, JobStatus, Reclaimed, StaleWorker
from heartq.store.interface import Administrator, Reclaimer, Store

JITTER = 0.1
"""Intervals vary by +/-10 % so a fleet started together does not reap in lockstep."""
MAX_REAP_ROUNDS = 50
"""One reaper pass reclaims at most 50 batches, then yields until its next interval."""
GRACE_SLACK = 0.2
"""Seconds past the store's `liveness_grace` before a one-shot caller probes again."""


def report_reclaimed(reclaimed: Sequence[Reclaimed], detected_by: str) -> None:
    for job in reclaimed:
        if job.status is JobStatus.DEAD:
            events.emit(
                events.JOB_DEAD,
                logging.WARNING,
                job_id=job.job_id,
                task=job.task,
                attempt=job.attempts,
                reason=job.dead_reason,
                detected_by=detected_by,
            )
        else:
            events.emit(
                events.JOB_REENQUEUED,
                job_id=job.job_id,
                task=job.task,
                attempt=job.attempts,
                retry_in=round(job.retry_delay, 3),
                previous_worker_id=job.worker_id,
                detected_by=detected_by,
            )


def report_stale_workers(workers: Sequence[StaleWorker], detected_by: str) -> None:
    for worker in workers:
        events.emit(
            events.WORKER_DEACTIVATED,
            logging.WARNING,
            worker_id=worker.id,
            name=worker.name,
            heartbeat_age=round(worker.heartbeat_age, 3),
            detected_by=detected_by,
            jobs=len(worker.reclaimed),
        )
        if worker.reclaimed:
            events.emit(
                events.ORPHANED_JOBS_DETECTED,
                logging.WARNING,
                worker_id=worker.id,
                count=len(worker.reclaimed),
                job_ids=[j.job_id for j in worker.reclaimed],
                detected_by=detected_by,
                heartbeat_age=round(worker.heartbeat_age, 3),
            )
        report_reclaimed(worker.reclaimed, detected_by)


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

    def requeued(self) -> list[Reclaimed]:
        """The jobs found here that went back to the queue (not dead, not cancelled)."""
        taken = [job for worker, _ in self.workers for job in worker.reclaimed]
        jobs = taken + self.expired + self.reconciled
        return [job for job in jobs if job.status is JobStatus.QUEUED]


class Service(Protocol):
    name: str
    interval: float

    def run_once(self) -> Findings | int:
        """One pass: what it found (reclaimers), or how many things it changed (pruner)."""
        ...


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
        if self.store.liveness_suspects():
            time.sleep(self.store.liveness_grace + GRACE_SLACK)
            found += self.run_once()
        return found


class Pruner:
    """Deletes inactive/stopped workers and succeeded/cancelled jobs past retention."""

    name = "pruner"

    def __init__(self, store: Administrator, settings: Settings) -> None:
        self.store = store
        self.interval = settings.prune_interval
        self.worker_retention = settings.worker_retention
        self.job_retention = settings.job_retention

    def run_once(self) -> int:
        counts = self.store.prune(self.worker_retention, self.job_retention)
        if counts.workers or counts.jobs:
            events.emit(events.PRUNED, workers=counts.workers, jobs=counts.jobs)
        return counts.workers + counts.jobs


def default_services(store: Store, settings: Settings, worker_id: str) -> list[Service]:
    """What every worker runs, each at its own interval. The reaper and the monitor judge
    as `worker_id`: only while it has been in unbroken contact with the database."""
    reap_every = settings.reap_interval_seconds
    return [
        LivenessProbe(store, settings.liveness_interval, observer=worker_id),
        Reaper(store, settings.reap_batch, reap_every, observer=worker_id),
        WorkerMonitor(store, settings.stale_after_seconds, reap_every, observer=worker_id),
        Pruner(store, settings),
    ]


def reclaim_pass(store: Reclaimer, stale_after: float, batch: int) -> Findings:
    """One pass of every reclaimer, in the order a worker's would find things (liveness
    probe, worker monitor, reaper), emitting the same events; for `heartq reap`."""
    found = LivenessProbe(store).run_until_sure()
    found += WorkerMonitor(store, stale_after).run_once()
    found += Reaper(store, batch).run_once()
    return found


class MaintenanceRunner:
    """Runs each service at its own interval (with jitter) on one background thread."""

    def __init__(
        self,
        services: Sequence[Service],
        worker_id: str,
        found_work: threading.Event | None = None,
        on_failure: Callable[[BaseException, str], int] | None = None,
        on_requeued: Callable[[list[Reclaimed]], None] | None = None,
    ) -> None:
        self.services = list(services)
        self._worker_id = worker_id
        self._on_failure = on_failure
        self._on_requeued = on_requeued
        """Told of the jobs a pass put back in the queue (a transport republishes them)."""
        """Told of each failed pass (the worker's `StoreHealth.failed`); returns the level
        of `maintenance_failed`, so a known database state is not logged every pass."""
        self._found_work = found_work or threading.Event()
        """Set after a pass that reclaimed jobs: they may be runnable at once, so the
        worker's fetch loop looks now instead of at its next poll."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartq-maintenance", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self, service: Service) -> None:
        try:
            found = service.run_once()
            if found:
                self._found_work.set()
            if isinstance(found, Findings) and self._on_requeued is not None:
                requeued = found.requeued()
                if requeued:
                    self._on_requeued(requeued)
        except Exception as exc:  # noqa: BLE001 - a failed pass is retried next interval
            level = logging.WARNING
            if self._on_failure is not None:
                level = self._on_failure(exc, service.name)
            events.emit(
                events.MAINTENANCE_FAILED,
                level,
                service=service.name,
                worker_id=self._worker_id,
                error=str(exc),
            )

    def _loop(self) -> None:
        start = time.monotonic()
        due = {s.name: start + s.interval * random.uniform(0.1, 1.0) for s in self.services}
        while not self._stop.is_set():
            now = time.monotonic()
            for service in self.services:
                if due[service.name] <= now:
                    self._run(service)
                    spread = random.uniform(1 - JITTER, 1 + JITTER)
                    due[service.name] = time.monotonic() + service.interval * spread
            self._stop.wait(max(0.0, min(due.values()) - time.monotonic()))
