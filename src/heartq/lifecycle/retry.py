"""The retry policy: whether a failed or crashed attempt is retried, and after how long.

Exceptions and crashes both count as failed attempts. After `max_retries` failed attempts
beyond the first, the job is dead. The delay before a retry follows the task's `Backoff`:
by default it grows exponentially (`base * 2**(attempt-1)`), capped at `cap`, with +/-25 %
jitter so that a fleet of jobs that failed together does not retry together; a task may
choose a linear (`base * attempt`) or constant (`base`) schedule, and no jitter (waits
exactly as the schedule says), or explicit `intervals` (the wait after each failed
attempt in turn, the last one repeated; no cap), which replace the schedule and its
numbers. A task's `retry_delay` function, asked where its code raised (the worker), comes
before all of these (`heartq.worker.invoke`); what it cannot answer falls back here.

Which exceptions are worth retrying is the task's `RetryOn`: an exception its code raised
that the task's `dont_retry_on` names, or that its `retry_on` (when given) does not, ends
the job at once, as `heartq.Permanent` does. The worker running the task judges the
exception (it alone holds it) into the attempt end's `permanent`, and the fate follows
from that here like any permanent failure.

This is the only place the policy lives: the fates of `heartq.lifecycle` ask it, for the
worker's completer and every backend's reclaimers alike, so a crash and an exception are
judged the same way. The defaults live here too: `App`, `heartq.policy` and a reclaimer
reading a row stored before backoffs were checked all use the same numbers.
"""

from __future__ import annotations

import enum
import inspect
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from heartq.errors import ConfigError, Permanent

DEFAULT_MAX_RETRIES = 3
"""Defaults to 3: at most 4 attempts, then the dead-letter queue."""
DEFAULT_MAX_SNOOZES = 100
"""Defaults to 100: a job's first 100 snoozes (`heartq.Snooze`) are not counted as
attempts; each one after is a failed attempt."""
DEFAULT_RETRY_BACKOFF = 5.0
"""Defaults to 5 s before the first retry, then 10 s, 20 s, ..."""
DEFAULT_RETRY_BACKOFF_MAX = 3600.0
"""Defaults to one hour: the longest wait between two attempts."""
JITTER = 0.25

EXPONENTIAL = "exponential"
LINEAR = "linear"
CONSTANT = "constant"
SCHEDULES = (EXPONENTIAL, LINEAR, CONSTANT)
"""How waits grow with each failed attempt: doubling, by `base` each time, or not at all."""


@dataclass(frozen=True)
class Backoff:
    """The shape of a task's waits between attempts: its `schedule` (one of `SCHEDULES`)
    and whether they are spread by +/-`JITTER` (`jitter`; the cap is never exceeded, so
    a wait at the cap only shortens). Its numbers (`base`, `cap`) are the job's
    `retry_backoff` and `retry_backoff_max`, which its caller may choose; the shape is the
    task's, declared with it."""

    schedule: str = EXPONENTIAL
    jitter: bool = True
    intervals: tuple[float, ...] | None = None
    """The task's `retry_intervals` (None: the schedule's): the wait after failed attempt
    n is `intervals[n-1]`, the last repeated for the attempts after; `base` and `cap` do
    not apply."""

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            choices = ", ".join(repr(s) for s in SCHEDULES)
            raise ConfigError(f"retry_schedule must be one of {choices}, got {self.schedule!r}")
        if not isinstance(self.jitter, bool):
            raise ConfigError(f"retry_jitter must be True or False, got {self.jitter!r}")

    def raw(self, attempt: int, base: float) -> float:
        """The wait after failed attempt number `attempt` (1-based), before its cap and jitter."""
        n = max(attempt, 1)
        if self.intervals:
            return self.intervals[min(n, len(self.intervals)) - 1]
        if self.schedule == CONSTANT:
            return base
        if self.schedule == LINEAR:
            return base * n
        return base * (2.0 ** min(n - 1, 62))


DEFAULT_BACKOFF = Backoff()
"""Exponential, with jitter: what a task that chooses nothing gets."""

MAX_WAIT = 10 * 365 * 86400.0
"""The longest wait a retry may be given: ten years, as for any duration (`payload`)."""
INTERVALS_EXAMPLE = "like [1, 10, 60]"


def retry_intervals(value: object) -> tuple[float, ...]:
    """A task's `retry_intervals` as given (a non-empty list or tuple of seconds, each
    finite, not negative, at most ten years) as a tuple of floats; `ConfigError` in one
    line for anything else."""
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(
            f"retry_intervals must be a non-empty list of seconds, {INTERVALS_EXAMPLE}, "
            f"got {value!r}"
        )
    for seconds in value:
        problem = wait_problem(seconds)
        if problem is not None:
            raise ConfigError(
                f"retry_intervals must be seconds, {INTERVALS_EXAMPLE}: {seconds!r} {problem}"
            )
    return tuple(float(seconds) for seconds in value)


def wait_problem(value: object) -> str | None:
    """What makes `value` no wait before a retry, said after it, or None: a number (not
    a bool), finite, not negative, at most `MAX_WAIT`."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "is not a number"
    if not math.isfinite(value) or value < 0:
        return "is not a finite number of seconds, zero or more"
    if value > MAX_WAIT:
        return "is more than ten years"
    return None


RetryDelay = Callable[[int, BaseException], float | None]
"""A task's `retry_delay`: called with the number of the attempt that failed (1 for the
first) and the exception its code raised, it returns the seconds to wait before the next
attempt, or None for the task's other rules (`retry_intervals`, else the schedule)."""


def check_retry_delay(value: object) -> RetryDelay:
    """A task's `retry_delay` as given: a function that takes (attempt, exc);
    `ConfigError` in one line for anything else."""
    problem = "is not callable"
    if callable(value):
        try:
            inspect.signature(value).bind(1, Exception())
        except TypeError:
            problem = "does not take (attempt, exc)"
        except ValueError:  # a builtin without a signature: it is its caller's to know
            return value
        else:
            return value
    raise ConfigError(
        f"retry_delay must be a function of (attempt, exc) that returns seconds or None, "
        f"like lambda attempt, exc: 10 * attempt; {value!r} {problem}"
    )


def asked_delay(
    fn: RetryDelay, attempt: int, exc: BaseException
) -> tuple[float | None, str | None]:
    """The wait a task's `retry_delay` gives after failed attempt `attempt` whose code
    raised `exc`: (seconds, None); (None, None) when it returns None (the task's other
    rules decide); (None, why) when it raised or returned no wait (the other rules
    decide too, and the worker logs `why`: a bug in a backoff function must not cost the
    job its retries)."""
    try:
        value = fn(attempt, exc)
    except Exception as error:  # noqa: BLE001 - the task's own code: told, then the default
        said = " ".join(str(error).split())[:200]
        return None, f"retry_delay raised {type(error).__name__}: {said}"
    if value is None:
        return None, None
    problem = wait_problem(value)
    if problem is not None:
        return None, f"retry_delay returned {value!r}, which {problem}"
    return float(value), None


ExceptionClasses = type[BaseException] | Sequence[type[BaseException]] | None
"""`retry_on`, `dont_retry_on` as a task is given them: a class, several, or none."""


def exception_name(kind: type[BaseException]) -> str:
    """How an exception class is named in a declaration: `TimeoutError`, `myapp.errors.Gone`."""
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def exception_classes(option: str, value: object) -> tuple[type[BaseException], ...]:
    """`retry_on`/`dont_retry_on` as given (a class, or a tuple or list of them) as a
    tuple of exception classes; `ConfigError` naming the option for anything else."""
    items = [value] if isinstance(value, type) else value
    if isinstance(items, tuple | list) and all(
        isinstance(kind, type) and issubclass(kind, BaseException) for kind in items
    ):
        return tuple(items)
    raise ConfigError(f"{option} must be exception classes, like (TimeoutError,), got {value!r}")


@dataclass(frozen=True)
class RetryOn:
    """Which exceptions a task's code raises are worth another attempt. `retry_on` (None:
    every exception) and `dont_retry_on` are classes matched as `except` would
    (subclasses too); `dont_retry_on` wins when both match. `heartq.Permanent` is never
    retried. A timeout heartq enforced, a crash or an interruption raised nothing in the
    task's code: those follow `max_retries` whatever the filter says."""

    retry_on: tuple[type[BaseException], ...] | None = None
    dont_retry_on: tuple[type[BaseException], ...] = ()

    @classmethod
    def of(cls, retry_on: object, dont_retry_on: object) -> RetryOn:
        """From a task's options as given; `ConfigError` for anything but exception classes."""
        return cls(
            None if retry_on is None else exception_classes("retry_on", retry_on),
            () if dont_retry_on is None else exception_classes("dont_retry_on", dont_retry_on),
        )

    def gives_up(self, exc: BaseException) -> bool:
        """Whether an attempt whose code raised `exc` is the job's last."""
        if isinstance(exc, (Permanent, *self.dont_retry_on)):
            return True
        return self.retry_on is not None and not isinstance(exc, self.retry_on)

    def names(self) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
        """`retry_on` and `dont_retry_on` as a declaration stores them (`exception_name`)."""
        retry_on = None if self.retry_on is None else _names(self.retry_on)
        return retry_on, _names(self.dont_retry_on)


def _names(kinds: Sequence[type[BaseException]]) -> tuple[str, ...]:
    return tuple(exception_name(kind) for kind in kinds)


class RetryDecision(enum.Enum):
    """Retry the job, or send it to the dead-letter queue."""

    RETRY = "retry"
    DEAD = "dead"


@dataclass(frozen=True)
class RetryPlan:
    """A `RetryDecision` and, for a retry, how many seconds to wait before it."""

    decision: RetryDecision
    delay: float = 0.0


def backoff_delay(
    attempt: int,
    base: float,
    cap: float,
    rng: random.Random | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based), by `backoff`
    (explicit intervals are not capped: each is a wait the task stated)."""
    if backoff.intervals:
        cap = math.inf
    raw = min(cap, backoff.raw(attempt, base))
    if not backoff.jitter:
        return max(0.0, raw)
    spread = (rng or random).uniform(1.0 - JITTER, 1.0 + JITTER)
    return max(0.0, min(cap, raw * spread))


def retries_left(attempts: int, max_retries: int, *, permanent: bool = False) -> bool:
    """Whether a job whose attempt number `attempts` failed runs again."""
    return not permanent and attempts <= max_retries


def plan_retry(
    attempts: int,
    max_retries: int,
    base: float,
    cap: float,
    *,
    permanent: bool = False,
    rng: random.Random | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
) -> RetryPlan:
    """Decide after `attempts` counted attempts (the one that just failed included)."""
    if not retries_left(attempts, max_retries, permanent=permanent):
        return RetryPlan(RetryDecision.DEAD)
    return RetryPlan(RetryDecision.RETRY, backoff_delay(attempts, base, cap, rng, backoff))
