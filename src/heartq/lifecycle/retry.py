"""The retry policy: whether a failed or crashed attempt is retried, and after how long.

Exceptions and crashes both count as failed attempts. After `max_retries` failed attempts
beyond the first, the job is dead. The delay before a retry grows exponentially
(`base * 2**(attempt-1)`), capped at `cap`, with +/-25 % jitter so that a fleet of jobs
that failed together does not retry together.

This is the only place the policy lives: the fates of `heartq.lifecycle` ask it, for the
worker's completer and every backend's reclaimers alike, so a crash and an exception are
judged the same way. The defaults live here too: `App`, `heartq.policy` and a reclaimer
reading a row stored before backoffs were checked all use the same numbers.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

DEFAULT_MAX_RETRIES = 3
"""Defaults to 3: at most 4 attempts, then the dead-letter queue."""
DEFAULT_RETRY_BACKOFF = 5.0
"""Defaults to 5 s before the first retry, then 10 s, 20 s, ..."""
DEFAULT_RETRY_BACKOFF_MAX = 3600.0
"""Defaults to one hour: the longest wait between two attempts."""
JITTER = 0.25


class RetryDecision(enum.Enum):
    """Retry the job, or send it to the dead-letter queue."""

    RETRY = "retry"
    DEAD = "dead"


@dataclass(frozen=True)
class RetryPlan:
    """A `RetryDecision` and, for a retry, how many seconds to wait before it."""

    decision: RetryDecision
    delay: float = 0.0


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based)."""
    exponent = min(max(attempt - 1, 0), 62)
    raw = min(cap, base * (2.0**exponent))
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
) -> RetryPlan:
    """Decide after `attempts` counted attempts (the one that just failed included)."""
    if not retries_left(attempts, max_retries, permanent=permanent):
        return RetryPlan(RetryDecision.DEAD)
    return RetryPlan(RetryDecision.RETRY, backoff_delay(attempts, base, cap, rng))
