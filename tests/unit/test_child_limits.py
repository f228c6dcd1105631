"""`max_jobs_per_child`, `max_memory_per_child`: what they resolve to, and the one line a
bad value or a pool without children gets (`heartq.worker.pools.ChildLimits`)."""

from __future__ import annotations

import pytest

from heartq.errors import ConfigError
from heartq.worker.pools import MIB, ChildLimits


@pytest.mark.parametrize(
    ("jobs", "memory", "expected"),
    [(None, None, ChildLimits(1, None)),  # a child per attempt, as ever
     (5, None, ChildLimits(5, None)),
     (0, None, ChildLimits(0, None)),  # reused with no limit
     (None, 300, ChildLimits(0, 300 * MIB)),  # a ceiling alone: reused up to it
     (10, 0.5, ChildLimits(10, MIB // 2))],
)  # fmt: skip
def test_limits_resolve(jobs: int | None, memory: float | None, expected: ChildLimits) -> None:
    assert ChildLimits.of("process", jobs, memory) == expected


@pytest.mark.parametrize(
    ("pool", "jobs", "memory", "message"),
    [("process", -1, None, "max_jobs_per_child must be between 0 and 2147483647, got -1"),
     ("process", 2.5, None, "max_jobs_per_child must be an integer, got 2.5"),
     ("process", None, 0, "max_memory_per_child must be a positive number of megabytes "
      "(MiB), got 0"),
     ("process", None, float("nan"), "max_memory_per_child must be a positive number of "
      "megabytes (MiB), got nan"),
     ("thread", 3, None, "max_jobs_per_child recycles process-pool children: it needs "
      "pool='process' (--pool process), got pool='thread'"),
     ("async", None, 100, "max_memory_per_child recycles process-pool children: it needs "
      "pool='process' (--pool process), got pool='async'")],
)  # fmt: skip
def test_bad_limits_are_one_line(pool: str, jobs: object, memory: object, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        ChildLimits.of(pool, jobs, memory)  # type: ignore[arg-type]
    assert str(refused.value) == message
