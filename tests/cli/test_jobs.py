"""`heartq enqueue` and `heartq jobs list|show|cancel`."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime

import pytest

from heartq.model import TaskParameter, TaskPolicy
from heartq.store import Store, open_store
from tests.cli.conftest import without_the_queue
from tests.cli.helpers import HeartqCli, assert_fits, clean_env, on_screen, wait_for

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
    assert run.out.count("\n") == 1
    assert run.err.startswith("heartq: warning: task 'ok' is not declared yet"), run.err
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


def test_enqueue_by_name_warns_until_declared_then_the_job_takes_the_tasks_queue(
    heartq: HeartqCli,
) -> None:
    run = heartq("enqueue", "cpu_sum", "--args", '{"numbers": [1, 2]}').ok()
    job_id = run.out.strip()
    assert run.err.count("\n") == 1, run.err
    assert "task 'cpu_sum' is not declared yet" in run.err and "queue 'default'" in run.err
    shown = heartq("jobs", "show", job_id).ok().out
    assert "default: task not declared yet" in shown
    heartq.burst("--queues", "cpu")  # declares cpu_sum: the job moves to `cpu` and runs
    job = heartq.json("jobs", "show", job_id)
    assert (job["status"], job["queue"], job["max_retries"], job["result"]) == (
        "succeeded", "cpu", 1, 3,
    )  # fmt: skip
    shown = heartq("jobs", "show", job_id).ok().out
    assert re.search(r"queue\s+cpu\s+\(task\)", shown), shown
    assert re.search(r"retry backoff\s+100ms, doubling up to 1h\d*m?\s+\(task\)", shown), shown
    again = heartq("enqueue", "cpu_sum", "--strict", "--max-retries", "4").ok()
    assert again.err == ""
    job = heartq.json("jobs", "show", again.out.strip())
    assert (job["queue"], job["max_retries"]) == ("cpu", 4)
    assert job["policy"]["max_retries"]["from"] == "caller"


def test_enqueue_checks_the_arguments_against_the_declared_parameters(
    heartq: HeartqCli,
) -> None:
    heartq.burst("--queues", "cpu")  # declares the tasks of tasks.py, their parameters too
    run = heartq("enqueue", "cpu_sum", "--args", '{"numbrs": [1, 2]}').fails(1)
    assert run.err == (
        "heartq: error: task 'cpu_sum': got an unexpected keyword argument 'numbrs'\n"
    ), run.err
    assert run.out == ""
    assert heartq.json("jobs", "list") == []  # nothing stored
    job_id = heartq("enqueue", "cpu_sum", "--args", '{"numbers": [1, 2]}').ok().out.strip()
    assert heartq.json("jobs", "show", job_id)["args"] == {"numbers": [1, 2]}


def test_enqueue_names_every_missing_and_unexpected_argument(
    heartq: HeartqCli, store: Store
) -> None:
    """A misspelled argument is both: the one meant is missing, the one typed unexpected;
    Python's own message named only the missing one."""
    params = tuple(TaskParameter(name, "positional_or_keyword") for name in ("x", "y"))
    store.declare_tasks([TaskPolicy("pair", "default", 0, 3, 5.0, 60.0, parameters=params)], "w")
    run = heartq("enqueue", "pair", "--args", '{"x": 1, "z": 2}').fails(1)
    assert run.err == (
        "heartq: error: task 'pair': missing a required argument: 'y'; got an unexpected "
        "keyword argument 'z'\n"
    ), run.err
    assert heartq.json("jobs", "list") == []  # nothing stored


def test_enqueue_strict_refuses_an_undeclared_task(heartq: HeartqCli) -> None:
    run = heartq("enqueue", "cpu_sum", "--strict").fails(1)
    assert "task 'cpu_sum' is not declared" in run.err
    assert heartq.json("jobs", "list") == []


def test_enqueue_eta(heartq: HeartqCli) -> None:
    job = heartq.json("jobs", "show", heartq.enqueue("ok", "--eta", "2030-01-02T03:04:05+01:00"))
    assert iso(job["run_at"]) == datetime(2030, 1, 2, 2, 4, 5, tzinfo=UTC)
    assert "--eta" in heartq("enqueue", "ok", "--eta", "2030-01-02T03:04:05").fails(2).err


@pytest.mark.parametrize(
    ("typed", "run_at"),
    [
        ("2030-01-02T03:04:05.25+01:00", "2030-01-02T02:04:05.250Z"),
        ("2030-01-02T02:04:05.5Z", "2030-01-02T02:04:05.500Z"),
        ("2030-01-02 03:04:05.125+0100", "2030-01-02T02:04:05.125Z"),
        ("2030-01-02T03:04+01:00", "2030-01-02T02:04:00.000Z"),
    ],
)
def test_enqueue_eta_takes_fractions_of_seconds_and_z(
    heartq: HeartqCli, typed: str, run_at: str
) -> None:
    assert heartq.json("jobs", "show", heartq.enqueue("ok", "--eta", typed))["run_at"] == run_at


def test_enqueue_eta_refuses_a_time_without_its_offset_in_one_line(heartq: HeartqCli) -> None:
    bad = heartq.many([["enqueue", "ok", "--eta", t] for t in ("2030-01-02", "soon", "")])
    for run in bad:
        run.fails(2)
        assert "Invalid value for '--eta'" in run.err, run.explain()
    assert "has no UTC offset: add one, like 2030-01-02T00:00:00+01:00" in bad[0].err
    assert "is not an ISO 8601 time with its UTC offset" in bad[1].err
    assert heartq.json("jobs", "list") == []


@without_the_queue
def test_enqueue_eta_refuses_a_time_further_ahead_than_a_delay_may_be(heartq: HeartqCli) -> None:
    run = heartq("enqueue", "ok", "--eta", "9999-01-01T00:00:00Z").fails(2)
    assert run.err.splitlines()[-1] == (
        "Error: Invalid value for '--eta': must be at most 3.1536e+08 s (ten years) ahead, "
        "as a delay, got 9999-01-01T00:00:00+00:00."
    ), run.explain()
    assert heartq.json("jobs", "list") == []


def test_enqueue_refuses_args_nested_too_deeply_or_holding_nul(heartq: HeartqCli) -> None:
    """One line each, nothing stored: not `unexpected error: RecursionError`."""
    (heartq.cwd / "deep.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (heartq.cwd / "deepish.json").write_text('{"a": ' + "[" * 150 + "]" * 150 + "}")
    deep, deepish, nul, nul_key = heartq.many([
        ["enqueue", "ok", "--args", "@deep.json"],
        ["enqueue", "ok", "--args", "@deepish.json"],
        ["enqueue", "ok", "--args", '{"n": "a\\u0000b"}'],
        ["enqueue", "ok", "--args", '{"a\\u0000": 1}'],
    ])  # fmt: skip
    for run in (deep, deepish, nul, nul_key):
        run.fails(1)
    assert "--args nested too deeply: more than 100 levels" in deep.err, deep.explain()
    assert "job arguments nested too deeply" in deepish.err, deepish.explain()
    assert "NUL character (\\x00) in the value at ['n']" in nul.err, nul.explain()
    assert "NUL character (\\x00) in the key 'a\\x00'" in nul_key.err, nul_key.explain()
    assert heartq.json("jobs", "list") == []


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
    assert "a-queue-with-a-rather-long-name" in run.out  # piped: nothing is cut
    screen = on_screen(heartq.in_terminal(["jobs", "list"], columns=80).ok().out)
    assert max(len(line) for line in screen) <= 80, screen  # a terminal: cut to fit
    for job_id in [*ids, other]:
        assert job_id in run.out and any(job_id in line for line in screen)  # full ids
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


@without_the_queue
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


def test_jobs_show_says_a_result_was_lost(heartq: HeartqCli) -> None:
    """Succeeded at its transaction's commit, its code failed after: no result, and
    `jobs show` says why rather than showing none."""
    job_id = heartq.add("loses_its_result", max_retries=0)
    heartq.burst()
    job = heartq.json("jobs", "show", job_id)
    assert (job["status"], job["result"]) == ("succeeded", None)
    assert job["result_lost"].endswith("committed the job: ValueError: after the commit")
    out = heartq("jobs", "show", job_id).ok().out
    assert re.search(r"result\s+lost: the task's code ended failed after its transaction", out)


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
    assert out.strip() == f"cancelled job {job_id} (it had not started: it will not run)"
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
    # what it promises holds for a task that never looks too: told within a second,
    # ended after the grace (5 s at most), not "stopped within about a second"
    assert out.strip() == (
        f"cancel requested for job {job_id}: its worker tells the task within about a "
        "second (ctx.cancelled; ctx.heartbeat() raises Cancelled), and ends the attempt "
        "after a grace of at most 5 s if the task does not stop by itself"
    )
    wait_for(lambda: heartq.job(job_id)["status"] == "cancelled",
             what="the worker to cancel it")  # fmt: skip


# -- job ids as operators type them --------------------------------------------------------


def test_jobs_show_and_cancel_take_a_unique_prefix_or_tail_in_any_case(heartq: HeartqCli) -> None:
    first, second = heartq.add("ok"), heartq.add("ok", delay=60)
    shared = first[: next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)]
    assert len(shared) >= 8  # time-ordered ids made together start alike
    unique = second[: len(shared) + 1]
    assert heartq.json("jobs", "show", unique)["id"] == second
    assert heartq.json("jobs", "show", second.upper())["id"] == second
    assert heartq.json("jobs", "show", unique.upper())["id"] == second
    tail = first.replace("-", "")[-8:]  # what `heartq demo` prints
    assert heartq.json("jobs", "show", tail)["id"] == first
    assert re.search(rf"^id\s+{first}$", heartq("jobs", "show", tail.upper()).ok().out, re.M)
    run = heartq("jobs", "show", shared).fails(1)
    assert f"job id {shared!r} is ambiguous: 2 jobs match" in run.err, run.explain()
    assert f"{first} (ok, queued), {second} (ok, queued)" in run.err, run.explain()
    assert "type more of it" in run.err and "last 8 characters" in run.err
    run = heartq("jobs", "show", first[:7]).fails(1)
    assert "a shortened id needs at least 8 characters" in run.err, run.explain()
    heartq("jobs", "show", "ffffffff").fails(1)
    cancelled = heartq.json("jobs", "cancel", unique.upper())
    assert cancelled == {"id": second, "result": "cancelled", "status": "cancelled"}


def test_piped_output_is_not_cut_so_grep_finds_the_task(heartq: HeartqCli) -> None:
    task = "always_fails_with_a_name_long_enough_to_be_cut_at_eighty_columns"
    job_id = heartq.add(task, queue="a-queue-with-a-rather-long-name-too")
    out = heartq("jobs", "list").ok().out
    [line] = [line for line in out.splitlines() if "always_fails" in line]
    assert job_id in line and task in line
    assert "queue a-queue-with-a-rather-long-name-too" in out  # one queue: the title
    assert_fits(out)


def test_enqueue_args_from_a_file_or_stdin(heartq: HeartqCli) -> None:
    big = {"blob": "x" * 700_000, "n": 1}  # over what one command-line argument may hold
    (heartq.cwd / "args.json").write_text(json.dumps(big))
    job_id = heartq("enqueue", "ok", "--args", "@args.json", "--json").json()["id"]
    assert heartq.job(job_id)["args"] == big
    piped = subprocess.run(
        heartq.argv(["enqueue", "ok", "--args", "-"], heartq.url), cwd=heartq.cwd,
        env=clean_env(), input='{"n": 5}', capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert heartq.job(piped.stdout.strip())["args"] == {"n": 5}
    (heartq.cwd / "huge.json").write_text(json.dumps({"blob": "x" * 2_000_000}))
    run = heartq("enqueue", "ok", "--args", "@huge.json").fails(1)
    assert "over the limit of 1048576 bytes" in run.err, run.explain()
    run = heartq("enqueue", "ok", "--args", "@missing.json").fails(1)
    assert "--args @missing.json: cannot read missing.json: No such file or directory" in run.err
    (heartq.cwd / "bad.json").write_text("[1]")
    assert "must be a JSON object" in heartq("enqueue", "ok", "--args", "@bad.json").fails(1).err


def test_a_crashed_attempt_lasts_until_its_last_sign_of_life(
    heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]
) -> None:
    job_id = heartq.add("slow", {"seconds": 120}, max_retries=0)
    worker = heartq.start_worker()
    workers.append(worker)

    def ran_a_second() -> bool:
        job = heartq.job(job_id)
        beat, started = job.get("heartbeat_at"), job.get("started_at")
        return bool(beat and started and (iso(beat) - iso(started)).total_seconds() >= 1.0)

    wait_for(ran_a_second, what="the job to run a second")
    killed_at = time.time()
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)
    wait_for(lambda: heartq.json("jobs", "show", job_id)["worker_gone"], what="the lock free")
    heartq("reclaim").ok()
    *before, ex = heartq.json("jobs", "show", job_id)["executions"]
    # (on a loaded machine a worker may miss its renewals and give an attempt back first:
    # interrupted, not counted, run again)
    assert all(e["outcome"] == "interrupted" for e in before), before
    assert ex["outcome"] == "crashed"
    started, ended = iso(ex["started_at"]).timestamp(), iso(ex["ended_at"]).timestamp()
    assert killed_at - 1.0 <= started + ex["duration"] <= killed_at + 0.1, ex
    assert ex["detection_delay"] > 0
    assert abs(ex["duration"] + ex["detection_delay"] - (ended - started)) < 0.01
    out = heartq("jobs", "show", job_id).ok().out
    assert re.search(r"#1\s+crashed\s+.*\(\d+\.\ds, then silent; detected \S+ later\)", out), out


def test_a_cancelled_job_says_who_stopped_it_not_a_traceback(
    heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]
) -> None:
    job_id = heartq.add("slow", {"seconds": 120})
    workers.append(heartq.start_worker())
    wait_for(lambda: heartq.job(job_id)["status"] == "running", what="the job to start")
    assert heartq.json("jobs", "cancel", job_id[:13])["result"] == "cancel_requested"
    wait_for(lambda: heartq.job(job_id)["status"] == "cancelled", what="the cancel")
    out = heartq("jobs", "show", job_id).ok().out
    who = rf"heartq jobs cancel by {re.escape(getpass.getuser())}@{re.escape(socket.gethostname())}"
    assert re.search(rf"cancelled\s+by {who} \(pid \d+\), while running", out), out
    assert heartq.json("jobs", "show", job_id)["cancelled_by"].startswith("heartq jobs cancel by ")
    assert "stopped by a cancel request" in out
    assert "Traceback" not in out and "last error" not in out, out
    assert heartq.json("jobs", "show", job_id)["executions"][0]["outcome"] == "cancelled"


def test_enqueue_meta_is_kept_and_shown(heartq: HeartqCli) -> None:
    job_id = heartq("enqueue", "ok", "--meta", '{"tenant": "acme", "n": 1}').ok().out.strip()
    job = heartq.json("jobs", "show", job_id)
    assert job["meta"] == {"tenant": "acme", "n": 1}
    shown = heartq("jobs", "show", job_id).ok().out.splitlines()
    assert [line.split(None, 1) for line in shown if line.startswith("meta ")] == [
        ["meta", '{"n": 1, "tenant": "acme"}']
    ]
    plain = heartq("enqueue", "ok").ok().out.strip()
    assert heartq.json("jobs", "show", plain)["meta"] == {}


def test_enqueue_meta_must_be_a_json_object(heartq: HeartqCli) -> None:
    for bad, says in (("[1]", "must be a JSON object, got a JSON array"), ("{x", "not valid JSON")):
        run = heartq("enqueue", "ok", "--meta", bad)
        assert run.code == 2, run.err
        assert says in run.err and "--meta" in run.err
    assert heartq.json("jobs", "list") == []


# -- jobs that wait for jobs -------------------------------------------------------------


def test_enqueue_depends_on_and_jobs_show_what_a_job_waits_for(heartq: HeartqCli) -> None:
    first = heartq.add("ok")
    second = heartq.add("ok")
    run = heartq(
        "enqueue", "ok", "--depends-on", f"{first[-8:]}, {second}",
        "--on-dependency-failure", "run",
    ).ok()  # fmt: skip
    waiting = run.out.strip()
    job = heartq.json("jobs", "show", waiting)
    assert job["status"] == "waiting" and job["on_dependency_failure"] == "run"
    assert [d["id"] for d in job["depends_on"]] == [first, second]  # a tail finds it too
    out = heartq("jobs", "show", waiting).ok().out
    assert_fits(out)
    assert re.search(r"status\s+waiting", out)
    assert re.search(rf"waits for\s+2 of 2: {first} \(ok, queued\), {second}", out)
    assert re.search(r"if one fails\s+runs anyway", out)
    assert re.search(rf"dependents\s+{waiting} \(ok, waiting\)", heartq("jobs", "show", first).out)

    heartq.burst()
    assert heartq.json("jobs", "show", waiting)["status"] == "succeeded"


def test_a_blocked_job_names_the_dead_job_that_holds_it_everywhere(heartq: HeartqCli) -> None:
    dead = heartq.add("boom", max_retries=0)
    blocked = heartq.add("ok", depends_on=[dead])
    behind = heartq.add("ok", {"n": 1}, depends_on=[blocked], on_dependency_failure="run")
    heartq.burst()  # ends: nothing it could run is left
    listed = heartq.json("jobs", "list", "--status", "blocked")
    assert {job["id"] for job in listed} == {blocked, behind}
    job = heartq.json("jobs", "show", behind)
    assert job["status"] == "blocked" and job["holders"] == 1
    assert job["blocked_by"]["id"] == dead and "ValueError: boom 0" in job["blocked_by"]["error"]
    assert job["depends_on"][0]["holds"] is True
    out = heartq("jobs", "show", behind).ok().out
    assert_fits(out)
    assert re.search(r"status\s+blocked", out), out
    assert re.search(rf"blocked by\s+{dead} \(boom, dead\): ValueError: boom 0", out), out
    assert re.search(rf"release\s+heartq dlq replay {dead}", out), out
    assert re.search(r"if one fails\s+runs anyway", out), out
    # it waits for nothing that has not ended: no empty "waits for 0 of 1:" row
    first = heartq("jobs", "show", blocked).ok().out
    assert re.search(rf"blocked by\s+{dead} \(boom, dead\)", first), first
    assert "waits for" not in first, first
    watched = heartq("jobs", "watch", behind)  # stops at once: nothing moves by itself
    assert watched.code == 1 and f"(blocked by dead job {dead})" in watched.out
    heartq("dlq", "replay", dead).ok()
    assert heartq.json("jobs", "show", behind)["status"] == "waiting"
    assert heartq.json("jobs", "show", blocked)["blocked_by"] is None


def test_a_waiting_job_cancelled_says_why_and_bad_dependencies_are_one_line(
    heartq: HeartqCli,
) -> None:
    first = heartq.add("ok", delay=600)
    waiting = heartq.add("ok", depends_on=[first])
    heartq("jobs", "cancel", first).ok()
    out = heartq("jobs", "show", waiting).ok().out
    assert re.search(rf"cancelled\s+by dependency_failed: job {first} ended cancelled", out)
    run = heartq("enqueue", "ok", "--depends-on", "not-a-job-id").fails(1)
    said = run.err.strip()
    assert said.startswith("heartq: error: depends_on names no job 'not-a-job-id': ")
    assert "\n" not in said
    run = heartq("enqueue", "ok", "--depends-on", first, "--on-dependency-failure", "x").fails(2)
    assert "'x' is not one of 'block', 'cancel', 'run'" in run.err


def test_enqueue_depends_on_a_succeeded_job_since_pruned(heartq: HeartqCli) -> None:
    """A whole id the queue no longer finds is given to the enqueue as typed: a success
    since pruned counts as met."""
    done = heartq.add("ok")
    heartq.burst()
    store = open_store(heartq.url)
    try:
        assert store.prune(1, 1, now=store.clock() + 10).jobs == 1
    finally:
        store.link.close()
    then = heartq("enqueue", "ok", "--depends-on", done).ok().out.strip()
    job = heartq.json("jobs", "show", then)
    assert job["status"] == "queued" and job["depends_on"][0]["ended"] == "succeeded"
    assert re.search(rf"depends on\s+{done} \(\?, gone\)", heartq("jobs", "show", then).ok().out)


def test_counts_and_filters_read_as_english(heartq: HeartqCli) -> None:
    """`no jobs in queue 'x'` (it said "no in queue 'x' jobs"), `no dead jobs in queue
    'x'`; one of a thing is singular (`1 attempt`, `1 worker`, `1 schedule`, `1 slot`)."""
    assert heartq("jobs", "list", "--queue", "x").ok().out.strip() == "no jobs in queue 'x'"
    assert heartq("jobs", "list", "--queue", "x", "--status", "dead").ok().out.strip() == (
        "no dead jobs in queue 'x'"
    )
    assert heartq("jobs", "list", "--status", "dead").ok().out.strip() == "no dead jobs"
    dead = heartq.add("boom", max_retries=0)
    heartq.burst()
    assert heartq.json("jobs", "show", dead)["dead_reason"] == (
        "failed 1 attempt; last error: ValueError: boom 0"
    )
