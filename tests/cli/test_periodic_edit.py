"""`heartq periodic add|remove|pause|resume`: runtime schedules stored and listed, told
back in one line; bad input is one line and writes nothing. (Workers running them:
tests/integration/test_runtime_schedules.py; the store: tests/conformance.)"""

from __future__ import annotations

from tests.cli.helpers import HeartqCli


def test_add_change_pause_and_remove(heartq: HeartqCli) -> None:
    said = heartq("periodic", "add", "nightly", "report", "--every", "30", "--args", '{"n": 1}')
    out = said.ok().out
    assert "schedule nightly: added, every 30s" in out
    assert "no worker has declared task 'report' yet" in out
    (row,) = heartq.json("periodic")
    assert (row["name"], row["task"], row["spec"], row["origin"], row["paused"]) == (
        "nightly", "report", "every 30s", "runtime", False
    )  # fmt: skip
    assert "heartq periodic add by " in row["changed_by"] and row["last_run"] is None
    heartq("periodic", "add", "nightly", "report", "--every", "5").fails(1)  # exists
    changed = heartq(
        "periodic", "add", "nightly", "report", "--cron", "0 9 * * *", "--tz", "Europe/Paris",
        "--queue", "reports", "--replace", "--json",
    ).json()  # fmt: skip
    assert changed == {"name": "nightly", "added": False, "task_declared": False}
    (row,) = heartq.json("periodic")
    assert (row["spec"], row["queue"]) == ("cron 0 9 * * * (Europe/Paris)", "reports")
    assert "schedule nightly: paused" in heartq("periodic", "pause", "nightly").ok().out
    assert heartq.json("periodic")[0]["paused"] is True
    assert "paused" in heartq("periodic").ok().out
    heartq("periodic", "resume", "nightly").ok()
    assert heartq.json("periodic")[0]["paused"] is False
    assert "schedule nightly: removed" in heartq("periodic", "remove", "nightly").ok().out
    assert heartq.json("periodic") == []
    heartq("periodic", "remove", "nightly").fails(1)
    heartq("periodic", "pause", "nightly").fails(1)


def test_bad_input_is_one_line_and_writes_nothing(heartq: HeartqCli) -> None:
    for argv, code in [
        (["periodic", "add", "x", "t", "--cron", "61 * * * *"], 1),
        (["periodic", "add", "x", "t"], 1),  # neither --cron nor --every
        (["periodic", "add", " ", "t", "--every", "1"], 1),
        (["periodic", "add", "x", "t", "--every", "0.5"], 1),
        (["periodic", "add", "x", "t", "--every", "1", "--args", "{bad"], 2),
        (["periodic", "add", "x", "t", "--every", "1", "--args", "[1]"], 1),
    ]:
        heartq(*argv).fails(code)  # code 1: one `heartq: error:` line
    assert heartq.json("periodic") == []
