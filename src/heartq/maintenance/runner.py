"""The maintenance runner: every service of a worker, each at its own interval (with
jitter), on one background thread (`heartq-maintenance`), and the services every worker
runs (`default_services`).

The passes of one worker never overlap, so a pass stuck on the database holds up the
others (docs/RELIABILITY.md, finding 4: why no pass may wait on a row lock). A
service's first pass comes at a random point of its first interval, each later one an
interval (+/-`JITTER`) after the previous one ended, so a fleet started together does
not reclaim in lockstep. A failing pass is logged (`maintenance_failed`, with the
`service`) and retried at the service's next interval; the others run on as due.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from heartq.background import BackgroundLoop, FailureLog
from heartq.config import Settings
from heartq.event_stream import EventStream
from heartq.events import MAINTENANCE_FAILED
from heartq.maintenance.pruner import JobsVacuum, Pruner
from heartq.maintenance.reclaimers import (
    Findings,
    LeaseReclaimer,
    LivenessProbe,
    PassCutShort,
    WorkerMonitor,
)
from heartq.model import Reclaimed
from heartq.store.interface import Store

JITTER = 0.1
"""Intervals vary by +/-10 % so a fleet started together does not reclaim in lockstep."""
JOIN_TIMEOUT = 10.0
"""`stop()` waits at most 10 s for a pass under way."""


class Service(Protocol):
    name: str
    interval: float

    def run_once(self) -> Findings | int:
        """One pass: what it found (reclaimers), or how many things it changed (pruner)."""
        ...


def default_services(
    store: Store, settings: Settings, worker_id: str, events: EventStream
) -> list[Service]:
    """What every worker runs, each at its own interval, telling what it finds to the
    worker's `events`. The lease reclaimer and the monitor judge as `worker_id`: only while it has
    been in unbroken contact with the database."""
    reclaim_every = settings.reclaim_interval_seconds
    services: list[Service] = [
        LivenessProbe(store, events, settings.liveness_interval, observer=worker_id),
        LeaseReclaimer(store, events, settings.reclaim_batch, reclaim_every, observer=worker_id),
        WorkerMonitor(
            store, events, settings.stale_after_seconds, reclaim_every, observer=worker_id
        ),
        Pruner(store, settings, events),
    ]
    if settings.vacuum_interval > 0:
        services.append(JobsVacuum(store, settings.vacuum_interval))
    return services


class MaintenanceRunner:
    """Runs each service at its own interval (with jitter) on one background thread.
    Services may be added to `services` until `start()`. Its failures, and the crash
    hooks of what its passes reclaimed, go to the worker's `events`."""

    def __init__(
        self,
        services: Sequence[Service],
        worker_id: str,
        events: EventStream,
        found_work: threading.Event | None = None,
        on_failure: Callable[[BaseException, str], int] | None = None,
        on_reclaimed: Callable[[list[Reclaimed]], None] | None = None,
    ) -> None:
        self.services = list(services)
        self._worker_id = worker_id
        self.events = events
        self._on_failure = on_failure
        """Told of each failed pass (the worker's `StoreHealth.failed`); returns the level
        of `maintenance_failed`, so a known database state is not logged every pass."""
        self._on_reclaimed = on_reclaimed
        """Told of the jobs a pass put back in the queue (a transport republishes them)."""
        self._found_work = found_work or threading.Event()
        """Set after a pass that reclaimed jobs: they may be runnable at once, so the
        worker's fetch loop looks now instead of at its next poll."""
        self._due: dict[str, float] = {}
        self._loop = BackgroundLoop(
            "heartq-maintenance",
            self._run_due,
            wait=self._until_next,
            # Each service's failure is logged by `_run`; this is for the runner's own.
            failed=FailureLog(
                events, MAINTENANCE_FAILED, {"service": "maintenance", "worker_id": worker_id}
            ),
            join_timeout=JOIN_TIMEOUT,
        )

    def start(self) -> None:
        start = time.monotonic()
        self._due = {s.name: start + s.interval * random.uniform(0.1, 1.0) for s in self.services}
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _run_due(self) -> None:
        """Run every service due now, in order; each next one an interval from its end."""
        now = time.monotonic()
        for service in self.services:
            if self._due[service.name] <= now:
                self._run(service)
                spread = random.uniform(1 - JITTER, 1 + JITTER)
                self._due[service.name] = time.monotonic() + service.interval * spread

    def _until_next(self) -> float:
        return max(0.0, min(self._due.values()) - time.monotonic())

    def _run(self, service: Service) -> None:
        try:
            try:
                found = service.run_once()
            except PassCutShort as cut:  # what landed before it failed is told all the same
                self._landed(cut.found)
                raise cut.cause from None
            self._landed(found)
        except Exception as exc:  # noqa: BLE001 - a failed pass is retried next interval
            self._failure_log(service.name).emit(exc)

    def _landed(self, found: Findings | int) -> None:
        """Tell what a pass found (its events told as it went): the fetch loop (work may
        be runnable now), the transport (jobs to republish), the crash hooks (run here:
        the process that ran each attempt can run nothing more)."""
        if found:
            self._found_work.set()
        if isinstance(found, Findings) and found:
            try:  # the jobs queued again first: they wait for work, the hooks do not
                if self._on_reclaimed is not None and (queued := found.queued_again()):
                    self._on_reclaimed(queued)
            finally:  # a failed republish costs no crash its hooks
                self.events.crashed(found.reclaimed())

    def _failure_log(self, name: str) -> FailureLog:
        """`maintenance_failed` for one service, at the level `on_failure` says (warning
        without one), with the error's text."""

        def level(exc: Exception) -> int:
            return logging.WARNING if self._on_failure is None else self._on_failure(exc, name)

        return FailureLog(
            self.events,
            MAINTENANCE_FAILED,
            {"service": name, "worker_id": self._worker_id},
            level=level,
            describe=str,
        )
