"""Task declarations, what a job's caller chose, and announced ends: the same on every
backend (`Store.declare_tasks`, `reroute_jobs`, `task_policies`, `await_end`, `job_end`,
`listen_ends`)."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from heartq import policy
from heartq.lifecycle.fate import failed, succeeded
from heartq.model import JobStatus, Outcome, TaskParameter, TaskPolicy
from heartq.store import Store
from tests.support import wait_for

from .support import LEASE, at, claim_one, enqueue_one, new_job, register

CPU = TaskPolicy("crunch", "cpu", 2, 1, 0.5, 10.0, timeout=60.0, heartbeat_timeout=5.0)


def test_a_declaration_is_new_then_unchanged_then_changed(store: Store, t0: float) -> None:
    assert store.task_policies() == {}
    assert store.declare_tasks([CPU], "w1", now=t0) == ["crunch"]
    assert store.declare_tasks([CPU], "w2", now=t0 + 1) == []  # the same policy
    declared = store.task_policies(["crunch", "other"])
    assert list(declared) == ["crunch"]
    got = declared["crunch"]
    assert (got.queue, got.priority, got.max_retries, got.timeout) == ("cpu", 2, 1, 60.0)
    assert (got.declared_by, got.declared_at) == ("w2", t0 + 1)
    moved = TaskPolicy("crunch", "gpu", 2, 1, 0.5, 10.0, timeout=60.0, heartbeat_timeout=5.0)
    assert store.declare_tasks([moved], "w3", now=t0 + 2) == ["crunch"]
    assert store.task_policies()["crunch"].queue == "gpu"


def test_a_job_rerouted_behind_its_new_queues_claims_is_claimed_there(
    store: Store, t0: float
) -> None:
    """A queued job moved to a queue whose claims already took jobs enqueued after it
    (on PostgreSQL, its new lane's frontier is past its place in the ready log) is
    claimed from that queue."""
    defaults = policy.defaults("crunch")
    moved = enqueue_one(store, t0, task="crunch", **policy.resolve(defaults, None, None, None))
    later = [enqueue_one(store, t0 + 1, queue="cpu", priority=2) for _ in range(3)]
    assert sorted(j.id for j in store.claim("w1", ["cpu"], 10, LEASE, now=t0 + 2)) == sorted(
        later
    )
    store.declare_tasks([CPU], "w1", now=t0 + 3)
    assert store.reroute_jobs(["crunch"], now=t0 + 3) == 1
    assert [j.id for j in store.claim("w1", ["cpu"], 10, LEASE, now=t0 + 4)] == [moved]


def test_reroute_moves_what_the_caller_did_not_choose(store: Store, t0: float) -> None:
    defaults = policy.defaults("crunch")
    follows = enqueue_one(store, t0, task="crunch", **policy.resolve(defaults, None, None, None))
    pinned = enqueue_one(
        store, t0, task="crunch", **policy.resolve(defaults, "mine", None, 9)
    )  # queue and max_retries chosen
    handmade = enqueue_one(store, t0, task="crunch")  # a NewJob built by hand: all chosen
    store.declare_tasks([CPU], "w1", now=t0)
    assert store.reroute_jobs(["crunch"], now=t0) == 2
    assert store.reroute_jobs(["crunch"], now=t0) == 0  # already in line

    job = store.get_job(follows)
    assert (job["queue"], job["priority"], job["max_retries"]) == ("cpu", 2, 1)
    assert (job["retry_backoff"], job["retry_backoff_max"]) == (0.5, 10.0)
    assert job["policy"]["queue"] == {"value": "cpu", "from": policy.TASK}
    assert job["policy"]["timeout"] == {"value": 60.0, "from": policy.TASK}
    job = store.get_job(pinned)
    assert (job["queue"], job["priority"], job["max_retries"]) == ("mine", 2, 9)
    assert job["policy"]["queue"]["from"] == policy.CALLER
    assert job["policy"]["priority"]["from"] == policy.TASK
    job = store.get_job(handmade)
    assert (job["queue"], job["max_retries"], job["retry_backoff"]) == ("default", 3, 5.0)


def test_reroute_of_given_jobs_only_and_never_of_running_ones(store: Store, t0: float) -> None:
    resolved = policy.resolve(policy.defaults("crunch"), None, None, None)
    running = enqueue_one(store, t0, task="crunch", **resolved)
    register(store, "w1", t0)
    assert claim_one(store, "w1", t0).id == running
    mine, other = (enqueue_one(store, t0, task="crunch", **resolved) for _ in range(2))
    store.declare_tasks([CPU], "w1", now=t0)
    assert store.reroute_jobs(["crunch"], now=t0, job_ids=[mine]) == 1
    assert [store.get_job(i)["queue"] for i in (running, mine, other)] == [
        "default",
        "cpu",
        "default",
    ]


def test_an_undeclared_job_shows_the_defaults_as_such(store: Store, t0: float) -> None:
    resolved = policy.resolve(policy.defaults("nobody"), None, None, None)
    job = store.get_job(enqueue_one(store, t0, task="nobody", **resolved))
    assert job["policy"]["declared"] is False
    assert job["policy"]["queue"] == {"value": "default", "from": policy.DEFAULTS}
    assert job["policy"]["timeout"] == {"value": None, "from": policy.DEFAULTS}


def test_claimed_jobs_carry_what_their_caller_chose(store: Store, t0: float) -> None:
    resolved = policy.resolve(policy.defaults("t"), None, None, 7)
    enqueue_one(store, t0, task="t", **resolved)
    register(store, "w1", t0)
    job = claim_one(store, "w1", t0)
    assert job.chosen == policy.MAX_RETRIES
    applied = policy.for_attempt(job, CPU)  # the worker's own task policy for the rest
    assert (applied.max_retries, applied.retry_backoff, applied.retry_backoff_max) == (
        7,
        0.5,
        10.0,
    )


def test_eta_is_an_absolute_run_at_and_a_past_one_means_now(store: Store, t0: float) -> None:
    later, past = store.enqueue([new_job(run_at=t0 + 3600.0), new_job(run_at=t0 - 3600.0)], now=t0)
    assert at(store.get_job(later)["run_at"], t0 + 3600)
    assert at(store.get_job(past)["run_at"], t0)
    register(store, "w1", t0)
    assert claim_one(store, "w1", t0).id == past
    assert store.claim("w1", ["default"], 1, 30.0, now=t0 + 3599) == []
    assert claim_one(store, "w1", t0 + 3600).id == later


def test_await_end_and_job_end(store: Store, t0: float) -> None:
    job_id = enqueue_one(store, t0)
    end = store.await_end(job_id)
    assert (end.status, end.ended) == (JobStatus.QUEUED, False)
    register(store, "w1", t0)
    job = claim_one(store, "w1", t0)
    store.finish([succeeded(job, '{"answer": 42}')], now=t0 + 1)
    end = store.job_end(job_id)
    assert (end.status, end.result, end.ended) == (JobStatus.SUCCEEDED, {"answer": 42}, True)
    dead_id = enqueue_one(store, t0, max_retries=0)
    job = claim_one(store, "w1", t0 + 2)
    store.finish([failed(job, Outcome.FAILED, "ValueError: nope")], now=t0 + 3)
    end = store.job_end(dead_id)
    assert end.status == JobStatus.DEAD and "nope" in (end.error or "")


def test_ends_of_awaited_jobs_are_announced_where_the_backend_can(
    store: Store, t0: float, backend: str
) -> None:
    heard: list[str | None] = []
    got = threading.Event()

    def on_end(job_id: str | None) -> None:
        heard.append(job_id)
        got.set()

    handle = store.link.listen_ends(on_end)
    if not store.link.supports_notify:
        assert handle is None  # waiters poll
        return
    assert handle is not None
    try:
        quiet, awaited = enqueue_one(store, t0), enqueue_one(store, t0)
        store.await_end(awaited)
        register(store, "w1", t0)
        jobs = store.claim("w1", ["default"], 2, 30.0, now=t0)
        store.finish([succeeded(j, None) for j in jobs], now=t0 + 1)
        wait_for(lambda: awaited in heard, 5, "the end of the awaited job to be announced")
        assert quiet not in heard  # nobody waited for it: its end cost no notification
        cancelled = enqueue_one(store, t0 + 2, delay=60.0)
        store.await_end(cancelled)
        store.cancel_job(cancelled)
        wait_for(lambda: cancelled in heard, 5, "the cancel to be announced")
    finally:
        handle.close()


@pytest.mark.parametrize("bad", [float("nan"), -1.0])
def test_a_bad_declaration_is_refused_and_nothing_is_stored(store: Store, bad: float) -> None:
    with pytest.raises(ValueError, match="retry_backoff"):
        store.declare_tasks([TaskPolicy("t", "q", 0, 1, bad, 1.0)], "w1")
    assert store.task_policies() == {}


# -- the parameters a task declares (schema v10) ------------------------------------------

PARAMETERS = (
    TaskParameter("numbers", "positional_or_keyword"),
    TaskParameter("scale", "keyword_only", has_default=True),
    TaskParameter("extra", "var_keyword"),
)


def test_a_declaration_carries_its_parameters_and_a_change_of_them_is_a_change(
    store: Store, t0: float
) -> None:
    with_parameters = dataclasses.replace(CPU, parameters=PARAMETERS)
    assert store.declare_tasks([with_parameters], "w1", now=t0) == ["crunch"]
    assert store.task_policies()["crunch"].parameters == PARAMETERS
    assert store.declare_tasks([with_parameters], "w2", now=t0 + 1) == []
    fewer = dataclasses.replace(CPU, parameters=PARAMETERS[:1])
    assert store.declare_tasks([fewer], "w3", now=t0 + 2) == ["crunch"]
    assert store.task_policies()["crunch"].parameters == PARAMETERS[:1]
    none_at_all = dataclasses.replace(CPU, parameters=())  # a function without parameters
    assert store.declare_tasks([none_at_all], "w4", now=t0 + 3) == ["crunch"]
    assert store.task_policies()["crunch"].parameters == ()


def test_a_declaration_without_parameters_reads_as_unknown(store: Store, t0: float) -> None:
    """A worker of a version before parameters were declared writes none: NULL, read as
    None (unknown: an enqueue by name is not checked), never as "takes nothing"."""
    store.declare_tasks([CPU], "old-worker", now=t0)
    assert CPU.parameters is None
    assert store.task_policies()["crunch"].parameters is None
