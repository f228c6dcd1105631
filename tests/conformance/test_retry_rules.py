"""A task's declared retry rules, stored with its declaration and read back, and the
shape of waits a reclaimer applies to a crashed job of that task."""

from __future__ import annotations

import pytest

from heartq.model import DetectedBy, JobStatus, TaskPolicy
from heartq.store import Store

from .support import LEASE, claim_one, enqueue_one, register

BASE = 7.0


def _declare(store: Store, now: float, **rules: object) -> None:
    policy = TaskPolicy(
        name="resize", queue="default", priority=0, max_retries=5,
        retry_backoff=BASE, retry_backoff_max=100.0, **rules,  # type: ignore[arg-type]
    )  # fmt: skip
    store.declare_tasks([policy], "w0", now=now)


def test_retry_rules_are_declared_and_read_back(store: Store, t0: float) -> None:
    _declare(
        store, t0, retry_schedule="linear", retry_jitter=False,
        retry_on=("TimeoutError", "app.errors.Flaky"), dont_retry_on=("KeyError",),
    )  # fmt: skip
    policy = store.task_policies(["resize"])["resize"]
    assert (policy.retry_schedule, policy.retry_jitter) == ("linear", False)
    assert policy.retry_on == ("TimeoutError", "app.errors.Flaky")
    assert policy.dont_retry_on == ("KeyError",)
    assert policy.retry_intervals is None
    _declare(store, t0 + 1, retry_intervals=(1.0, 10.0, 60.5), retry_jitter=False)
    policy = store.task_policies(["resize"])["resize"]
    assert (policy.retry_intervals, policy.retry_jitter) == ((1.0, 10.0, 60.5), False)
    _declare(store, t0 + 2)  # a new declaration without rules: back to the defaults
    policy = store.task_policies(["resize"])["resize"]
    assert (policy.retry_schedule, policy.retry_jitter) == ("exponential", True)
    assert (policy.retry_on, policy.dont_retry_on, policy.retry_intervals) == (None, (), None)


def _crash(store: Store, worker_id: str, now: float) -> float:
    """Claim the job, let its lease run out, reap it: the reclaimed retry delay."""
    register(store, worker_id, now)
    claim_one(store, worker_id, now)
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=now + LEASE + 1)
    assert reclaimed.status == JobStatus.QUEUED
    return reclaimed.retry_delay


@pytest.mark.parametrize(
    ("rules", "second_wait"),
    [({"retry_schedule": "constant", "retry_jitter": False}, BASE),
     ({"retry_schedule": "linear", "retry_jitter": False}, 2 * BASE),
     ({"retry_schedule": "exponential", "retry_jitter": False}, 2 * BASE),
     ({"retry_intervals": (3.0, 250.0), "retry_jitter": False}, 250.0)],  # not capped
)  # fmt: skip
def test_a_crashed_job_waits_its_tasks_declared_schedule(
    store: Store, t0: float, rules: dict[str, object], second_wait: float
) -> None:
    _declare(store, t0, **rules)
    enqueue_one(store, t0, task="resize", retry_backoff=BASE, retry_backoff_max=100.0)
    assert _crash(store, "w1", t0) == 0.0  # a first crash: at once, in its place
    assert _crash(store, "w2", t0 + 100) == second_wait  # from the second: the schedule
