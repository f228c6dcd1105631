"""`heartq tasks`: the tasks workers declared, and the policy a job of each takes when it
is enqueued by name, on both backends, as a user types it."""

from __future__ import annotations

import datetime

from tests.cli.helpers import HeartqCli, assert_fits

TASK_FIELDS = {"name", "queue", "priority", "max_retries", "retry_backoff",
               "retry_backoff_max", "timeout", "heartbeat_timeout", "declared_at",
               "declared_by", "parameters", "rate_limit", "rate_key", "retry_schedule",
               "retry_jitter", "retry_on", "dont_retry_on", "retry_intervals",
               "retry_delay", "unique", "unique_for", "expires"}  # fmt: skip


def test_before_any_worker_says_what_a_job_by_name_takes(heartq: HeartqCli) -> None:
    out = heartq("tasks").ok().out
    assert out.startswith("no task declared yet"), out
    assert "queue default, 3 retries" in out
    assert heartq.json("tasks") == []


def test_each_declared_task_with_its_policy(heartq: HeartqCli) -> None:
    run = heartq.burst("--name", "declarer")
    [worker] = heartq.json("workers", "--all")
    tasks = {t["name"]: t for t in heartq.json("tasks")}
    names = {"ok", "boom", "die", "loses_its_result", "cpu_sum", "slow", "snoozes_once"}
    assert set(tasks) == names, run.explain()
    for task in tasks.values():
        assert set(task) == TASK_FIELDS
        assert task["declared_by"] == worker["id"]
        assert datetime.datetime.fromisoformat(task["declared_at"]).tzinfo is not None
    cpu = tasks["cpu_sum"]  # @app.task(queue="cpu", max_retries=1, retry_backoff=0.1)
    assert (cpu["queue"], cpu["max_retries"], cpu["retry_backoff"]) == ("cpu", 1, 0.1)
    assert cpu["parameters"] == [  # def cpu_sum(numbers=()): an enqueue by name binds to it
        {"name": "numbers", "kind": "positional_or_keyword", "has_default": True}
    ]
    assert tasks["slow"]["parameters"] == [  # def slow(ctx, seconds=30.0): no ctx
        {"name": "seconds", "kind": "positional_or_keyword", "has_default": True}
    ]
    ok = tasks["ok"]  # the defaults
    assert (ok["queue"], ok["priority"], ok["max_retries"], ok["timeout"]) == (
        "default", 0, 3, None,
    )  # fmt: skip
    assert (ok["rate_limit"], ok["rate_key"]) == (None, None)
    assert (ok["retry_schedule"], ok["retry_jitter"], ok["retry_on"], ok["dont_retry_on"]) == (
        "exponential", True, None, [],
    )  # fmt: skip
    assert (ok["retry_intervals"], ok["unique"], ok["unique_for"]) == (None, False, None)

    out = heartq("tasks").ok().out
    assert_fits(out)
    header, _rule, *rows = out.strip().splitlines()
    assert header.split() == [
        "TASK", "QUEUE", "PRIO", "RETRIES", "BACKOFF", "TIMEOUT", "RATE", "DECLARED"
    ]  # fmt: skip
    cpu_row = next(row for row in rows if row.startswith("cpu_sum"))
    assert cpu_row.split()[1:4] == ["cpu", "0", "1"], cpu_row
    assert len(rows) == len(names), out

    # A job enqueued by name takes the declared policy (its queue, its retries).
    job_id = heartq.enqueue("cpu_sum")
    job = heartq.job(job_id)
    assert (job["queue"], job["max_retries"]) == ("cpu", 1)
