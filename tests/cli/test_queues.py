"""`heartq queues`: the list, and an operator's decisions told back; bad input is one
line and writes nothing. (Workers obeying them: tests/integration/test_queue_controls.py;
the metrics: test_metrics.py.)"""

from __future__ import annotations

from tests.cli.helpers import HeartqCli


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
