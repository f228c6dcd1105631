"""The dashboard's job page says when a job expires (`expires=`), and that a job which
expired unstarted was never run (cancelled, no attempt counted)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.testclient import TestClient

from heartq.lifecycle import fate
from heartq.store import Store
from tests.conformance.support import new_job, register
from tests.dashboard.support import page


def test_the_job_page_shows_the_expiry_and_an_expired_job(
    dashboard: Callable[..., TestClient], store: Store
) -> None:
    now = store.clock()
    register(store, "w1", now)
    (waiting,) = store.enqueue([new_job(expires_in=600.0, run_at=now + 3600)])
    (late,) = store.enqueue([new_job(expires_in=1.0)], now=now - 10)
    (job,) = store.claim("w1", ["default"], 1, 30.0)
    assert job.id == late
    store.finish([fate.decide(job, fate.expired_end(9.0), cancel_requested=False)])
    client = dashboard()

    shown = page(client.get(f"/jobs/{waiting}"))
    assert 'data-testid="expires"' in shown and "not started by then" in shown
    gone = page(client.get(f"/jobs/{late}"))
    assert "expired: not started by" in gone and "so never run" in gone
