"""The thread pool runs every attempt of a batch on a thread of its own at once, whatever
the attempts before it do, though threads are called to its queue one at a time (each
one that takes an attempt calls the next before it runs its own), but for the attempts
of a task known to run long, which each get a thread called at once; it reuses idle
threads before it starts new ones, and `close` ends them."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import heartq
from heartq.event_stream import EventStream
from heartq.worker.ledger import Ledger
from heartq.worker.pools import LONG_ATTEMPT, ThreadPool
from tests.support import wait_for

from .test_ledger_slots import attempt

tasks = heartq.App()
entered: list[str] = []  # each attempt's thread, once it is inside its code
let_go = threading.Event()


@tasks.task
def blocks() -> None:
    """Holds its thread until the test lets every attempt go."""
    entered.append(threading.current_thread().name)
    let_go.wait(30)


@contextlib.contextmanager
def running_pool(concurrency: int) -> Iterator[tuple[Ledger, ThreadPool]]:
    """A ledger of `concurrency` slots and its thread pool; after the test, every attempt
    let go and every thread of the pool ended."""
    let_go.clear()
    entered.clear()
    ledger = Ledger("w", concurrency=concurrency, events=EventStream())
    pool = ThreadPool(ledger, max_payload_bytes=1 << 20)
    ledger.pool = pool
    try:
        yield ledger, pool
    finally:
        let_go.set()
        pool.close()
    for thread in pool._threads:
        thread.join(10)
        assert not thread.is_alive()


def test_each_attempt_of_a_batch_runs_at_once_on_its_own_thread_and_threads_are_reused() -> None:
    with running_pool(8) as (ledger, pool):
        for batch in range(2):
            entered.clear()
            runs = [attempt(f"job-{batch}-{i}", task=blocks) for i in range(8)]
            ledger.claimed(*runs)
            pool.start(runs)
            # All eight block inside their code at once: none waits for another's end.
            wait_for(lambda: len(entered) == 8, timeout=20, what="every attempt inside")
            assert len(set(entered)) == 8 and ledger.executing() == 8
            let_go.set()
            wait_for(lambda: ledger.executing() == 0, timeout=20, what="every attempt ended")
            let_go.clear()
        assert len(pool._threads) == 8  # the second batch ran on the first one's threads


@tasks.task
def naps() -> None:
    """Runs longer than a thread's wake-up (`LONG_ATTEMPT`), then blocks like `blocks`."""
    time.sleep(LONG_ATTEMPT * 2)
    entered.append(threading.current_thread().name)
    let_go.wait(30)


def test_attempts_of_a_task_that_ran_long_each_get_a_thread_called_at_once() -> None:
    """Once an attempt of a task ran `LONG_ATTEMPT` or more, a batch of that task has a
    thread called for each attempt by `start` itself, not by a chain of wake-ups (each
    waiting for a core on a busy machine): the threads exist when `start` returns."""
    with running_pool(16) as (ledger, pool):
        first = attempt("first", task=naps)
        ledger.claimed(first)
        pool.start([first])
        wait_for(lambda: len(entered) == 1, timeout=20, what="the first attempt inside")
        let_go.set()
        wait_for(lambda: ledger.executing() == 0, timeout=20, what="the first attempt ended")
        let_go.clear()
        runs = [attempt(f"job-{i}", task=naps) for i in range(16)]
        ledger.claimed(*runs)
        pool.start(runs)
        assert len(pool._threads) == 16  # one idle, fifteen started by `start`
        wait_for(lambda: len(entered) == 17, timeout=20, what="every attempt inside")
