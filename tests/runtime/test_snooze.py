"""A task that finds it is too early snoozes (`heartq.Snooze`, raised or returned), through
a real worker on every backend: its job is queued again and runs after the delay it asked
for, never before; the attempt is not counted; its execution is recorded `snoozed`, with
what the task said; the job counts its snoozes, and past its task's `max_snoozes` a
snooze is a failed attempt, so a job cannot snooze forever unnoticed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import heartq
from heartq import events
from heartq.display import epoch_of
from tests.conftest import on_every_backend
from tests.runtime.test_outcomes import wait_status

DELAY = 0.6
"""Long enough against a 50 ms poll that a run before it would show; short for a test."""


def _executions(app: heartq.App, job_id: str) -> list[dict[str, Any]]:
    return list(app.get_job(job_id)["executions"])


@on_every_backend  # the fenced finish counts snoozes and not attempts in each dialect's SQL
@pytest.mark.parametrize("pool", ["thread", "async"])
def test_a_snooze_runs_again_after_its_delay_and_is_not_counted(
    app: heartq.App, run_worker: Any, pool: str
) -> None:
    seen: list[tuple[int, int, int]] = []
    heard: list[dict[str, Any]] = []
    app.events.subscribe(
        lambda event: heard.append(event.fields) if event.name == events.JOB_SNOOZED else None
    )

    @app.task(max_retries=0)  # one counted attempt only: two snoozes must not spend it
    def fetch(ctx: heartq.JobContext) -> str:
        seen.append((ctx.attempt, ctx.execution_id, ctx.snoozes))
        if ctx.snoozes == 0:
            raise heartq.Snooze(DELAY, "429, Retry-After")
        if ctx.snoozes == 1:
            return heartq.Snooze(DELAY)  # type: ignore[return-value]  # returned: the same
        return "fetched"

    job_id = fetch.enqueue()
    with run_worker(app, pool=pool):
        wait_status(app, job_id, "succeeded", timeout=15)

    job = app.get_job(job_id)
    assert job["result"] == "fetched"
    assert (job["attempts"], job["snoozes"], job["execution_id"]) == (1, 2, 3)
    assert job["error"] is None  # a snooze is not an error of the job
    assert seen == [(1, 1, 0), (1, 2, 1), (1, 3, 2)]  # each run its first attempt
    runs = _executions(app, job_id)
    assert [e["outcome"] for e in runs] == ["snoozed", "snoozed", "succeeded"]
    assert [e["error"] for e in runs[:2]] == [
        f"snoozed for {DELAY:g} s: 429, Retry-After",
        f"snoozed for {DELAY:g} s",
    ]
    for before, after in itertools.pairwise(runs):
        waited = (epoch_of(after["started_at"]) or 0.0) - (epoch_of(before["ended_at"]) or 0.0)
        assert waited >= DELAY - 0.001, f"ran again {waited:.3f} s after its snooze"
        assert waited < DELAY + 5, f"ran again only {waited:.3f} s after its snooze"
    assert [(f["snoozes"], f["retry_in"], f["reason"]) for f in heard] == [
        (1, DELAY, f"snoozed for {DELAY:g} s: 429, Retry-After"),
        (2, DELAY, f"snoozed for {DELAY:g} s"),
    ]


@on_every_backend
def test_snoozes_past_max_snoozes_are_failed_attempts_then_dead(
    app: heartq.App, run_worker: Any
) -> None:
    @app.task(max_snoozes=2, max_retries=1)
    def never_ready() -> None:
        raise heartq.Snooze(0.05, "file not there yet")

    job_id = never_ready.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "dead", timeout=15)

    job = app.get_job(job_id)
    runs = _executions(app, job_id)
    # two free snoozes, then each snooze is a counted, failed attempt: 2 = max_retries + 1
    assert [e["outcome"] for e in runs] == ["snoozed", "snoozed", "failed", "failed"]
    assert (job["attempts"], job["snoozes"]) == (2, 2)
    assert "SnoozedTooOften" in job["dead_reason"] and "max_snoozes" in job["dead_reason"]
    assert job["dead_reason"].startswith("failed 2 attempts")
    assert runs[2]["error"].startswith("snoozed for 0.05 s: file not there yet\n")


def test_a_snooze_tells_the_attempt_hooks_whether_it_runs_again(
    app: heartq.App, run_worker: Any
) -> None:
    told: list[tuple[Any, bool, type[BaseException] | None]] = []

    def around(attempt: heartq.AttemptInfo) -> Any:
        yield
        told.append((attempt.outcome, attempt.will_retry, type(attempt.exception)))

    app.hooks.attempt(around)

    @app.task(max_snoozes=1, max_retries=0)
    def wait_twice() -> None:
        return heartq.Snooze(0.05)  # type: ignore[return-value]  # returned, not raised

    job_id = wait_twice.enqueue()
    with run_worker(app):
        wait_status(app, job_id, "dead", timeout=15)
    assert told == [
        (heartq.Outcome.SNOOZED, True, heartq.Snooze),  # within the bound: runs again
        (heartq.Outcome.FAILED, False, heartq.Snooze),  # past it, no retry left: dead
    ]
