"""`heartq queues`: the list, and an operator's decisions told back; bad input is one
line and writes nothing. (Workers obeying them: tests/integration/test_queue_controls.py;
the metrics: test_metrics.py.) And each queue's busiest fairness keys, under the list
and summed up in `heartq stats`."""

from __future__ import annotations

from heartq.inspect import fairness
from heartq.store import Store
from tests.cli.helpers import HeartqCli
from tests.conformance.support import register
from tests.conftest import on_every_backend


def test_decisions_are_stored_and_listed(heartq: HeartqCli) -> None:
    heartq.add("ok", {"n": 1}, queue="emails")
    assert heartq("queues", "--json").json() == [
        {
            "queue": "emails",
            "paused": False,
            "concurrency": None,
            "queued": 1,
            "running": 0,
            "workers": 0,
            "changed_at": None,
            "changed_by": None,
            "fair": None,
        }
    ]
    said = heartq("queues", "pause", "emails").ok().out
    assert said.strip() == "queue emails: paused, no cap (workers obey within about a second)"
    scaled = heartq("queues", "scale", "emails", "--concurrency", "2", "--json").json()
    assert (scaled["paused"], scaled["concurrency"]) == (True, 2)
    assert "heartq queues scale by " in scaled["changed_by"]
    listed = heartq("queues").ok().out
    assert "emails" in listed and "paused" in listed
    heartq("queues", "resume", "emails").ok()
    lifted = heartq("queues", "scale", "emails", "--concurrency", "none", "--json").json()
    assert (lifted["paused"], lifted["concurrency"]) == (False, None)


def test_bad_input_is_one_line_and_writes_nothing(heartq: HeartqCli) -> None:
    heartq("queues", "scale", "emails", "--concurrency", "-1").fails(1)
    heartq("queues", "pause", " ").fails(1)
    heartq("queues", "scale", "emails", "--concurrency", "many").fails(2)
    assert heartq("queues", "--json").json() == []


@on_every_backend  # each backend's statement (PostgreSQL: its ready log's lanes)
def test_each_queues_busiest_fairness_keys_are_listed(heartq: HeartqCli, store: Store) -> None:
    for n in range(30):
        heartq.add("ok", {"n": n}, queue="imports", fair_key="acct:big")
    for n in range(3):
        heartq.add("ok", {"n": n}, queue="imports", fair_key="acct:small", fair_weight=2.5)
    for n in range(fairness.SHOWN):  # one job each: more keys than a queue lists
        heartq.add("ok", {"n": n}, queue="imports", fair_key=f"acct:{n:02d}")
    heartq.add("ok", {"n": 1}, queue="emails")
    now = store.clock()
    register(store, "w1", now, queues=("imports",))
    claimed = store.claim("w1", ["imports"], 1, 30.0, now=now)  # one key's first job
    assert len(claimed) == 1
    rows = {row["queue"]: row for row in heartq("queues", "--json").json()}
    assert rows["emails"]["fair"] is None
    fair = rows["imports"]["fair"]
    enqueued = {"acct:big": 30, "acct:small": 3}
    taken = store.get_job(claimed[0].id)["fair_key"]  # the backends' turns may differ
    waiting = fairness.SHOWN + 2 - (enqueued.get(taken, 1) == 1)
    assert (fair["keys"], fair["waiting"], fair["running"]) == (fairness.SHOWN + 2, waiting, 1)
    assert fair["queued"] == 30 + 3 + fairness.SHOWN - 1
    assert len(fair["busiest"]) == fairness.SHOWN
    weights = {"acct:small": 2.5}
    for key in fair["busiest"]:
        assert key["queued"] + key["running"] == enqueued.get(key["key"], 1), key
        assert key["weight"] == weights.get(key["key"], 1.0), key
    assert fair["busiest"][0]["running"] == 1  # most running first, then most queued
    queued = [k["queued"] for k in fair["busiest"][1:]]
    assert queued == sorted(queued, reverse=True) and "acct:big" in {
        k["key"] for k in fair["busiest"]
    }
    text = heartq("queues").ok().out
    assert "FAIR KEYS" in text and "FAIR KEY " in text
    listed = text.split("FAIR KEY ", 1)[1]
    assert "acct:big" in listed and "2.5" in listed and "... 2 more" in listed
    said = heartq("stats").ok().out
    assert f"12 keys in use in 1 queue, {waiting} with jobs waiting" in said
