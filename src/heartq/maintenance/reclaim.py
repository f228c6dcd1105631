"""`heartq reap`: every reclaimer once, with the code the workers run on their timers."""

from __future__ import annotations

from heartq.maintenance.findings import Findings, landed_before
from heartq.maintenance.liveness_probe import LivenessProbe
from heartq.maintenance.reaper import Reaper
from heartq.maintenance.worker_monitor import WorkerMonitor
from heartq.store.interface import Reclaimer


def reclaim_pass(store: Reclaimer, stale_after: float, batch: int) -> Findings:
    """One pass of every reclaimer, in the order a worker's would find things (liveness
    probe, worker monitor, reaper), emitting the same events; for `heartq reap`. Each
    commits on its own: a failing one raises `PassCutShort` with what the others took."""
    found = Findings()
    with landed_before(found):
        found += LivenessProbe(store).run_until_sure()
    with landed_before(found):
        found += WorkerMonitor(store, stale_after).run_once()
    with landed_before(found):
        found += Reaper(store, batch).run_once()
    return found
