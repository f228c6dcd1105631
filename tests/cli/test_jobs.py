"""`heartq enqueue` and `heartq jobs list|show|cancel`."""

from __future__ import annotations

import re
from datetime import datetime

from tests.cli.helpers import HeartqCli, assert_fits, wait_for

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

JOB_FIELDS = {
    "id", "task", "queue", "status", "args", "priority", "attempts", "max_retries", "run_at",
    "created_at", "started_at", "finished_at", "worker_id", "execution_id",
    "lease_expires_at", "heartbeat_at", "progress", "checkpoint", "result", "error",
    "dead_reason",
}  # fmt: skip
EXECUTION_FIELDS = {"execution_id", "worker_id", "started_at", "ended_at", "outcome", "error",
                    "crash"}  # fmt: skip


def iso(value: str) -> datetime:
    assert value.endswith("Z"), value
    return datetime.fromisoformat(value)


# -- enqueue -----------------------------------------------------------------------------


def test_enqueue_prints_the_id_alone_and_stores_every_option(heartq: HeartqCli) -> None:
    run = heartq(
        "enqueue", "ok", "--args", '{"n": 7, "tags": ["a"]}', "--queue", "mail",
        "--priority", "5", "--delay", "300", "--max-retries", "1",
    ).ok()  # fmt: skip
    assert UUID.match(run.out.rstrip("\n")), run.out
    assert run.out.count("\n") == 1 and run.err == ""
    job = heartq.json("jobs", "show", run.out.strip())
    assert job["args"] == {"n": 7, "tags": ["a"]}
    assert (job["task"], job["queue"], job["priority"], job["max_retries"]) == ("ok", "mail", 5, 1)
    assert job["status"] == "queued"
    delay = (iso(job["run_at"]) - iso(job["created_at"])).total_seconds()
    assert 299 <= delay <= 301


def test_enqueue_without_args_defaults(heartq: HeartqCli) -> None:
    job = heartq.json("jobs", "show", heartq.enqueue("ok"))
    assert job["args"] == {}
    assert (job["queue"], job["priority"], job["max_retries"]) == ("default", 0, 3)


def test_enqueue_malformed_json_says_where(heartq: HeartqCli) -> None:
    run = heartq("enqueue", "ok", "--args", '{"n": 1,}').fails(1)
    assert "--args is not valid JSON" in run.err
    assert "line 1, column 9" in run.err
    assert heartq.json("jobs", "list") == []


def test_enqueue_args_must_be_an_object(heartq: HeartqCli) -> None:
    for text, kind in (("[1, 2]", "array"), ('"x"', "string"), ("3", "number")):
        run = heartq("enqueue", "ok", "--args", text).fails(1)
        assert "--args must be a JSON object" in run.err and kind in run.err
    run = heartq("enqueue", "ok", "--args", '{"x": NaN}').fails(1)
    assert "NaN is not a JSON number" in run.err
    assert heartq.json("jobs", "list") == []


def test_enqueue_bad_options(heartq: HeartqCli) -> None:
    assert "--priority" in heartq("enqueue", "ok", "--priority", "high").fails(2).err
    assert "--delay" in heartq("enqueue", "ok", "--delay", "-1").fails(2).err
    assert "--max-retries" in heartq("enqueue", "ok", "--max-retries", "-1").fails(2).err
    assert "queue name" in heartq("enqueue", "ok", "--queue", " ").fails(1).err
    heartq("enqueue").fails(2)


# -- jobs list ---------------------------------------------------------------------------


def test_jobs_list_human_and_json(heartq: HeartqCli) -> None:
    ids = [heartq.add("ok", {"n": i}) for i in range(3)]
    other = heartq.add("boom", queue="a-queue-with-a-rather-long-name")
    run = heartq("jobs", "list").ok()
    assert_fits(run.out)
    header = run.out.splitlines()[0].split()
    assert header == ["ID", "TASK", "QUEUE", "STATUS", "TRIES", "AGE"]
    for job_id in [*ids, other]:
        assert job_id in run.out  # full ids, even at 80 columns
    jobs = heartq.json("jobs", "list")
    assert [j["id"] for j in jobs] == [other, *reversed(ids)]  # newest first
    for job in jobs:
        assert set(job) >= JOB_FIELDS
        assert job["progress"] == {"value": None, "stage": None, "message": None}


def test_jobs_list_filters(heartq: HeartqCli) -> None:
    a = heartq.add("ok", queue="a")
    b = heartq.add("ok", queue="b")
    assert [j["id"] for j in heartq.json("jobs", "list", "--queue", "a")] == [a]
    assert [j["id"] for j in heartq.json("jobs", "list", "--limit", "1")] == [b]
    assert heartq.json("jobs", "list", "--status", "dead") == []
    run = heartq("jobs", "list", "--queue", "a").ok()
    assert run.out.splitlines()[0].strip() == "queue a"  # one queue: named once, above
    assert "QUEUE" not in run.out
    assert "no dead jobs" in heartq("jobs", "list", "--status", "dead").ok().out
    limited = heartq("jobs", "list", "--limit", "1").ok()
    assert "1 newest shown" in limited.out


def test_jobs_list_unknown_status_is_a_usage_error(heartq: HeartqCli) -> None:
    run = heartq("jobs", "list", "--status", "finished").fails(2)
    for status in ("queued", "running", "succeeded", "dead", "cancelled"):
        assert status in run.err
    heartq("jobs", "list", "--limit", "0").fails(2)


# -- jobs show ---------------------------------------------------------------------------


def test_jobs_show_json_has_the_interface_fields(heartq: HeartqCli) -> None:
    good = heartq.add("ok", {"n": 3})
    bad = heartq.add("boom", max_retries=0)
    heartq.burst()
    job = heartq.json("jobs", "show", good)
    assert JOB_FIELDS | {"executions"} <= set(job)
    assert (job["status"], job["result"], job["attempts"]) == ("succeeded", {"n": 3}, 1)
    [execution] = job["executions"]
    assert set(execution) >= EXECUTION_FIELDS
    assert execution["outcome"] == "succeeded" and execution["crash"] is None
    for key in ("created_at", "started_at", "finished_at", "run_at"):
        iso(job[key])
    dead = heartq.json("jobs", "show", bad)
    assert dead["status"] == "dead" and "ValueError: boom" in dead["error"]
    assert dead["dead_reason"] and dead["executions"][0]["outcome"] == "failed"


def test_jobs_show_human_draws_the_timeline(heartq: HeartqCli) -> None:
    good = heartq.add("ok")
    bad = heartq.add("boom", {"n": 42}, max_retries=0)
    heartq.burst()
    worker_id = heartq.json("jobs", "show", good)["executions"][0]["worker_id"]

    out = heartq("jobs", "show", good).ok().out
    assert_fits(out)
    assert re.search(r"status\s+succeeded", out)
    assert re.search(r"result\s+\{\"n\": 0\}", out)
    assert "timeline (1 execution, oldest first)" in out
    assert re.search(r"#1\s+succeeded\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z -> \S+Z  \(", out)
    assert f"worker {worker_id}" in out

    out = heartq("jobs", "show", bad).ok().out
    assert re.search(r"status\s+dead", out)
    assert "dead reason" in out
    assert re.search(r"#1\s+failed", out)
    assert "error: ValueError: boom 42" in out
    assert "last error" in out and "Traceback" in out  # the stored traceback, unwrapped


def test_jobs_show_crash_context_of_a_killed_child(heartq: HeartqCli) -> None:
    job_id = heartq.add("die", max_retries=0)
    heartq.burst("--pool", "process", "--concurrency", "1")
    job = heartq.json("jobs", "show", job_id)
    assert job["status"] == "dead"
    crash = job["executions"][0]["crash"]
    assert crash["detected_by"] == "child_exit" and crash["signal"] == "SIGKILL"
    out = heartq("jobs", "show", job_id).ok().out
    assert_fits(out)
    assert re.search(r"#1\s+crashed", out)
    assert "crash: child process killed by SIGKILL" in out
    assert "detected by: child_exit" in out
    assert "signal: SIGKILL" in out and "exit code: -9" in out
    assert "detected at: " in out and "last worker heartbeat: " in out


def test_jobs_show_unknown_id(heartq: HeartqCli) -> None:
    run = heartq("jobs", "show", "no-such-job").fails(1)
    assert run.err.strip() == "heartq: error: no job with id 'no-such-job'"
    heartq("jobs", "show", "no-such-job", "--json").fails(1)
    heartq("jobs", "show").fails(2)


# -- jobs cancel -------------------------------------------------------------------------


def test_jobs_cancel(heartq: HeartqCli) -> None:
    job_id = heartq.add("ok", delay=60)
    out = heartq("jobs", "cancel", job_id).ok().out
    assert out.strip() == f"cancelled job {job_id} (it was queued: it will not run)"
    assert heartq.json("jobs", "show", job_id)["status"] == "cancelled"
    again = heartq.json("jobs", "cancel", job_id)
    assert again == {"id": job_id, "result": "already_finished", "status": "cancelled"}
    assert "already finished (cancelled)" in heartq("jobs", "cancel", job_id).ok().out
    assert "no job with id 'nope'" in heartq("jobs", "cancel", "nope").fails(1).err


def test_jobs_cancel_running_job_asks_its_worker(heartq: HeartqCli, workers: list) -> None:

    job_id = heartq.add("slow", {"seconds": 60})
    workers.append(heartq.start_worker())
    wait_for(lambda: heartq.job(job_id)["status"] == "running", what="claim")
    shown = heartq("jobs", "show", job_id).ok().out
    assert_fits(shown)
    assert re.search(r"status\s+running", shown)
    assert re.search(r"worker\s+\S+ \(execution 1\)", shown)
    assert re.search(r"lease expires\s+.*\(in \d", shown)
    assert re.search(r"#1\s+running\s+.*, running for", shown)
    out = heartq("jobs", "cancel", job_id).ok().out
    assert "cancel requested" in out and "next heartbeat" in out
    wait_for(lambda: heartq.job(job_id)["status"] == "cancelled",
             what="the worker to cancel it")  # fmt: skip
