"""A SIGKILLed worker, no other worker running: the read commands tell it is gone (its
liveness lock is free) and reclaim nothing; `heartq reclaim` does."""

from __future__ import annotations

import os
import re
import signal
import subprocess

from tests.cli.helpers import HeartqCli, wait_for


def test_read_commands_tell_a_dead_worker_from_a_live_one(
    heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]
) -> None:
    job_id = heartq.add("slow", {"seconds": 120})
    worker = heartq.start_worker("--concurrency", "2")
    workers.append(worker)
    wait_for(lambda: heartq.job(job_id)["status"] == "running", what="the job to start")
    alive = heartq.json("jobs", "show", job_id)
    assert alive["worker_gone"] is False
    [listed] = heartq.json("workers")
    assert listed["gone"] is False and listed["status"] == "active"

    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)
    wait_for(lambda: heartq.json("jobs", "show", job_id)["worker_gone"], what="the lock free")

    shown = heartq("jobs", "show", job_id).ok().out
    assert re.search(r"status\s+running \(worker gone: its process is gone; its jobs are", shown)
    assert "reclaimed by the next maintenance pass or `heartq reclaim`" in shown
    table = heartq("workers", "--all").ok().out
    assert re.search(rf"{listed['id']}\s.*\sgone\s", table), table
    assert "0 active, running 0 of 0 slots" in table
    assert "1 gone, holding 1 job: its process is gone" in table
    stats = heartq.json("stats")
    assert stats["workers"]["active"] == 0 and stats["workers"]["slots"] == 0
    assert (stats["workers"]["gone"], stats["workers"]["gone_running_jobs"]) == (1, 1)
    assert "1 worker holding 1 job: its process is gone" in heartq("stats").ok().out
    # read only: the job is still the gone worker's until a reaper reclaims it
    assert heartq.job(job_id)["status"] == "running"
    reaped = heartq.json("reclaim")
    assert [j["job_id"] for j in reaped["reclaimed"]] == [job_id]
    after = heartq.json("jobs", "show", job_id)
    assert after["status"] == "queued" and after["worker_gone"] is None
    assert heartq.json("workers") == []
