"""`heartq jobs watch ID`: follows a job until it ends; the exit status says how."""

from __future__ import annotations

import subprocess

from tests.cli.helpers import HeartqCli, wait_for


def test_watch_follows_jobs_to_their_end(
    heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]
) -> None:
    good = heartq.add("ok", {"n": 1})
    bad = heartq.add("boom", max_retries=0)
    slow = heartq.add("slow", {"seconds": 1.0})
    workers.append(heartq.start_worker())
    piped_good, piped_bad, as_json = heartq.many(
        [
            ["jobs", "watch", good.upper(), "--interval", "0.1"],
            ["jobs", "watch", bad, "--interval", "0.1"],
            ["jobs", "watch", slow, "--json", "--interval", "0.1"],
        ]
    )
    assert piped_good.code == 0, piped_good.explain()
    assert piped_good.out.splitlines()[-1].startswith("succeeded  attempt 1/4"), piped_good.out
    assert piped_bad.code == 1, piped_bad.explain()
    assert piped_bad.out.splitlines()[-1].startswith("dead  attempt 1/1"), piped_bad.out
    assert as_json.json()["status"] == "succeeded"
    assert as_json.json()["result"] == "slept"


def test_watch_draws_a_live_view_on_a_terminal(
    heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]
) -> None:
    job_id = heartq.add("slow", {"seconds": 1.0})
    workers.append(heartq.start_worker())
    wait_for(lambda: heartq.job(job_id)["status"] == "running", what="the job to start")
    run = heartq.in_terminal(["jobs", "watch", job_id, "--interval", "0.1"])
    assert run.code == 0, run.explain()
    assert "━" in run.out and "succeeded" in run.out and "timeline (1 execution" in run.out
    cancelled = heartq.add("slow", {"seconds": 60}, delay=60)
    heartq("jobs", "cancel", cancelled).ok()
    assert heartq("jobs", "watch", cancelled).code == 1
