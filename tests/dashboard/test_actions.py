"""Actions through the dashboard go through the same store operations as the command
line (`cancel_job`, `replay_dead`, `purge_dead_ids`), answer 303 to the page they came
from, and that page says what happened."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from starlette.testclient import TestClient

from heartq import events
from heartq.dashboard.security import CSRF_COOKIE
from heartq.errors import JobNotFound
from heartq.store import Store
from tests.conformance.support import enqueue_one
from tests.dashboard.support import (
    Dashboard,
    alert,
    claim,
    csrf,
    dead_job,
    located,
    notice,
    page,
    rows,
)


def act(client: TestClient, path: str, page_path: str, **fields: Any) -> str:
    """Post as a browser that visited `page_path` does (the CSRF value of its forms,
    else of the cookie it set, as a script posting for itself would); where the 303
    sends the browser."""
    text = page(client.get(page_path))
    form = csrf(text) if 'name="_csrf"' in text else client.cookies[CSRF_COOKIE]
    return located(client.post(path, data={"_csrf": form, **fields}))


def audited(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        r.heartq_fields  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == events.DASHBOARD_ACTION
    ]


def test_cancel_a_queued_job(
    store: Store, dashboard: Dashboard, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = enqueue_one(store, store.clock())
    client = dashboard(allow_actions=True)
    assert "Cancel this job" in page(client.get(f"/jobs/{job_id}"))

    with caplog.at_level(logging.INFO, logger="heartq"):
        back = act(client, f"/jobs/{job_id}/cancel", f"/jobs/{job_id}")

    assert back == f"/jobs/{job_id}?notice=cancelled"
    text = page(client.get(back))
    assert notice(text) == "Cancelled: the job had not started and will not run."
    assert "Cancel this job" not in text
    job = store.get_job(job_id)
    assert job["status"] == "cancelled"
    assert job["cancelled_by"].startswith("heartq dashboard (from testclient) by ")
    assert job["cancelled_by"] in text
    assert audited(caplog) == [
        {"action": "cancel", "job_ids": [job_id], "client": "testclient", "result": "cancelled"}
    ]


def test_cancel_a_running_job_asks_its_worker(store: Store, dashboard: Dashboard) -> None:
    now = store.clock()
    job_id = enqueue_one(store, now)
    claim(store, job_id, now)
    client = dashboard(allow_actions=True)

    back = act(client, f"/jobs/{job_id[:10]}/cancel", f"/jobs/{job_id}")  # by its start

    assert back == f"/jobs/{job_id}?notice=cancel_requested"
    assert notice(page(client.get(back))).startswith("Cancel requested: its worker tells the task")
    job = store.get_job(job_id)
    assert job["status"] == "running" and job["cancel_requested"]
    # once asked, the page offers no second cancel
    assert "Cancel this job" not in page(client.get(f"/jobs/{job_id}"))
    again = act(client, f"/jobs/{job_id}/cancel", f"/jobs/{job_id}")
    assert notice(page(client.get(again))) == (
        "Cancel requested: its worker tells the task within about a second, and ends the "
        "attempt after a grace of at most 5 s if the task does not stop by itself."
    )


def test_cancel_a_finished_job_changes_nothing(store: Store, dashboard: Dashboard) -> None:
    job_id = dead_job(store, store.clock())
    before = store.get_job(job_id)
    client = dashboard(allow_actions=True)
    assert "Cancel this job" not in page(client.get(f"/jobs/{job_id}"))

    back = act(client, f"/jobs/{job_id}/cancel", f"/jobs/{job_id}")

    assert notice(page(client.get(back))) == "The job had already finished: nothing to cancel."
    assert store.get_job(job_id) == before


def test_cancel_an_unknown_job_is_a_404(store: Store, dashboard: Dashboard) -> None:
    client = dashboard(allow_actions=True)
    page(client.get("/"))
    form = client.cookies[CSRF_COOKIE]
    missing = "0190aaaa-0000-7000-8000-000000000000"
    response = client.post(f"/jobs/{missing}/cancel", data={"_csrf": form})
    assert alert(page(response, 404)) == f"no job with id {missing!r}"


def test_replay_the_ticked_dead_jobs(
    store: Store, dashboard: Dashboard, caplog: pytest.LogCaptureFixture
) -> None:
    now = store.clock()
    first, second, third = (dead_job(store, now - n) for n in (3, 2, 1))
    client = dashboard(allow_actions=True)
    text = page(client.get("/dlq"))
    assert rows(text) == [third, second, first]
    assert text.count('type="checkbox" name="job_id"') == 3
    assert text.count('data-testid="replay-one"') == 3

    with caplog.at_level(logging.INFO, logger="heartq"):
        back = act(client, "/dlq/replay", "/dlq", job_id=[first, third])

    assert back == "/dlq?notice=replayed&n=2"
    text = page(client.get(back))
    assert notice(text) == "Replayed 2 dead job(s)."
    assert rows(text) == [second]
    assert [store.get_job(j)["status"] for j in (first, second, third)] == [
        "queued", "dead", "queued"
    ]  # fmt: skip
    assert store.get_job(first)["executions"]  # the history stays
    assert [(a["action"], sorted(a["job_ids"])) for a in audited(caplog)] == [
        ("replay", sorted([first, third]))
    ]


def test_a_rows_replay_button_replays_that_job_alone(store: Store, dashboard: Dashboard) -> None:
    now = store.clock()
    first, second = dead_job(store, now - 2), dead_job(store, now - 1)
    client = dashboard(allow_actions=True)

    # a box ticked elsewhere on the page does not go along with a row's own button
    back = act(client, "/dlq/replay", "/dlq", one=second, job_id=[first])

    assert back == "/dlq?notice=replayed&n=1"
    assert notice(page(client.get(back))) == "Replayed 1 dead job(s)."
    assert store.get_job(second)["status"] == "queued"
    assert store.get_job(first)["status"] == "dead"
    # replayed already: nothing left to requeue
    again = act(client, "/dlq/replay", "/dlq", one=second)
    assert again == "/dlq?notice=nothing_replayed&n=0"
    assert notice(page(client.get(again))).startswith("Nothing was replayed")


def test_a_blocked_jobs_page_names_the_dead_job_that_holds_it_and_replays_it(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    holder = dead_job(store, now, error="Traceback ...\nKeyError: 'sku'", task="fetch")
    blocked = enqueue_one(store, now, task="ship", depends_on=(holder,))
    behind = enqueue_one(store, now, task="mail", depends_on=(blocked,))
    client = dashboard(allow_actions=True)
    assert rows(page(client.get("/jobs?status=blocked"))) == [behind, blocked]
    assert 'data-testid="total-blocked"><a href="/jobs?status=blocked"><span class="n">2<' in (
        page(client.get("/"))
    )
    for job_id in (blocked, behind):  # the root, however far up
        text = page(client.get(f"/jobs/{job_id}"))
        assert '<span class="status status-blocked">blocked</span>' in text
        assert f'href="/jobs/{holder}"' in text and "(fetch, " in text
        assert "KeyError: &#39;sku&#39;" in text and "Cancel this job" in text
        assert f'data-testid="replay-holder">Replay {holder}</button>' in text

    back = act(client, "/dlq/replay", f"/jobs/{behind}", one=holder)

    assert back == "/dlq?notice=replayed&n=1"
    assert [store.get_job(i)["status"] for i in (holder, blocked, behind)] == [
        "queued", "waiting", "waiting"
    ]  # fmt: skip
    assert 'data-testid="blocked-by"' not in page(client.get(f"/jobs/{behind}"))


def test_replay_with_nothing_ticked_is_a_400(store: Store, dashboard: Dashboard) -> None:
    dead_job(store, store.clock())
    client = dashboard(allow_actions=True)
    form = csrf(page(client.get("/dlq")))
    text = page(client.post("/dlq/replay", data={"_csrf": form}), 400)
    assert alert(text) == "tick the dead jobs to replay first"


def test_purge_older_than_then_all(store: Store, dashboard: Dashboard) -> None:
    now = store.clock()
    old = [dead_job(store, now - 1000), dead_job(store, now - 900)]
    recent = dead_job(store, now)
    alive = enqueue_one(store, now)
    client = dashboard(allow_actions=True)
    assert 'data-testid="purge"' in page(client.get("/dlq"))

    back = act(client, "/dlq/purge", "/dlq", older_than="500")

    assert back == "/dlq?notice=purged&n=2"
    text = page(client.get(back))
    assert notice(text) == "Purged 2 dead job(s) for good."
    assert rows(text) == [recent]
    for job_id in old:
        with pytest.raises(JobNotFound):
            store.get_job(job_id)

    back = act(client, "/dlq/purge", "/dlq", older_than=" ")  # the field left empty: all
    assert back == "/dlq?notice=purged&n=1"
    assert 'data-testid="dlq-empty"' in page(client.get(back))
    assert store.get_job(alive)["status"] == "queued"  # only dead jobs go


def test_purge_refuses_an_age_that_is_not_one(store: Store, dashboard: Dashboard) -> None:
    job_id = dead_job(store, store.clock())
    client = dashboard(allow_actions=True)
    form = csrf(page(client.get("/dlq")))
    for typed, answer in [
        ("soon", "older than: 'soon' is not a number of seconds"),
        ("-5", "older than: a number of seconds, 0 or more"),
        ("nan", "older than: must be a finite number of seconds, got 'nan'"),
        ("inf", "older than: must be a finite number of seconds, got 'inf'"),
        ("1e300", "older than: must be at most 3.1536e+08 s (ten years), got '1e300'"),
    ]:
        response = client.post("/dlq/purge", data={"_csrf": form, "older_than": typed})
        assert alert(page(response, 400)) == answer
    assert store.get_job(job_id)["status"] == "dead"


def test_purge_older_than_ten_years_purges_nothing(store: Store, dashboard: Dashboard) -> None:
    """The longest age taken (ten years, as every duration) binds on every backend and
    purges nothing younger."""
    job_id = dead_job(store, store.clock() - 3600)
    client = dashboard(allow_actions=True)
    assert act(client, "/dlq/purge", "/dlq", older_than="315360000") == "/dlq?notice=purged&n=0"
    assert store.get_job(job_id)["status"] == "dead"


def test_a_queue_paused_scaled_and_resumed(
    store: Store, dashboard: Dashboard, caplog: pytest.LogCaptureFixture
) -> None:
    enqueue_one(store, store.clock())
    client = dashboard(allow_actions=True)
    assert 'data-queue="default"' in page(client.get("/queues"))
    with caplog.at_level(logging.INFO, logger="heartq"):
        assert act(client, "/queues/default/pause", "/queues") == "/queues?notice=paused"
        back = act(client, "/queues/default/scale", "/queues", concurrency="3")
    assert back == "/queues?notice=scaled"
    control = store.queue_controls()["default"]
    assert (control.paused, control.concurrency) == (True, 3)
    assert (control.changed_by or "").startswith("heartq dashboard (from testclient) by ")
    text = page(client.get(back))
    assert notice(text) == "Scaled: each worker obeys the new cap within about a second."
    assert 'data-state="paused"' in text and 'data-cap="3"' in text
    assert 'data-testid="paused-default"' in page(client.get("/"))
    assert act(client, "/queues/default/resume", "/queues") == "/queues?notice=resumed"
    act(client, "/queues/default/scale", "/queues", concurrency="")
    control = store.queue_controls()["default"]
    assert (control.paused, control.concurrency) == (False, None)
    assert [(a["action"], a["queue"]) for a in audited(caplog)] == [
        ("pause", "default"),
        ("scale", "default"),
    ]


def test_a_bad_cap_is_refused_and_changes_nothing(store: Store, dashboard: Dashboard) -> None:
    enqueue_one(store, store.clock())
    client = dashboard(allow_actions=True)
    text = page(client.get("/queues"))
    for typed in ("-1", "many"):
        answer = client.post(
            "/queues/default/scale", data={"_csrf": csrf(text), "concurrency": typed}
        )
        assert answer.status_code == 400, answer.text
    assert store.queue_controls() == {}
