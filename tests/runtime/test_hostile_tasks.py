"""Nothing a task's code does takes down what runs it: whatever it raises or returns ends
as an outcome of its attempt, recorded by its worker, and the worker goes on at full
concurrency. A real worker on both backends, the thread and async pools (the process
pool's children: tests/integration/test_hostile_processes.py).

Each test enqueues every hostile case at once beside ordinary jobs on one worker, so a
case that strands its job, kills a pool thread or leaks a slot fails it by name."""

from __future__ import annotations

import asyncio
import pprint
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

import heartq
import heartq.testing
from heartq import events
from tests.hostile_code import Unencodable, Unprintable, recurse
from tests.support import STEADY, wait_for

POOLS = ["thread", "async"]
CONCURRENCY = 3


def _circular() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


RAISES: dict[str, Callable[[], Any]] = {
    "keyboard_interrupt": lambda: (_ for _ in ()).throw(KeyboardInterrupt()),
    "system_exit": lambda: sys.exit(3),
    "generator_exit": lambda: (_ for _ in ()).throw(GeneratorExit()),
    "cancelled_error": lambda: (_ for _ in ()).throw(asyncio.CancelledError()),
    "unprintable": lambda: (_ for _ in ()).throw(Unprintable()),
    "recursion": lambda: recurse(0),
    "memory_error": lambda: (_ for _ in ()).throw(MemoryError()),
}
"""Each case's code, raising what it is named for; the attempt ends `failed`, with the
exception's type in its error."""

RETURNS: dict[str, Callable[[], Any]] = {
    "unencodable": Unencodable,
    "circular": _circular,
    "nan": lambda: float("nan"),
}
"""Each case's code, returning a value heartq cannot store: failed, never retried."""

ERROR_NAMES = {
    "keyboard_interrupt": "KeyboardInterrupt",
    "system_exit": "SystemExit",
    "generator_exit": "GeneratorExit",
    "cancelled_error": "CancelledError",
    "unprintable": "Unprintable",
    "recursion": "RecursionError",
    "memory_error": "MemoryError",
}


def declare(app: heartq.App) -> None:
    """The hostile task (sync and async) and an ordinary one."""

    def act(kind: str) -> Any:
        if kind in RAISES:
            return RAISES[kind]()
        return RETURNS[kind]()

    @app.task(max_retries=0)
    def hostile(kind: str) -> Any:
        return act(kind)

    @app.task(max_retries=0)
    async def hostile_async(kind: str) -> Any:
        return act(kind)

    @app.task
    def ordinary(n: int) -> int:
        return n


def settle(app: heartq.App, ids: dict[str, str], timeout: float = 30.0) -> dict[str, Any]:
    """Each job once it ended (or fail naming those that did not)."""

    def ended() -> bool:
        return all(app.get_job(i)["status"] in ("succeeded", "dead") for i in ids.values())

    try:
        wait_for(ended, timeout, what="every job to end")
    except AssertionError:
        stuck = {k: app.get_job(i)["status"] for k, i in ids.items()}
        raise AssertionError(f"jobs that did not end: {stuck}") from None
    return {kind: app.get_job(job_id) for kind, job_id in ids.items()}


def check_outcomes(jobs: dict[str, Any], cases: list[str]) -> None:
    wrong = {}
    for kind in cases:
        job = jobs[kind]
        if len(job["executions"]) != 1:  # each attempt, to tell a reclaim from a retry
            wrong[kind] = [(e["outcome"], (e["error"] or "")[-120:]) for e in job["executions"]]
            continue
        [execution] = job["executions"]
        error = execution["error"] or ""
        expected = ERROR_NAMES.get(kind.removesuffix("_async"), "PayloadError")
        if (job["status"], execution["outcome"]) != ("dead", "failed") or expected not in error:
            wrong[kind] = (job["status"], execution["outcome"], error[-120:])
    assert not wrong, pprint.pformat(wrong, width=100)  # a str: pytest elides a dict's middle


def cases_for(pool: str) -> list[tuple[str, str, str]]:
    """(label, task, kind): every case, as a sync task and as an async one."""
    kinds = [*RAISES, *RETURNS]
    return [(k, "hostile", k) for k in kinds] + [(f"{k}_async", "hostile_async", k) for k in kinds]


@pytest.mark.parametrize("pool", POOLS)
def test_whatever_a_task_raises_or_returns_is_its_outcome(
    app: heartq.App, run_worker: Callable[..., Any], pool: str
) -> None:
    declare(app)
    cases = cases_for(pool)
    guarded: list[dict[str, Any]] = []  # the pools' guard is for heartq's faults, not these

    def hear(event: events.Event) -> None:
        if event.name == events.MAINTENANCE_FAILED and event.fields.get("service") == "pool":
            guarded.append(event.fields)

    ids = {label: app.enqueue(task, {"kind": kind}) for label, task, kind in cases}
    app.events.subscribe(hear)
    try:
        # STEADY's lease: the test counts each job's attempts, and with FAST's a loaded
        # machine's late heartbeat makes the worker fence an attempt and give it back
        # (interrupted, not counted against max_retries), so its job runs twice.
        with run_worker(app, pool=pool, concurrency=CONCURRENCY, lease=STEADY["lease"]) as worker:
            jobs = settle(app, ids)
            check_outcomes(jobs, [label for label, _, _ in cases])
            assert not guarded, guarded
            # The worker is alive, claims on, and has every slot back.
            later = {f"ordinary-{n}": app.enqueue("ordinary", {"n": n}) for n in range(6)}
            assert all(j["status"] == "succeeded" for j in settle(app, later).values())
            wait_for(
                lambda: worker.ledger.free_slots() == CONCURRENCY
                and worker.ledger.executing() == 0,
                10,
                what="every slot free",
            )
    finally:
        app.events.unsubscribe(hear)


def test_a_task_left_on_the_loop_cannot_stop_the_async_pool(
    app: heartq.App, run_worker: Callable[..., Any]
) -> None:
    """A task the attempt created and never awaited raises `KeyboardInterrupt` on the
    loop after its attempt ended: asyncio lets it out of `run_forever`, and the pool runs
    the loop again."""

    @app.task
    async def leaves_a_task() -> None:
        async def later() -> None:
            raise KeyboardInterrupt

        asyncio.get_running_loop().create_task(later())

    @app.task
    async def ordinary_async(n: int) -> int:
        await asyncio.sleep(0)
        return n

    left = app.enqueue("leaves_a_task", {})
    with run_worker(app, pool="async", concurrency=CONCURRENCY) as worker:
        assert settle(app, {"left": left})["left"]["status"] == "succeeded"
        later = {f"n{n}": app.enqueue("ordinary_async", {"n": n}) for n in range(4)}
        assert all(j["status"] == "succeeded" for j in settle(app, later).values())
        wait_for(lambda: worker.ledger.free_slots() == CONCURRENCY, 10, what="every slot free")


def test_a_blocked_event_loop_is_told_and_its_attempt_times_out(
    app: heartq.App, run_worker: Callable[..., Any]
) -> None:
    """`time.sleep` in an `async def` holds the pool's loop: the worker names the job and
    how long it held the loop, ends it `timed_out` at its timeout while the loop is still
    held, and renews the other attempt's lease meanwhile (it succeeds on its first)."""
    told: list[tuple[str, dict[str, Any]]] = []
    hold = threading.Event()

    def hear(event: events.Event) -> None:
        if event.name in (events.EVENT_LOOP_BLOCKED, events.EVENT_LOOP_RESUMED):
            told.append((event.name, event.fields))

    @app.task(timeout=1, max_retries=0)
    async def blocks() -> None:
        hold.wait(20)  # blocking code in a coroutine: the loop is held until it returns

    @app.task(max_retries=0)
    async def patient() -> str:
        while not hold.is_set():  # runs across the whole hold, its lease renewed meanwhile
            await asyncio.sleep(0.05)
        return "done"

    app.events.subscribe(hear)
    try:
        with run_worker(app, pool="async", concurrency=CONCURRENCY):
            other = app.enqueue("patient", {})
            blocker = app.enqueue("blocks", {})
            # A loaded machine may stall the loop a second on its own (an event naming no
            # job, or the one it ran then): the blocker's events are the ones that count.
            def blocker_told(name: str) -> list[dict[str, Any]]:
                return [f for e, f in told if e == name and f["job_id"] == blocker]

            wait_for(lambda: blocker_told(events.EVENT_LOOP_BLOCKED), 10, what="blocked")
            fields = blocker_told(events.EVENT_LOOP_BLOCKED)[0]
            assert fields["task"] == "blocks" and fields["blocked_for"] >= 1.0
            # Its timeout ends it while its code still holds the loop.
            wait_for(lambda: app.get_job(blocker)["status"] == "dead", 10, what="timed out")
            assert app.get_job(blocker)["executions"][0]["outcome"] == "timed_out"
            assert not hold.is_set()
            hold.set()
            wait_for(lambda: blocker_told(events.EVENT_LOOP_RESUMED), 10, what="resumed")
            resumed = blocker_told(events.EVENT_LOOP_RESUMED)[0]
            assert resumed["blocked_for"] >= fields["blocked_for"]
            done = settle(app, {"other": other})["other"]
            assert done["status"] == "succeeded" and len(done["executions"]) == 1
    finally:
        hold.set()
        app.events.unsubscribe(hear)


@pytest.mark.parametrize("pool", POOLS)
def test_what_raises_past_the_task_ends_its_attempt_and_is_logged(
    app: heartq.App, run_worker: Callable[..., Any], pool: str
) -> None:
    """An attempt hook's after part that raises `KeyboardInterrupt` (a hook's `Exception`
    is logged and skipped; this one escapes the hooks): the pool's guard ends the attempt
    failed, logs `maintenance_failed` (`service=pool`) naming the job, and goes on."""
    told: list[dict[str, Any]] = []

    def hear(event: events.Event) -> None:
        if event.name == events.MAINTENANCE_FAILED and event.fields.get("service") == "pool":
            told.append(event.fields)

    @app.hooks.attempt
    def interrupting(attempt: heartq.AttemptInfo) -> Any:
        yield
        if attempt.task == "guarded":
            raise KeyboardInterrupt

    @app.task(max_retries=0)
    def guarded() -> int:
        return 1

    @app.task
    def ordinary(n: int) -> int:
        return n

    app.events.subscribe(hear)
    try:
        job_id = app.enqueue("guarded", {})
        with run_worker(app, pool=pool, concurrency=CONCURRENCY) as worker:
            job = settle(app, {"guarded": job_id})["guarded"]
            assert (job["status"], job["executions"][0]["outcome"]) == ("dead", "failed")
            assert "KeyboardInterrupt" in job["executions"][0]["error"]
            assert [f["job_id"] for f in told] == [job_id]
            later = {f"n{n}": app.enqueue("ordinary", {"n": n}) for n in range(4)}
            assert all(j["status"] == "succeeded" for j in settle(app, later).values())
            wait_for(lambda: worker.ledger.free_slots() == CONCURRENCY, 10, what="slots free")
    finally:
        app.events.unsubscribe(hear)
