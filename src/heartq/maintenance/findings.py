"""What a maintenance pass found and reclaimed (`Findings`): the runner tells the worker's
fetch loop and the transport of it, and `heartq reap` prints it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
