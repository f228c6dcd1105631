"""How long an attempt ran, how long its death went unnoticed, and the state it is shown
in: one definition for `heartq jobs show` (text and `--json`), `heartq jobs watch` and
the dashboard.

An attempt that crashed is often found dead well after it stopped (a lease that expired,
a worker gone stale): the time between is not work, so the attempt's duration runs to
its last sign of life and the rest is its detection delay. A sign of life is a renewal
of its lease, a report its task made (progress, a checkpoint: the pulse that stores it
moves the job's `heartbeat_at` too) or its worker's heartbeat. A child process's exit is
seen at once: its attempt, like every other that ended, runs from start to end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heartq.display import epoch_of
from heartq.inspect.states import CLAIMED
from heartq.model import DetectedBy, JobStatus, Outcome


@dataclass(frozen=True)
class AttemptTiming:
    """The moments of one attempt (an execution document of `Store.get_job`), in seconds
    since the epoch, and what follows from them."""

    started: float | None
    ended: float | None
    last_alive: float | None = None
    """For a crash detected later: its last sign of life (`last_sign_of_life`)."""
    last_alive_at: str | None = None
    """`last_alive` as the store's ISO text (the attempt's start when the last heartbeat
    came before it), for screens that print times as stored."""

    @property
    def duration(self) -> float | None:
        """Seconds the attempt ran, to the millisecond: to its end, or to its last sign of
        life for a crash detected later; None while it runs (or without a start)."""
        if self.started is None or self.ended is None:
            return None
        end = self.ended if self.last_alive is None else self.last_alive
        return _ms(end - self.started)

    @property
    def detection_delay(self) -> float | None:
        """Seconds from a crashed attempt's last sign of life to its detection, to the
        millisecond."""
        if self.ended is None or self.last_alive is None:
            return None
        return _ms(self.ended - self.last_alive)

    def running_for(self, now: float) -> float | None:
        """Seconds an attempt still under way has run (None once it ended)."""
        if self.started is None or self.ended is not None:
            return None
        return now - self.started

    def as_json(self) -> dict[str, float | None]:
        """The `duration` and `detection_delay` keys of `jobs show --json`."""
        return {"duration": self.duration, "detection_delay": self.detection_delay}


def _ms(seconds: float) -> float:
    """Rounded once, here, to what the JSON shape keeps: every screen then formats the
    same number (2.15 s between two ISO times is 2.1500000953... in floating point,
    which a text view printed as "2.2s" while the JSON's 2.15 reads "2.1s")."""
    return round(seconds, 3)


def attempt_timing(ex: dict[str, Any]) -> AttemptTiming:
    """The timing of one execution document. The open attempt of a job claimed ahead
    (`claimed_ahead`, marked by `timed`) has not started: its `started_at` is its
    claim's time, so it has run for nothing yet."""
    if ex.get("claimed_ahead"):
        return AttemptTiming(None, None)
    started, ended = epoch_of(ex.get("started_at")), epoch_of(ex.get("ended_at"))
    alive = last_sign_of_life(ex, started, ended)
    if alive is None:
        return AttemptTiming(started, ended)
    return AttemptTiming(started, ended, alive[0], alive[1])


def last_sign_of_life(
    ex: dict[str, Any], started: float | None, ended: float | None
) -> tuple[float, str] | None:
    """For a crashed attempt whose death was detected later (not a child's exit, seen at
    once): the latest heartbeat of its job (a renewal, or a pulse that stored a report)
    or of its worker before it was found dead, as (epoch, ISO text), no earlier than its
    start; None when there is nothing to go by."""
    crash = ex.get("crash") or {}
    if ex.get("outcome") != Outcome.CRASHED or crash.get("detected_by") == DetectedBy.CHILD_EXIT:
        return None
    if started is None or ended is None:
        return None
    signs = []
    for key in ("job_heartbeat_at", "last_heartbeat_at"):
        moment = epoch_of(crash.get(key))
        if moment is not None and moment <= ended:
            signs.append(
                (max(moment, started), crash[key] if moment >= started else ex["started_at"])
            )
    return max(signs) if signs else None


def shown_outcome(ex: dict[str, Any]) -> str:
    """How an attempt ended, or, while it has not: `claimed` for the open attempt of a
    job claimed ahead (`timed` marks it: not started), else `running`."""
    if ex.get("outcome"):
        return str(ex["outcome"])
    return CLAIMED if ex.get("claimed_ahead") else JobStatus.RUNNING.value


def timed(executions: list[dict[str, Any]], claimed_ahead: bool = False) -> list[dict[str, Any]]:
    """The execution documents with `claimed_ahead` (true for the open attempt of a job
    claimed ahead, `claimed_ahead` here: claimed, its code not started) and their
    `duration` and `detection_delay` (`jobs show --json`)."""
    out = []
    for ex in executions:
        ahead = claimed_ahead and ex.get("ended_at") is None
        doc = dict(ex, claimed_ahead=ahead)
        out.append(dict(doc, **attempt_timing(doc).as_json()))
    return out
