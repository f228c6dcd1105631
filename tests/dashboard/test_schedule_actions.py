"""The dashboard's schedules page: a runtime schedule added, paused, resumed and removed
from its forms, behind the actions guard and CSRF as every action; bad input refused
with a 400 and nothing stored."""

from __future__ import annotations

from heartq.store import Store
from tests.dashboard.support import Dashboard, csrf, notice, page
from tests.dashboard.test_actions import act


def test_a_schedule_added_paused_resumed_and_removed(store: Store, dashboard: Dashboard) -> None:
    client = dashboard(allow_actions=True)
    assert 'data-testid="schedules-empty"' in page(client.get("/schedules"))
    back = act(client, "/schedules/add", "/schedules", name="nightly", task="report",
               when="30", args='{"n": 1}')  # fmt: skip
    assert back == "/schedules?notice=schedule_added"
    (row,) = store.list_schedules()
    assert (row["task"], row["spec"]) == ("report", "every 30s")
    assert row["definition"]["args"] == {"n": 1}
    assert (row["changed_by"] or "").startswith("heartq dashboard (from testclient) by ")
    text = page(client.get(back))
    assert notice(text).startswith("Schedule stored")
    assert 'data-schedule="nightly"' in text and 'data-state="active"' in text
    act(client, "/schedules/add", "/schedules", name="nightly", task="report",
        when="*/5 * * * *", replace="on")  # fmt: skip
    assert store.list_schedules()[0]["spec"] == "cron */5 * * * *"
    assert act(client, "/schedules/nightly/pause", "/schedules").endswith("schedule_paused")
    assert 'data-state="paused"' in page(client.get("/schedules"))
    assert act(client, "/schedules/nightly/resume", "/schedules").endswith("schedule_resumed")
    assert store.list_schedules()[0]["paused"] is False
    assert act(client, "/schedules/nightly/remove", "/schedules").endswith("schedule_removed")
    assert store.list_schedules() == []


def test_bad_input_and_a_read_only_dashboard_store_nothing(
    store: Store, dashboard: Dashboard
) -> None:
    client = dashboard(allow_actions=True)
    text = page(client.get("/schedules"))
    for fields in (
        {"name": "x", "task": "t", "when": "61 * * * *"},
        {"name": "", "task": "t", "when": "1"},
        {"name": "x", "task": "t", "when": "1", "args": "{bad"},
    ):
        answer = client.post("/schedules/add", data={"_csrf": csrf(text), **fields})
        assert answer.status_code == 400, answer.text
    assert client.post("/schedules/x/remove", data={"_csrf": csrf(text)}).status_code == 404
    read_only = dashboard()
    assert 'data-testid="add-schedule"' not in page(read_only.get("/schedules"))
    refused = read_only.post("/schedules/add", data={"name": "x", "task": "t", "when": "1"})
    assert refused.status_code == 403
    assert store.list_schedules() == []
