"""`heartq.testing.drain` honours an expiry as a worker does (it runs one): a job past
its `expires=` is reported cancelled, never run; one in time runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import heartq
from heartq.model import JobStatus
from heartq.testing import drain


def test_a_drain_does_not_run_an_expired_job(app: heartq.App) -> None:
    ran: list[int] = []

    @app.task
    def note(n: int) -> None:
        ran.append(n)

    past = datetime.now(UTC) - timedelta(seconds=1)
    expired = note.options(expires=past).enqueue(1)
    in_time = note.options(expires=600).enqueue(2)
    report = drain(app)

    assert ran == [2]
    assert report.job(in_time).status == JobStatus.SUCCEEDED
    gone = app.get_job(expired)
    assert gone["status"] == JobStatus.CANCELLED and gone["attempts"] == 0
    assert gone["error"].startswith("expired:")
