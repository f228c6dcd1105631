"""`heartq workers`, `heartq reclaim` and `heartq stats`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from datetime import datetime

from heartq.model import WorkerInfo
from heartq.store import Store
from heartq.store.link import LivenessHandle
from tests.cli.helpers import HeartqCli, assert_fits, wait_for

WORKER_FIELDS = {"id", "name", "hostname", "pid", "status", "queues", "concurrency",
                 "started_at", "last_heartbeat_at", "running", "claimed_ahead",
                 "abandoned"}  # fmt: skip


def ghost(store: Store, worker_id: str, age: float) -> LivenessHandle:
    """A worker whose last heartbeat is `age` seconds old: alive (its liveness lock is
    held, here) but silent, as if frozen or cut off."""
    handle = store.link.liveness_hold(worker_id)
    info = WorkerInfo(id=worker_id, hostname="elsewhere", pid=1, queues=("default",),
                      concurrency=2, name="ghost")  # fmt: skip
    store.register_worker(info, now=store.clock() - age)
    return handle


def vanished(store: Store) -> str:
    """A job claimed by a worker that vanished, its 10 ms lease over by the database's
    clock when this returns (`heartq reclaim` reclaims what expired before it looked, and a
    command run in the test's process may look within those 10 ms)."""
    [claimed] = store.claim("vanished", ["default"], 1, lease=0.01)
    expires = datetime.fromisoformat(store.get_job(claimed.id)["lease_expires_at"]).timestamp()
    wait_for(lambda: store.clock() > expires, what="the lease to expire")
    return claimed.id


def test_workers_of_a_stopped_and_a_live_worker(
    heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]
) -> None:
    assert "no active workers" in heartq("workers").ok().out
    heartq.burst("--name", "burst-1")
    assert heartq.json("workers") == []
    [stopped] = heartq.json("workers", "--all")
    assert set(stopped) >= WORKER_FIELDS
    assert (stopped["status"], stopped["name"], stopped["running"]) == ("stopped", "burst-1", 0)
    assert stopped["queues"] == ["cpu", "default"] and stopped["pid"] > 0

    job_id = heartq.add("slow", {"seconds": 60})
    workers.append(heartq.start_worker("--name", "live-1", "--concurrency", "3"))
    wait_for(lambda: heartq.job(job_id)["status"] == "running", what="claim")
    [live] = heartq.json("workers")
    assert (live["status"], live["name"], live["running"], live["concurrency"]) == (
        "active", "live-1", 1, 3,
    )  # fmt: skip
    assert 0 <= live["heartbeat_age"] < 5
    out = heartq("workers").ok().out
    assert_fits(out)
    header = out.split("\n", 1)[0].split()
    assert header == ["ID", "NAME", "STATUS", "QUEUES", "JOBS", "AHEAD", "ABANDONED", "HEARTBEAT"]
    assert re.search(r"live-1\s+active\s+cpu,default\s+1/3\s+0\s+0\s+\d+\.\ds ago", out), out
    assert "1 active, running 1 of 3 slots" in out
    both = heartq("workers", "--all").ok().out
    assert "burst-1" in both and "stopped" in both

    # Killed outright: `heartq reclaim` finds it through its liveness lock at once.
    os.killpg(workers[0].pid, signal.SIGKILL)
    workers[0].wait(timeout=10)
    report = heartq.json("reclaim")
    [gone] = report["workers_deactivated"]
    assert (gone["id"], gone["detected_by"], gone["job_ids"]) == (live["id"], "liveness_lock",
                                                                  [job_id])  # fmt: skip
    [job] = report["reclaimed"]
    assert (job["job_id"], job["status"], job["detected_by"]) == (job_id, "queued",
                                                                  "liveness_lock")  # fmt: skip
    assert report["queued"] == 1 and report["dead"] == 0
    assert heartq.json("workers") == []
    shown = heartq.json("jobs", "show", job_id)
    crash = shown["executions"][0]["crash"]
    assert shown["status"] == "queued" and crash["detected_by"] == "liveness_lock"
    assert crash["worker_id"] == live["id"]


def test_reclaim_with_nothing_to_do(heartq: HeartqCli) -> None:
    out = heartq("reclaim").ok().out
    assert out.strip() == "nothing to reclaim: no expired lease, no stale or gone worker"
    assert heartq.json("reclaim") == {"workers_deactivated": [], "reclaimed": [], "queued": 0,
                                      "dead": 0, "requeued": 0}  # fmt: skip


def test_reclaim_expired_lease_and_stale_worker(heartq: HeartqCli, store: Store) -> None:
    expired = heartq.add("ok", max_retries=0)
    assert vanished(store) == expired
    held = heartq.add("ok")
    handle = ghost(store, "ghost-1", age=100)
    [claimed] = store.claim("ghost-1", ["default"], 1, lease=3600)
    assert claimed.id == held

    try:
        run = heartq("reclaim", "--stale-after", "30").ok()
    finally:
        handle.close()
    assert_fits(run.out)
    # aged 100 s on the database clock; the command itself may take seconds on a loaded
    # machine: any age from 1m40s up to 3m is the ghost's, not a fresh worker's
    pattern = r"worker ghost-1 marked inactive: no heartbeat for (\d+)m(\d+)s \(1 job reclaimed\)"
    found = re.search(pattern, run.out)
    assert found, run.out
    assert 100 <= int(found[1]) * 60 + int(found[2]) < 180, run.out
    assert re.search(rf"{held}\s+ok\s+stale_worker\s+queued, retry in \d", run.out), run.out
    assert re.search(rf"{expired}\s+ok\s+lease_expired\s+dead", run.out), run.out
    assert "reclaimed 2 jobs: 1 queued again, 1 dead" in run.out
    assert run.err == ""  # the events go to listeners, not to stderr

    dead = heartq.json("jobs", "show", expired)
    assert dead["status"] == "dead"
    crash = dead["executions"][0]["crash"]
    assert (crash["detected_by"], crash["reason"], crash["worker_id"]) == (
        "lease_expired", "lease expired", "vanished",
    )  # fmt: skip
    out = heartq("jobs", "show", expired).ok().out
    assert "crash: lease expired" in out and "detected by: lease_expired" in out
    assert "worker: vanished" not in out  # the execution's own worker is shown once
    assert heartq.json("reclaim")["reclaimed"] == []


CRASH_RECORDER = """
import json
from pathlib import Path

import heartq

app = heartq.App()


@app.hooks.crash
def record(crash):
    with Path(__file__).with_name("told.jsonl").open("a") as out:
        out.write(json.dumps([crash.job_id, crash.detected_by, crash.worker_id]))
        out.write("\\n")
    print("told", crash.job_id)


@app.hooks.crash
def tracker(crash):
    raise RuntimeError("tracker down")
"""


def test_reclaim_with_an_app_runs_its_crash_hooks(heartq: HeartqCli, store: Store) -> None:
    """`heartq reap --app APP` tells APP's crash hooks what it ended crashed, as a
    worker's reaper does; without `--app`, no hook runs (it loads no app). What a hook
    prints goes to stderr, so `--json` stays JSON, and a hook that failed is one line
    there (the command keeps heartq's events to itself)."""
    (heartq.cwd / "crash_recorder.py").write_text(CRASH_RECORDER)
    told = heartq.cwd / "told.jsonl"
    heartq.add("ok")
    heartq.add("ok")
    first = vanished(store)
    run = heartq("reclaim", "--app", "crash_recorder:app", "--json").ok()
    assert [job["job_id"] for job in run.json()["reclaimed"]] == [first]
    [(job_id, detected_by, worker_id)] = [
        json.loads(line) for line in told.read_text().splitlines()
    ]
    assert (job_id, detected_by, worker_id) == (first, "lease_expired", "vanished")
    assert run.err.splitlines() == [
        f"told {first}",
        "crash hook tracker failed (before): RuntimeError('tracker down')",
    ]

    second = vanished(store)
    assert [job["job_id"] for job in heartq.json("reclaim")["reclaimed"]] == [second]
    assert len(told.read_text().splitlines()) == 1

    # without --url, the queue is the app's own (as for `heartq worker`)
    here = CRASH_RECORDER.replace("heartq.App()", f"heartq.App({heartq.url!r})")
    (heartq.cwd / "crash_recorder_here.py").write_text(here)
    third = vanished(store)
    run = heartq("reclaim", "--app", "crash_recorder_here:app", "--json", url=None)
    assert [job["job_id"] for job in run.json()["reclaimed"]] == [third]
    assert json.loads(told.read_text().splitlines()[-1])[0] == third
    bad = heartq("reclaim", "--app", "no_such_module:app")
    assert bad.code != 0 and "no_such_module" in bad.err and len(bad.err.splitlines()) == 1


def test_stats(heartq: HeartqCli) -> None:
    out = heartq("stats").ok().out
    assert "no jobs" in out and "0 active" in out
    dead = heartq.add("boom", max_retries=0)
    heartq.add("ok")
    heartq.burst()
    waiting = heartq.add("ok", queue="mail")
    heartq.add("ok", queue="mail", delay=600)
    heartq.add("ok", depends_on=[dead])  # blocked by the dead one
    stats = heartq.json("stats")
    assert stats["jobs"] == {
        "default": {"waiting": 0, "blocked": 1, "queued": 0, "claimed": 0, "running": 0,
                    "succeeded": 1, "dead": 1, "cancelled": 0},
        "mail": {"waiting": 0, "blocked": 0, "queued": 2, "claimed": 0, "running": 0,
                 "succeeded": 0, "dead": 0, "cancelled": 0},
    }
    assert stats["totals"]["all"] == 5 and stats["dead"] == 1
    assert stats["workers"]["active"] == 0
    assert stats["oldest_queued_job"] == waiting and stats["oldest_queued_age"] >= 0
    assert stats["scheduled"] == 1
    assert stats["url"] == heartq.url
    out = heartq("stats").ok().out
    assert_fits(out)
    assert re.search(r"default\s+0\s+1\s+0\s+0\s+0\s+1\s+1\s+0\s+3", out), out
    assert re.search(r"mail\s+0\s+0\s+2\s+0\s+0\s+0\s+0\s+0\s+2", out), out
    assert re.search(r"all\s+0\s+1\s+2\s+0\s+0\s+1\s+1\s+0\s+5", out), out
    assert f"(job {waiting})" in out and "1 dead job" in out
