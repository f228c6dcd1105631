"""Every attempt that passes its task's `timeout` ends `timed_out`: never `succeeded`,
never with its result stored, whatever its code does once the deadline passed.

Why this file exists: a pulse (progress coalesced once a second, cancels seen within a
second) merged with the per-attempt retry policy (`policy.for_attempt`) once let a
`chaos_timeout` job, which returns a value as soon as `ctx.cancelled` lets it, be recorded
`succeeded`, with far fewer `timed_out` executions than usual. These tests are the guard
rail for its rebuild: real `heartq worker` processes, on every pool, running tasks that
overrun their timeout in each way a task can:

- `ignore`: never looks at its ctx (sleeps past the deadline, then returns a value);
- `polite`: polls `ctx.cancelled` and *returns a value* once told (the chaos shape; the
  async form also swallows the pool's `CancelledError` and returns);
- `beat`: calls `ctx.heartbeat(progress=..., checkpoint=...)` often while overrunning,
  and returns a value when the heartbeat says it was stopped;
- `hang`: completes nothing (blocks; never returns within the test).

Each shape as a plain function and as an `async def`, with `max_retries` 0 and 1 chosen by
the caller; and the per-attempt policy path (`for_attempt`): a job enqueued by name before
any worker declared the task (the defaults, `chosen` 0), one whose caller chose
`max_retries` by name, and one stored with stale unchosen options after the declaration
(so only `for_attempt`, not the re-route, gives it the task's `max_retries`).

Timing: the tasks' timeout is 0.6 s and each overruns by seconds; the settings are
`STEADY` (a 4 s lease), so a loaded machine's late heartbeat cannot turn a timeout into a
fenced-out attempt; every wait has a deadline of tens of seconds.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

import heartq
from heartq.model import NewJob

from .conftest import STEADY, Harness
from .worker_tasks import TASKS_SOURCE

pytestmark = pytest.mark.slow

TIMEOUT = 0.6
"""The tasks' own `timeout`: short, but each overruns it by seconds."""
SETTLE = 60.0
"""Every job of a test reaches its end within this (it takes ~3 s on an idle machine)."""

TIMEOUT_TASKS = textwrap.dedent(
    f'''

    # -- tasks that overrun their timeout (tests/integration/test_timeouts.py) --------
    TIMEOUT = {TIMEOUT}
    POLICY = dict(timeout=TIMEOUT, max_retries=1, retry_backoff=0.0, retry_backoff_max=0.0)


    def returned(ctx, how):
        """Mark that this attempt's code returned a value (after its deadline)."""
        mark(f"returned-{{ctx.job_id}}-{{ctx.attempt}}", how)
        return ident(ctx, how=how)


    @app.task(**POLICY)
    def to_ignore(ctx, seconds=4.0):
        started(ctx)
        time.sleep(seconds)  # never looks at ctx
        return returned(ctx, "ignore")


    @app.task(**POLICY)
    def to_polite(ctx, seconds=10.0):
        started(ctx)
        deadline = time.monotonic() + seconds
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.002)  # returns within ms of being told: the completer's batch
        return returned(ctx, "polite")


    @app.task(**POLICY)
    def to_beat(ctx, seconds=10.0):
        started(ctx)
        deadline = time.monotonic() + seconds
        step = 0
        try:
            while time.monotonic() < deadline:
                step += 1
                ctx.heartbeat(progress=min(step / 1000, 1.0), stage="overrun",
                              checkpoint={{"step": step}} if step % 5 == 0 else None)
                time.sleep(0.01)
        except heartq.Cancelled:
            pass
        return returned(ctx, "beat")


    @app.task(**POLICY)
    def to_hang(ctx, seconds=8.0):
        started(ctx)
        threading.Event().wait(seconds)  # completes nothing within the test


    @app.task(**POLICY)
    async def to_ignore_async(ctx, seconds=4.0):
        started(ctx)
        await asyncio.sleep(seconds)
        return returned(ctx, "ignore_async")


    @app.task(**POLICY)
    async def to_polite_async(ctx, seconds=10.0):
        started(ctx)
        deadline = time.monotonic() + seconds
        try:
            while not ctx.cancelled and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
        except asyncio.CancelledError:
            pass  # swallowed: the worst a task can do is return a value anyway
        return returned(ctx, "polite_async")


    @app.task(**POLICY)
    async def to_beat_async(ctx, seconds=10.0):
        started(ctx)
        deadline = time.monotonic() + seconds
        step = 0
        try:
            while time.monotonic() < deadline:
                step += 1
                ctx.heartbeat(progress=min(step / 1000, 1.0), stage="overrun",
                              checkpoint={{"step": step}} if step % 5 == 0 else None)
                await asyncio.sleep(0.01)
        except (heartq.Cancelled, asyncio.CancelledError):
            pass
        return returned(ctx, "beat_async")


    @app.task(**POLICY)
    async def to_hang_async(ctx):
        started(ctx)
        await asyncio.Event().wait()
    '''
)

SHAPES = (
    "to_ignore",
    "to_polite",
    "to_beat",
    "to_hang",
    "to_ignore_async",
    "to_polite_async",
    "to_beat_async",
    "to_hang_async",
)
RETURN_WHEN_TOLD = ("to_polite", "to_polite_async")
"""The shapes whose code returns a value within milliseconds of being told to stop."""


def enqueue_by_name(harness: Harness, **options: Any) -> str:
    """Enqueue `to_polite` by name from a client app that does not register it (as a web
    server would): the caller's options as given, the rest from the task's declaration,
    or the defaults if no worker declared it yet."""
    client = heartq.App(harness.url)
    try:
        return client.enqueue("to_polite", {"seconds": 10.0}, **options)
    finally:
        client.close()


def assert_timed_out(job: dict[str, Any], attempts: int) -> None:
    """The job is dead after `attempts` attempts, each `timed_out`, with no result."""
    where = f"job {job['id']} ({job['task']}, {job['status']})"
    outcomes = [e["outcome"] for e in job["executions"]]
    assert job["status"] == "dead", f"{where}: executions {outcomes}, error {job['error']}"
    assert outcomes == ["timed_out"] * attempts, where
    assert job["attempts"] == attempts, where
    assert job["result"] is None, f"{where}: result stored {job['result']}"
    assert (job["dead_reason"] or "").startswith("timed out"), (where, job["dead_reason"])
    for execution in job["executions"]:
        assert (execution["error"] or "").startswith(f"timed out after {TIMEOUT:g} s"), (
            where,
            execution,
        )


@pytest.mark.parametrize("pool", ["thread", "process", "async"])
def test_every_attempt_past_its_timeout_ends_timed_out(harness: Harness, pool: str) -> None:
    harness.path("tasks.py").write_text(TASKS_SOURCE + TIMEOUT_TASKS)
    expected: dict[str, int] = {}  # job id -> timed_out attempts it must take
    # The per-attempt policy path, part 1: by name before any worker declared the task
    # (defaults: 3 retries, 5 s backoff, `chosen` 0); the declaration re-routes it and
    # `for_attempt` applies the task's policy: max_retries 1.
    expected[enqueue_by_name(harness)] = 2
    # By name with max_retries chosen: the caller's 2 stands (not the task's 1).
    expected[enqueue_by_name(harness, max_retries=2)] = 3

    worker = harness.start_worker("--pool", pool, "--concurrency", "12", settings=STEADY)

    # Part 2: stored after the declaration with unchosen, stale options (as if enqueued
    # under an older declaration): no re-route comes, only `for_attempt` gives it the
    # task's max_retries 1, and its backoff 0.
    (stale,) = harness.store.enqueue(
        [
            NewJob(
                task="to_polite",
                args_json=json.dumps({"seconds": 10.0}),
                max_retries=4,
                retry_backoff=0.5,
                retry_backoff_max=0.5,
                chosen=0,
            )
        ]
    )
    expected[stale] = 2
    shape_of = dict.fromkeys(expected, "to_polite")
    for shape in SHAPES:
        for max_retries in (0, 1):
            job_id = harness.enqueue(shape, max_retries=max_retries)  # chosen: every option
            expected[job_id] = max_retries + 1
            shape_of[job_id] = shape

    table = "jobs" if harness.backend == "postgres" else "heartq_jobs"

    def settled() -> bool:
        rows = dict(harness.sql(f"SELECT id, status FROM {table}"))
        succeeded = [job_id for job_id in expected if rows.get(job_id) == "succeeded"]
        assert not succeeded, f"succeeded past their timeout: {succeeded}"
        return all(rows.get(job_id) in ("dead", "cancelled") for job_id in expected)

    harness.wait_for(settled, SETTLE, "every job to end", interval=0.1)

    for job_id, attempts in expected.items():
        assert_timed_out(harness.job(job_id), attempts)
    assert harness.job(stale)["max_retries"] == 4  # as stored: for_attempt is per attempt
    assert not [e for e in worker.events("job_succeeded") if e.get("job_id") in expected]

    if pool != "process":  # a child is killed at its deadline: its code never returns
        # The test really exercised the late return: every attempt of the shapes that
        # return when told, if its code started at all (on the async pool a plain
        # function waits for a thread of asyncio's executor, which the overrunning
        # attempts may all hold past its deadline), returned a value after its deadline,
        # and the value was not kept.
        told = [
            (job_id, attempt)
            for job_id, shape in shape_of.items()
            if shape in RETURN_WHEN_TOLD
            for attempt in range(1, expected[job_id] + 1)
            if harness.started_file(job_id, attempt).exists()
        ]
        assert {shape_of[job_id] for job_id, _ in told} == set(RETURN_WHEN_TOLD), told
        harness.wait_for(
            lambda: all(harness.path(f"returned-{j}-{a}").exists() for j, a in told),
            20,
            "the told attempts to return their value",
            lambda: [(j, a) for j, a in told if not harness.path(f"returned-{j}-{a}").exists()],
        )
