"""`heartq.testing` and a task that snoozes (`heartq.Snooze`), on the backends of a layer
(tests/testing/conftest.py): a drain
reports the attempt `snoozed` and leaves the job queued after its delay, not counted;
`run_retries_now` cuts snoozes short as it does retries, through the task's bound to the
dead-letter queue; `run` raises the `Snooze` the attempt raised or returned."""

from __future__ import annotations

import time

import pytest

import heartq
from heartq.display import epoch_of
from heartq.model import JobStatus, Outcome
from heartq.testing import drain, run


def test_a_drain_leaves_a_snoozed_job_queued_and_says_so(app: heartq.App) -> None:
    calls: list[int] = []

    @app.task(max_retries=0)
    def poll(ctx: heartq.JobContext, path: str) -> str:
        calls.append(ctx.snoozes)
        if len(calls) == 1:
            raise heartq.Snooze(30, f"{path} not there yet")
        return "found"

    job_id = poll.enqueue("/in/today.csv")
    started = time.monotonic()
    (snoozed,) = drain(app)
    assert time.monotonic() - started < 20, "the drain waited for the snooze"

    assert (snoozed.status, snoozed.outcomes, snoozed.snoozes) == (
        JobStatus.QUEUED, ["snoozed"], 1,
    )  # fmt: skip
    assert isinstance(snoozed.exception, heartq.Snooze) and snoozed.exception.seconds == 30
    assert snoozed.attempts[0].error == "snoozed for 30 s: /in/today.csv not there yet"
    assert "[snoozed] -> queued: next attempt at" in str(snoozed)
    stored = app.get_job(job_id)
    assert (stored["attempts"], stored["snoozes"]) == (0, 1)  # not counted
    waits = (epoch_of(stored["run_at"]) or 0.0) - app.store.clock()
    assert 20 < waits <= 30

    (done,) = drain(app, run_retries_now=True)  # the snooze cut short, as a retry's wait
    assert (done.status, done.result) == (JobStatus.SUCCEEDED, "found")
    assert done.outcomes == ["succeeded"]
    assert calls == [0, 1]
    assert app.get_job(job_id)["attempts"] == 1  # its one attempt, unspent by the snooze


def test_retries_now_run_a_snoozing_job_through_its_bound(app: heartq.App) -> None:
    @app.task(max_snoozes=3, max_retries=1)
    def never_ready() -> None:
        return heartq.Snooze(60)  # type: ignore[return-value]  # returned: the same

    never_ready.enqueue()
    (run_,) = drain(app, run_retries_now=True)
    assert run_.outcomes == ["snoozed"] * 3 + ["failed"] * 2
    assert (run_.status, run_.snoozes) == (JobStatus.DEAD, 3)
    assert run_.dead_reason is not None and "SnoozedTooOften" in run_.dead_reason
    assert [a.outcome for a in run_.attempts][-1] is Outcome.FAILED


def test_run_raises_the_snooze(app: heartq.App) -> None:
    @app.task
    def rate_limited(returned: bool) -> None:
        snooze = heartq.Snooze(12.5, "429")
        if returned:
            return snooze  # type: ignore[return-value]
        raise snooze

    for returned in (False, True):
        with pytest.raises(heartq.Snooze) as raised:
            run(rate_limited, returned)
        assert (raised.value.seconds, raised.value.reason) == (12.5, "429")
        assert str(raised.value) == "snoozed for 12.5 s: 429"
