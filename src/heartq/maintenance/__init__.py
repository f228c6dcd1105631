"""Maintenance services that run in every worker: reaper, worker monitor, liveness probe,
pruner. Each has a `run_once()` that tests call directly instead of waiting for a timer."""

from heartq.maintenance.services import (
    LivenessProbe,
    MaintenanceRunner,
    Pruner,
    Reaper,
    Service,
    WorkerMonitor,
)

__all__ = ["LivenessProbe", "MaintenanceRunner", "Pruner", "Reaper", "Service", "WorkerMonitor"]
