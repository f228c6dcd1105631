"""A failed step blocks the rest of its pipeline instead of destroying it (docs/design/pipelines.md,
"Jobs that wait for jobs"): the waiter of the pipeline's last job hears the root cause,
the blocked jobs show in `heartq.testing`, and a replay of the failed step, once its
cause is fixed, runs the rest through a real worker."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import heartq
from heartq import events
from heartq.config import Settings
from heartq.maintenance.pruner import Pruner
from heartq.testing import assert_enqueued, drain, enqueued
from tests.conftest import on_every_backend
from tests.support import wait_for


def _pipeline_tasks(app: heartq.App, fixed: Path) -> dict[str, Any]:
    @app.task(max_retries=0)
    def fetch(url: str) -> int:
        if not fixed.exists():
            raise ConnectionError(f"{url} is unreachable")
        return len(url)

    @app.task
    def double(x: int) -> int:
        return 2 * x

    @app.task
    def total(results: list[int], plus: int = 0) -> int:
        return sum(results) + plus

    return {"fetch": fetch, "double": double, "total": total}


@on_every_backend  # the waiter is told by a notification on PostgreSQL, polls on SQLite
def test_a_replayed_failure_runs_the_rest_of_its_pipeline(
    app: heartq.App, tmp_path: Path, run_worker: Callable[..., Any]
) -> None:
    fixed = tmp_path / "fixed"
    t = _pipeline_tasks(app, fixed)
    url = "https://example.org/a"
    pipeline = heartq.chain(
        t["fetch"].s(url),
        heartq.group(t["double"].s(1), t["double"].s(2), callback=t["total"].s(plus=100)),
        t["double"].s(5),
    ).enqueue()
    fetched, *rest = pipeline.ids
    with run_worker(app):
        wait_for(lambda: app.get_job(fetched)["status"] == "dead", what="the fetch died")
        with pytest.raises(heartq.JobDead, match=r"ConnectionError: .* is unreachable") as held:
            app.result(pipeline.last, timeout=10)
        assert (held.value.job_id, held.value.blocked) == (fetched, pipeline.last)
        assert [app.get_job(i)["status"] for i in rest] == ["blocked"] * len(rest)
        assert app.get_job(pipeline.last)["blocked_by"]["id"] == fetched
        fixed.touch()  # the operator fixes the cause, then replays
        assert app.replay(fetched) == [fetched]
        assert app.result(pipeline.last, timeout=10) == 10
        assert app.result(rest[-2], timeout=5) == 106  # the group's callback: 2 + 4 + 100
    assert app.replay(fetched) == []  # not dead any more: left as it is


def test_heartq_testing_shows_the_blocked_jobs(app: heartq.App, tmp_path: Path) -> None:
    t = _pipeline_tasks(app, tmp_path / "never")
    first, then = heartq.chain(t["fetch"].s("u"), t["double"].s(3)).enqueue().ids
    report = drain(app)  # ends: the blocked job will not move without an operator
    assert [run.id for run in report] == [first]
    assert [(job.id, str(job.status)) for job in enqueued(app)] == [(then, "blocked")]
    assert_enqueued("double", {"x": 3}, app=app, status="blocked")
    with pytest.raises(heartq.JobDead, match="is unreachable"):
        app.result(then, timeout=5)
    assert app.cancel(then) is heartq.CancelResult.CANCELLED
    assert list(enqueued(app)) == []


def test_the_pruner_cancels_jobs_blocked_past_the_blocked_retention(
    app: heartq.App, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.from_env({"HEARTQ_BLOCKED_RETENTION": "0.05"})
    assert settings.blocked_retention == 0.05 and Settings().blocked_retention is None
    t = _pipeline_tasks(app, tmp_path / "never")
    first, then = heartq.chain(t["fetch"].s("u"), t["double"].s(3)).enqueue().ids
    drain(app)
    assert Pruner(app.store, Settings(), app.events).run_once() == 0  # unset: kept while dead
    with caplog.at_level(logging.INFO, logger="heartq"):
        pruner = Pruner(app.store, settings, app.events)
        wait_for(lambda: pruner.run_once(), what="the blocked retention")
    job = app.get_job(then)
    assert job["status"] == "cancelled"
    why = f"dependency_failed: job {first} ended dead and was not replayed within 0.05 s"
    assert job["error"] == why
    (pruned,) = [r for r in caplog.records if r.getMessage() == events.PRUNED]
    assert pruned.heartq_fields["blocked"] == 1  # type: ignore[attr-defined]
