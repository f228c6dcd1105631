"""The app the chaos runner's workers run (`tests.soak.chaos_tasks:app`).

Every attempt appends one line when it starts and one when it ends to the side file named
by `HEARTQ_CHAOS_LOG` (JSON, one `os.write` of an `O_APPEND` file each, so lines from
many processes never interleave), and every task that returns puts its identity in its
result. The runner checks both against the database: at-least-once (every attempt the
database handed out really ran where it says) and fencing (a job's result comes from the
execution the database says succeeded, never from an attempt that was fenced out).

Effects exactly once: every kind that can succeed writes its effect, one row (job id,
execution id, worker id) in the ledger table named in full by `HEARTQ_CHAOS_LEDGER`,
through `ctx.transaction()` (`async with` in the async task) just before it returns, so
the row and the job's completion commit together or not at all. The ledger has no unique
constraint: an effect written twice would show as two rows. Jobs given `hold_ms` keep
the transaction open that long after the insert (a second statement, then a sleep), so
faults land inside transactions too. Without `HEARTQ_CHAOS_LEDGER` nothing is written and
the job completes as usual.

Results between the commit and the return (`tests/soak/chaos_commits.py`): a pipeline's
member or step given `hand` hands its result to the commit (`ctx.commit_result`), so it
lands with the effect; one given `kill` appends a `committed` line once its transaction
committed and then waits (at most `KILL_WAIT` seconds) for the runner to SIGKILL its
worker before it returns. Killed without handing it, its result is lost: a reaper gives
it up, and what takes it receives the lost-result marker (`heartq.LostResult`).

Kinds (the runner picks them, seeded):

- `chaos_short`: returns within a few tens of milliseconds.
- `chaos_long`: steps of work, progress every step, a checkpoint every step; a later
  attempt resumes from the checkpoint it is handed (its result says where it resumed).
- `chaos_flaky`: raises on its first `fail_times` attempts, then succeeds (retries).
- `chaos_permanent`: raises `heartq.Permanent`: dead at once, no retry.
- `chaos_timeout`: overruns its `timeout`: `timed_out` attempts, then dead.
- `chaos_silent`: declares `heartbeat_timeout` and stays silent on its first attempt, so
  its live worker times it out (`timed_out`, retried after its backoff); later attempts
  return.
- `chaos_async`: an `async def` task (native on the async pool, its own loop elsewhere).
- `chaos_child_crash` (queue `proc`, process pool only): attempt 1 SIGKILLs its own child.
- `chaos_proc_long` (queue `proc`): `chaos_long` in a child process, the target of the
  runner's "kill a child" fault.
- `chaos_snoozy`: snoozes (`heartq.Snooze(snooze_s)`) until the job has snoozed
  `snoozes` times, then returns, naming in its result the snoozes it was handed
  (`ctx.snoozes`); one given more `snoozes` than its task's `max_snoozes`
  (`SNOOZE_BOUND`) snoozes on, each snooze past the bound a failed attempt, until dead.
- `chaos_rated`: `chaos_short` under a rate limit the runner gives each job (its key
  `RATE_KEY`, `RATE_LIMIT` starts per `RATE_PERIOD` seconds), held to it across the fleet.
- `chaos_limited`: `chaos_short`, longer, under a concurrency limit the runner gives each
  job (one of `LIMITED_KEYS`, at most `LIMITED_LIMIT` running at once), held to it across
  the fleet.
- `chaos_fan_in`: a group's callback: waits for its members (`depends_on`), receives
  their results in order, and returns which attempt produced each (`["lost", job]` for
  a result lost after its commit).

Every crash hook call (`@app.hooks.crash`, run by the worker that ended a crashed attempt)
appends a line too: the runner checks that each names a crashed execution, told once.

- `chaos_add`: a step of a result-passing chain (`dependency_results`, `one_result`):
  it takes the previous step's result (`prev`, or the chain's start given as an
  argument) and returns its value plus its own `k`, naming the attempt it took it from.
- `chaos_fixable`: the root of a blocked-and-replayed pipeline: it raises until the
  runner "fixes" it (a file named after the job in the directory `HEARTQ_CHAOS_FIXED`,
  made before the runner replays it), so it ends dead the first time, blocks what waits
  for it, and succeeds once replayed; it returns a value like `chaos_add`.

Pipelines (the runner builds them from these kinds, `tests/soak/chaos_pipes.py`): groups
of members of the kinds above with a `chaos_fan_in` callback, chains of steps each waiting
for the one before, result-passing chains of `chaos_add`, and `chaos_fixable` roots with
`chaos_add` dependents.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import heartq

LOG_ENV = "HEARTQ_CHAOS_LOG"
RATE_KEY = "chaos-rated"
RATE_LIMIT = 4
RATE_PERIOD = 1.0
LIMITED_KEYS = ("chaos-limited-0", "chaos-limited-1")
LIMITED_LIMIT = 1
LEDGER_ENV = "HEARTQ_CHAOS_LEDGER"
FIXED_ENV = "HEARTQ_CHAOS_FIXED"
PROC_QUEUE = "proc"
SNOOZE_BOUND = 3
"""`chaos_snoozy`'s `max_snoozes`: its fourth snooze is a failed attempt."""
KILL_WAIT = 3.0
"""Seconds a task given `kill` waits after its commit for the runner to kill its worker
(it returns if none came: the runner was draining, or the worker was being stopped)."""

app = heartq.App()


def record(event: str, ctx: heartq.JobContext, **fields: Any) -> None:
    """Append one line about an attempt to the side file."""
    _append(
        {
            "e": event,
            "job": ctx.job_id,
            "eid": ctx.execution_id,
            "att": ctx.attempt,
            "wid": ctx.worker_id,
            **fields,
        }
    )


@app.hooks.crash
def told_of_crash(crash: heartq.CrashInfo) -> None:
    """A crashed attempt, as the crash hook of the worker that ended it was told of it:
    the runner checks that each is a crashed execution, told at most once."""
    _append(
        {
            "e": "crash",
            "job": crash.job_id,
            "eid": crash.execution_id,
            "wid": crash.worker_id,
            "by": crash.detected_by,
        }
    )


def _append(doc: dict[str, Any]) -> None:
    """Append one line to the side file (one write on an O_APPEND descriptor), with the
    writing process and the time."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    doc = {**doc, "pid": os.getpid(), "t": time.time()}
    line = (json.dumps(doc, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@contextlib.contextmanager
def attempt(ctx: heartq.JobContext, task: str) -> Iterator[None]:
    """Record the start and the end (how it ended) of one attempt."""
    record("start", ctx, task=task)
    try:
        yield
    except BaseException as exc:
        record("end", ctx, how=type(exc).__name__)
        raise
    record("end", ctx, how="return")


def ident(ctx: heartq.JobContext, **extra: Any) -> dict[str, Any]:
    """What a returning attempt stores as its result: who ran it, under which lease."""
    return {
        "job": ctx.job_id,
        "eid": ctx.execution_id,
        "att": ctx.attempt,
        "wid": ctx.worker_id,
        "pid": os.getpid(),
        **extra,
    }


def _write_effect(conn: Any, table: str, ctx: heartq.JobContext) -> None:
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    conn.execute(
        f"INSERT INTO {table} (job_id, execution_id, worker_id) VALUES ({mark}, {mark}, {mark})",
        (ctx.job_id, ctx.execution_id, ctx.worker_id),
    )
    conn.execute(f"SELECT count(*) FROM {table} WHERE job_id = {mark}", (ctx.job_id,))


def effect(
    ctx: heartq.JobContext,
    hold_ms: int = 0,
    result: Any = None,
    hand: bool = False,
    kill: bool = False,
) -> Any:
    """The job's effect, one ledger row, committed with the job's completion (and with
    `result`, if `hand`); the transaction stays open `hold_ms` after the insert. With
    `kill`, the attempt then waits for the runner to kill its worker. Returns `result`."""
    table = os.environ.get(LEDGER_ENV)
    if not table:
        return result
    with ctx.transaction() as conn:
        _write_effect(conn, table, ctx)
        if hold_ms:
            time.sleep(hold_ms / 1000)
        if hand:
            ctx.commit_result(result)
    if kill:
        record("committed", ctx, hand=hand)
        pause(ctx, KILL_WAIT)
    return result


async def effect_async(
    ctx: heartq.JobContext,
    hold_ms: int = 0,
    result: Any = None,
    hand: bool = False,
    kill: bool = False,
) -> Any:
    """`effect` for an async task (`async with`)."""
    table = os.environ.get(LEDGER_ENV)
    if not table:
        return result
    async with ctx.transaction() as conn:
        _write_effect(conn, table, ctx)
        if hold_ms:
            await asyncio.sleep(hold_ms / 1000)
        if hand:
            ctx.commit_result(result)
    if kill:
        record("committed", ctx, hand=hand)
        deadline = time.monotonic() + KILL_WAIT
        while not ctx.cancelled and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    return result


def pause(ctx: heartq.JobContext, seconds: float) -> None:
    """Sleep, but stop early once the attempt is cancelled or fenced out."""
    deadline = time.monotonic() + seconds
    while not ctx.cancelled:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.02, left))


@app.task(name="chaos_short")
def short(
    ctx: heartq.JobContext,
    n: int,
    ms: int = 10,
    hold_ms: int = 0,
    hand: bool = False,
    kill: bool = False,
) -> dict[str, Any]:
    with attempt(ctx, "chaos_short"):
        time.sleep(ms / 1000)
        return effect(ctx, hold_ms, ident(ctx, n=n), hand, kill)


def _long(
    ctx: heartq.JobContext,
    task: str,
    n: int,
    steps: int,
    step_s: float,
    hold_ms: int,
    hand: bool = False,
    kill: bool = False,
) -> Any:
    with attempt(ctx, task):
        start = int((ctx.checkpoint or {}).get("step", 0))
        for step in range(start, steps):
            pause(ctx, step_s)
            ctx.heartbeat(
                progress=(step + 1) / steps,
                stage="step",
                message=f"{step + 1}/{steps}",
                checkpoint={"step": step + 1, "eid": ctx.execution_id},
            )
        result = ident(ctx, n=n, resumed_from=start, steps=steps)
        return effect(ctx, hold_ms, result, hand, kill)


@app.task(name="chaos_long", heartbeat_timeout=5.0)
def long(
    ctx: heartq.JobContext,
    n: int,
    steps: int = 8,
    step_s: float = 0.15,
    hold_ms: int = 0,
    hand: bool = False,
    kill: bool = False,
) -> Any:
    return _long(ctx, "chaos_long", n, steps, step_s, hold_ms, hand, kill)


@app.task(name="chaos_proc_long", queue=PROC_QUEUE, heartbeat_timeout=5.0)
def proc_long(
    ctx: heartq.JobContext,
    n: int,
    steps: int = 8,
    step_s: float = 0.15,
    hold_ms: int = 0,
    hand: bool = False,
    kill: bool = False,
) -> Any:
    return _long(ctx, "chaos_proc_long", n, steps, step_s, hold_ms, hand, kill)


@app.task(name="chaos_flaky")
def flaky(
    ctx: heartq.JobContext,
    n: int,
    fail_times: int = 1,
    hold_ms: int = 0,
    hand: bool = False,
    kill: bool = False,
) -> dict[str, Any]:
    with attempt(ctx, "chaos_flaky"):
        if ctx.attempt <= fail_times:
            raise RuntimeError(f"flaky job {n} fails attempt {ctx.attempt} of {fail_times}")
        return effect(ctx, hold_ms, ident(ctx, n=n), hand, kill)


@app.task(name="chaos_permanent")
def permanent(ctx: heartq.JobContext, n: int) -> None:
    with attempt(ctx, "chaos_permanent"):
        raise heartq.Permanent(f"job {n} can never succeed")


@app.task(name="chaos_timeout", timeout=0.4)
def overrun(ctx: heartq.JobContext, n: int) -> dict[str, Any]:
    with attempt(ctx, "chaos_timeout"):
        pause(ctx, 10.0)  # the worker times it out at 0.4 s and sets ctx.cancelled
        return ident(ctx, n=n)


@app.task(name="chaos_silent", heartbeat_timeout=0.5)
def silent(ctx: heartq.JobContext, n: int, hold_ms: int = 0) -> dict[str, Any]:
    with attempt(ctx, "chaos_silent"):
        if ctx.attempt == 1:
            pause(ctx, 4.0)  # no heartbeat: its worker times it out after 0.5 s
        effect(ctx, hold_ms)  # attempt 1, fenced out by then: rolled back, LeaseLost
        return ident(ctx, n=n)


@app.task(name="chaos_async")
async def async_job(
    ctx: heartq.JobContext,
    n: int,
    ms: int = 50,
    hold_ms: int = 0,
    hand: bool = False,
    kill: bool = False,
) -> dict[str, Any]:
    with attempt(ctx, "chaos_async"):
        await asyncio.sleep(ms / 1000)
        result = ident(ctx, n=n)
        return await effect_async(ctx, hold_ms, result, hand, kill)


@app.task(name="chaos_child_crash", queue=PROC_QUEUE)
def child_crash(
    ctx: heartq.JobContext, n: int, hold_ms: int = 0, hand: bool = False, kill: bool = False
) -> dict[str, Any]:
    with attempt(ctx, "chaos_child_crash"):
        if ctx.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # the process pool's child dies
        return effect(ctx, hold_ms, ident(ctx, n=n), hand, kill)


@app.task(name="chaos_snoozy", max_snoozes=SNOOZE_BOUND)
def snoozy(
    ctx: heartq.JobContext, n: int, snoozes: int = 1, snooze_s: float = 0.1, hold_ms: int = 0
) -> dict[str, Any]:
    with attempt(ctx, "chaos_snoozy"):
        if ctx.snoozes < snoozes:
            raise heartq.Snooze(snooze_s, f"job {n}: {ctx.snoozes + 1} of {snoozes}")
        return effect(ctx, hold_ms, ident(ctx, n=n, snoozes=ctx.snoozes))


@app.task(name="chaos_rated")
def rated(ctx: heartq.JobContext, n: int, ms: int = 10, hold_ms: int = 0) -> dict[str, Any]:
    with attempt(ctx, "chaos_rated"):
        time.sleep(ms / 1000)
        effect(ctx, hold_ms)
        return ident(ctx, n=n)


@app.task(name="chaos_limited")
def limited(ctx: heartq.JobContext, n: int, ms: int = 10, hold_ms: int = 0) -> dict[str, Any]:
    with attempt(ctx, "chaos_limited"):
        time.sleep(ms / 1000)
        effect(ctx, hold_ms)
        return ident(ctx, n=n)


@app.task(name="chaos_fan_in")
def fan_in(
    ctx: heartq.JobContext, results: list[Any], n: int, hold_ms: int = 0
) -> dict[str, Any]:
    """A group's callback (`depends_on` its members, `dependency_results`): it receives
    the members' results in order and returns, for each, the attempt that produced it
    (`[job, eid]`; `["lost", job]` for a result lost after its commit, the marker
    `heartq.LostResult`; None for a member without a result, which must never be), so
    the runner can hold every callback to every result, exactly once."""
    with attempt(ctx, "chaos_fan_in"):
        got = [_producer(r) for r in results]
        effect(ctx, hold_ms)
        return ident(ctx, n=n, got=got)


def _producer(result: Any) -> Any:
    """Whose attempt a result taken came from: `[job, eid]`, `["lost", job]` for the
    lost-result marker, None for None."""
    if heartq.is_lost_result(result):
        return ["lost", result["job_id"]]
    if result is None:
        return None
    return [result.get("job"), result.get("eid")]


def _value_of(prev: Any) -> tuple[Any, Any]:
    """The value a step adds to, and `[job, eid]` of the attempt that produced it (for
    a previous result lost after its commit, `heartq.LostResult`: no value, and
    `["lost", job]`; None for both if it were None, which must never be; None for the
    attempt when it is the chain's start, given as an argument)."""
    if prev is None or heartq.is_lost_result(prev):
        return None, _producer(prev)
    got = [prev["job"], prev.get("eid")] if "job" in prev else None  # the chain's start
    return prev.get("value"), got


@app.task(name="chaos_add")
def add(
    ctx: heartq.JobContext,
    prev: Any,
    n: int,
    k: int,
    ms: int = 10,
    fail_times: int = 0,
    hold_ms: int = 0,
    hand: bool = False,
    kill: bool = False,
) -> dict[str, Any]:
    """A result-passing step: the previous step's result (or the chain's start, a
    `{"value": ...}` given as an argument) plus `k`; `got` names the attempt whose result
    it took, so the runner holds every step to the result of the attempt that succeeded,
    taken once."""
    with attempt(ctx, "chaos_add"):
        time.sleep(ms / 1000)
        if ctx.attempt <= fail_times:
            raise RuntimeError(f"add step {n} fails attempt {ctx.attempt} of {fail_times}")
        value, got = _value_of(prev)
        result = ident(ctx, n=n, value=None if value is None else value + k, got=got)
        return effect(ctx, hold_ms, result, hand, kill)


@app.task(name="chaos_fixable")
def fixable(
    ctx: heartq.JobContext, n: int, start: int, k: int, replay_after: float | None = None
) -> dict[str, Any]:
    """Fails every attempt until the runner fixes it (its marker file), then succeeds
    with `start + k`. `replay_after` is the runner's (when it replays the dead job)."""
    with attempt(ctx, "chaos_fixable"):
        marker = os.path.join(os.environ.get(FIXED_ENV, ""), ctx.job_id)
        if not os.environ.get(FIXED_ENV) or not os.path.exists(marker):
            raise RuntimeError(f"fixable job {n} is not fixed yet")
        effect(ctx)
        return ident(ctx, n=n, value=start + k, got=None)


# The hostile kinds (`--hostile`) are tasks of this app too: imported last, they use it.
from tests.soak import chaos_hostile_tasks  # noqa: E402, F401
