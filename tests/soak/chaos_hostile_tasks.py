"""The chaos runner's hostile tasks (`--hostile`): code that does what task code must not,
registered on the chaos app (`tests.soak.chaos_tasks` imports this module), so every
worker of a run has them whatever its pool.

Each hostile job names its `case`; the checker (`tests/soak/chaos_hostile.py`) holds each
attempt to the outcome its case and the pool that ran it give (`EXPECTED`):

- raised by the task itself: `keyboard_interrupt`, `system_exit` (`raise SystemExit(3)`),
  `sys_exit` (`sys.exit()`), `generator_exit`, `cancelled_error` (an
  `asyncio.CancelledError` of its own), `unprintable` (an exception whose `__str__` and
  `__repr__` raise), `recursion` (a `RecursionError` by recursing), `memory_error`: the
  attempt fails, its error naming the exception;
- `unencodable`: returns a value no encoder can take (its `__repr__` raises
  `KeyboardInterrupt`): failed, `PayloadError`, never retried;
- `signal_handler`: `signal.signal(SIGTERM, ...)`: fails (`ValueError`, not the main
  thread) on the thread and async pools, succeeds in a process-pool child;
- `fork`: `os.fork()`; the copy returns from the task at once, the task waits for it
  (`FORK_WAIT` at most, then kills it and says so: the worker must not keep a copy of
  itself running) and returns;
- `lingering_thread`: starts a non-daemon thread that outlives the attempt and ends by
  itself `LINGER_S` later; the attempt returns at once;
- `closed_stdio`: replaces `sys.stdout` and `sys.stderr` with closed `StringIO`s and
  leaves them so (the process's real stderr, which the runner reads, stays open);
- `block_loop` (`chaos_hostile_block`, an `async def` with a 1 s `timeout`): `time.sleep`
  for `block_s`, holding its event loop (the async pool's, or its own elsewhere):
  `timed_out` when `block_s` passes the timeout, else succeeded;
- `os_exit` (`chaos_hostile_exit`, queue `proc`, so the process pool only): `os._exit(3)`
  in the child, a crash found as crashes are (`child_exit`).

Each case is run as a sync task (`chaos_hostile`) or an `async def` one
(`chaos_hostile_async`), drawn per job. Every attempt appends its start and end to the
side file like the other kinds; those that return put their identity in their result.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
import threading
import time
from typing import Any

import heartq
from tests.hostile_code import Unencodable, Unprintable, recurse
from tests.soak.chaos_tasks import PROC_QUEUE, app, attempt, ident, record

FORK_WAIT = 10.0
"""Seconds the task waits for its forked copy to exit before it kills it (and records
that it had to: a violation)."""
LINGER_S = (1.0, 4.0)
"""How long a lingering thread outlives its attempt, seconds (drawn per job)."""
BLOCK_TIMEOUT = 1.0
"""`chaos_hostile_block`'s timeout, seconds."""
EXIT_CODE = 3

RAISING = {
    "keyboard_interrupt": "KeyboardInterrupt",
    "system_exit": "SystemExit",
    "sys_exit": "SystemExit",
    "generator_exit": "GeneratorExit",
    "cancelled_error": "CancelledError",
    "unprintable": "Unprintable",
    "recursion": "RecursionError",
    "memory_error": "MemoryError",
}
"""The cases that raise, and the name their attempt's error must show."""
RETURNING = ("fork", "lingering_thread", "closed_stdio")
"""The cases that misbehave and then return: succeeded."""
CASES = (*RAISING, "unencodable", "signal_handler", *RETURNING)
"""The cases of `chaos_hostile` and `chaos_hostile_async`."""
TASKS = ("chaos_hostile", "chaos_hostile_async", "chaos_hostile_block", "chaos_hostile_exit")


def expected(case: str, pool: str, long_block: bool = False) -> tuple[set[str], str | None]:
    """The outcomes an attempt of `case` may end with by its own doing on `pool` (what a
    fault does to it aside), and the text its error must hold when it failed."""
    if case in RAISING:
        return {"failed"}, RAISING[case]
    if case == "unencodable":
        return {"failed"}, "PayloadError"
    if case == "signal_handler":
        return ({"succeeded"}, None) if pool == "process" else ({"failed"}, "ValueError")
    if case == "block_loop":
        # a short block may still time out on the async pool: another job's block held
        # the loop it waits for
        short = {"succeeded", "timed_out"} if pool == "async" else {"succeeded"}
        return ({"timed_out"} if long_block else short), None
    if case == "os_exit":
        return {"crashed"}, None
    return {"succeeded"}, None


def _raise(case: str) -> None:
    if case == "keyboard_interrupt":
        raise KeyboardInterrupt
    if case == "system_exit":
        raise SystemExit(EXIT_CODE)
    if case == "sys_exit":
        sys.exit()
    if case == "generator_exit":
        raise GeneratorExit
    if case == "cancelled_error":
        raise asyncio.CancelledError
    if case == "unprintable":
        raise Unprintable
    if case == "recursion":
        recurse(0)
    if case == "memory_error":
        raise MemoryError


def _fork() -> dict[str, Any] | None:
    """Fork; in the copy, None (it returns from the task at once). In the task's own
    process: wait for the copy, kill it past `FORK_WAIT`; how it ended."""
    pid = os.fork()
    if pid == 0:
        return None
    deadline = time.monotonic() + FORK_WAIT
    waited, status = 0, 0
    while waited == 0 and time.monotonic() < deadline:
        waited, status = os.waitpid(pid, os.WNOHANG)
        if waited == 0:
            time.sleep(0.02)
    killed = waited == 0
    if killed:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    return {"copy": pid, "killed": killed, "code": os.waitstatus_to_exitcode(status)}


def _misbehave(ctx: heartq.JobContext, case: str, linger_s: float) -> Any:
    """Do what `case` does (not `fork`); what the task returns."""
    if case in RAISING:
        _raise(case)
    if case == "unencodable":
        return Unencodable()
    if case == "signal_handler":
        signal.signal(signal.SIGTERM, lambda *_: None)
    elif case == "lingering_thread":
        threading.Thread(target=time.sleep, args=(linger_s,), name="chaos-lingering").start()
    elif case == "closed_stdio":
        for name in ("stdout", "stderr"):
            closed = io.StringIO()
            closed.close()
            setattr(sys, name, closed)
    return ident(ctx, case=case)


def _hostile(ctx: heartq.JobContext, task: str, case: str, linger_s: float) -> Any:
    """One attempt of `case`, its start and end in the side file. A fork's copy returns
    at once, writing nothing (its end would be taken for the attempt's)."""
    if case == "fork":
        record("start", ctx, task=task)
        copy = _fork()
        if copy is None:
            return ident(ctx, case=case, copy=True)
        record("end", ctx, how="return", fork=copy)
        return ident(ctx, case=case)
    with attempt(ctx, task):
        return _misbehave(ctx, case, linger_s)


@app.task(name="chaos_hostile")
def hostile(ctx: heartq.JobContext, n: int, case: str, linger_s: float = 2.0) -> Any:
    return _hostile(ctx, "chaos_hostile", case, linger_s)


@app.task(name="chaos_hostile_async")
async def hostile_async(ctx: heartq.JobContext, n: int, case: str, linger_s: float = 2.0) -> Any:
    return _hostile(ctx, "chaos_hostile_async", case, linger_s)


@app.task(name="chaos_hostile_block", timeout=BLOCK_TIMEOUT)
async def block_loop(ctx: heartq.JobContext, n: int, block_s: float) -> Any:
    with attempt(ctx, "chaos_hostile_block"):
        time.sleep(block_s)  # blocking code in a coroutine: its loop is held meanwhile
        return ident(ctx, case="block_loop")


@app.task(name="chaos_hostile_exit", queue=PROC_QUEUE)
def exits(ctx: heartq.JobContext, n: int) -> Any:
    with attempt(ctx, "chaos_hostile_exit"):
        os._exit(EXIT_CODE)  # the process pool's child: a crash


@app.task(name="chaos_probe")
def probe(ctx: heartq.JobContext, n: int, go: str, wait: float = 60.0) -> Any:
    """After the drain: holds its slot until the runner creates the file `go` (or `wait`
    seconds pass), so the runner can see every live worker fill all its slots at once."""
    with attempt(ctx, "chaos_probe"):
        deadline = time.monotonic() + wait
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.02)
        return ident(ctx)
