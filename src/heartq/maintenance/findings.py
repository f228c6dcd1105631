"""What a maintenance pass found and reclaimed (`Findings`): the runner tells the worker's
fetch loop and the transport of it, and `heartq reap` prints it."""

from __future__ import annotations

from dataclasses import dataclass, field

from heartq.model import DetectedBy, JobStatus, Reclaimed, StaleWorker


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
