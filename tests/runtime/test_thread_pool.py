"""The thread pool runs every attempt of a batch on a thread of its own at once, whatever
the attempts before it do, though threads are called to its queue one at a time (each
one that takes an attempt calls the next before it runs its own); it reuses idle threads
before it starts new ones, and `close` ends them."""

from __future__ import annotations

import threading

import heartq
from heartq.worker.ledger import Ledger
from heartq.worker.pools import ThreadPool
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


def test_each_attempt_of_a_batch_runs_at_once_on_its_own_thread_and_threads_are_reused() -> None:
    let_go.clear()
    ledger = Ledger("w", concurrency=8)
    pool = ThreadPool(ledger, max_payload_bytes=1 << 20)
    ledger.pool = pool
    try:
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
    finally:
        let_go.set()
        pool.close()
    for thread in pool._threads:
        thread.join(10)
        assert not thread.is_alive()
