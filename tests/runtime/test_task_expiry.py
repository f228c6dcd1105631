"""A task's own expiry (`@app.task(expires=S)`): each job an enqueue makes of it without
an `expires` of its own must have started within S seconds of when it was first due,
else a worker ends it cancelled, never run; declared with the task, so an enqueue by
name from a program without its code takes it too; an enqueue's `expires=` wins; a
`delay` or `eta` moves the expiry with the job's first due time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import heartq
from heartq.errors import ConfigError
from tests.conftest import on_every_backend
from tests.support import wait_for

from .test_outcomes import wait_status

EXPIRES = 1.0


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _expires_after_created(app: heartq.App, job_id: str) -> float:
    job = app.get_job(job_id)
    return _epoch(job["expires_at"]) - _epoch(job["created_at"])


@on_every_backend  # declared (a column of each backend's declarations) and dated by each
def test_a_task_s_expiry_drops_its_late_jobs_by_any_enqueue(app: heartq.App, run_worker) -> None:
    ran: list[str] = []

    @app.task(queue="later", expires=EXPIRES)
    def stamp(label: str) -> None:
        ran.append(label)

    with run_worker(app, queues=["elsewhere"]):  # declares the task, claims none of its jobs
        wait_for(lambda: app.store.task_policies().get("stamp"), 10, what="declared")
    assert app.store.task_policies()["stamp"].expires == EXPIRES

    late = stamp.enqueue("late")
    kept = stamp.options(expires=600).enqueue("kept")  # the enqueue's own wins
    delayed = stamp.options(delay=30).enqueue("delayed")
    at_eta = stamp.options(eta=datetime.now(UTC) + timedelta(seconds=60)).enqueue("eta")
    client = heartq.App(app.url)  # by name, without the task's code: declared
    try:
        by_name = client.enqueue("stamp", {"label": "by name"})
        by_name_kept = client.enqueue("stamp", {"label": "by name, kept"}, expires=600)
    finally:
        client.close()

    for job_id in (late, by_name):
        assert _expires_after_created(app, job_id) == pytest.approx(EXPIRES, abs=0.05)
    for job_id in (kept, by_name_kept):
        assert _expires_after_created(app, job_id) == pytest.approx(600, abs=0.05)
    assert _expires_after_created(app, delayed) == pytest.approx(30 + EXPIRES, abs=0.05)
    assert _expires_after_created(app, at_eta) == pytest.approx(60 + EXPIRES, abs=0.5)

    def past(job_id: str) -> bool:
        return app.store.clock() > _epoch(app.get_job(job_id)["expires_at"]) + 0.1

    wait_for(lambda: past(late) and past(by_name), 10, what="the task's expiry to pass")
    with run_worker(app, queues=["later"]):
        for job_id in (kept, by_name_kept):
            wait_status(app, job_id, "succeeded")
        for job_id in (late, by_name):
            wait_status(app, job_id, "cancelled")
    for job_id in (late, by_name):
        job: dict[str, Any] = app.get_job(job_id)
        assert str(job["error"]).startswith("expired:"), job["error"]
        assert job["attempts"] == 0
    assert sorted(ran) == ["by name, kept", "kept"]
    assert app.get_job(delayed)["status"] == "queued"  # not due yet, not expired


def test_a_bad_task_expiry_is_refused_where_the_task_is_defined(app: heartq.App) -> None:
    for bad in (0, -1, float("nan"), "60"):
        with pytest.raises(ConfigError) as refused:

            @app.task(name=f"t{len(app.tasks)}", expires=bad)  # type: ignore[arg-type]
            def task() -> None: ...

        assert "expires" in str(refused.value) and "\n" not in str(refused.value)
