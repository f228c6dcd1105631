"""`heartq reap`: every reclaimer once, with the code the workers run on their timers."""

from __future__ import annotations

from heartq.maintenance.findings import Findings
from heartq.maintenance.liveness_probe import LivenessProbe
from heartq.maintenance.reaper import Reaper
from heartq.maintenance.worker_monitor import WorkerMonitor
from heartq.store.interface import Reclaimer


def reclaim_pass(store: Reclaimer, stale_after: float, batch: int) -> Findings:
    """One pass of every reclaimer, in the order a worker's would find things (liveness
    probe, worker monitor, reaper), emitting the same events; for `heartq reap`."""
    found = LivenessProbe(store).run_until_sure()
    found += WorkerMonitor(store, stale_after).run_once()
    found += Reaper(store, batch).run_once()
    return found
