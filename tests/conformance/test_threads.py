"""Threads of one process sharing a store: connections of threads that end are closed,
and a worker's racing batch statements never deadlock each other."""

from __future__ import annotations

import os
import random
import threading
from collections import Counter
from collections.abc import Callable

import pytest

from heartq.lifecycle.fate import succeeded
from heartq.model import ClaimedJob, JobStatus, Renewal, WorkerInfo
from heartq.store import Store

from .support import new_job


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds in /proc")
def test_threads_that_end_do_not_leak_connections(store: Store, t0: float) -> None:
    """A long-running worker touches the store from a new short-lived thread per job (the
    process pool's watcher of each child): connections of ended threads must be closed,
    or every job leaks a connection and its file descriptors."""
    store.register_worker(
        WorkerInfo(id="w1", hostname="h", pid=1, queues=("default",), concurrency=1), now=t0
    )
    store.clock()
    baseline = _open_fds()
    errors: list[BaseException] = []

    def touch(i: int) -> None:
        try:
            (job_id,) = store.enqueue([new_job(args={"i": i})], now=t0)  # a write
            assert store.get_job(job_id)["status"] == JobStatus.QUEUED  # a read
            store.heartbeat("w1", [], 30.0, now=t0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    peak = baseline
    for i in range(50):
        thread = threading.Thread(target=touch, args=(i,))
        thread.start()
        thread.join()
        peak = max(peak, _open_fds())
    assert errors == []
    # one live connection at a time (plus a pool's spare ones), never one per thread
    assert peak - baseline <= 12, f"{peak - baseline} more fds after 50 threads"
    assert len(store.list_jobs(limit=100)) == 50
    store.link.close()
    assert _open_fds() <= baseline, "close() closes every connection"


def test_racing_heartbeats_and_finishes_of_one_worker_never_deadlock(
    store: Store, t0: float
) -> None:
    """A worker's heartbeat renews all its jobs while its completer finishes some of them
    and its shutdown releases others, each batch in its own order: the statements must
    wait for each other, never deadlock (PostgreSQL: 'deadlock detected')."""
    store.register_worker(
        WorkerInfo(id="w1", hostname="h", pid=1, queues=("default",), concurrency=300), now=t0
    )
    store.enqueue([new_job(args={"i": i}) for i in range(300)], now=t0)
    jobs: list[ClaimedJob] = []
    while batch := store.claim("w1", ["default"], 100, 3600, now=t0):
        jobs.extend(batch)
    assert len(jobs) == 300
    rng = random.Random(7)
    to_finish, to_release = jobs[:150], jobs[150:]
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                start.wait()
                work()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        return run

    def heartbeats() -> None:
        for _ in range(15):
            renewals = [Renewal(j.lease) for j in reversed(jobs)]
            store.heartbeat("w1", renewals, 3600, now=t0 + 1)

    def finishes() -> None:
        batches = [to_finish[i : i + 30] for i in range(0, len(to_finish), 30)]
        for batch in batches:
            batch = sorted(batch, key=lambda j: j.id, reverse=True)
            assert store.finish([succeeded(j, None) for j in batch], now=t0 + 1) == []

    def releases() -> None:
        shuffled = list(to_release)
        rng.shuffle(shuffled)
        for i in range(0, len(shuffled), 30):
            assert store.release([j.lease for j in shuffled[i : i + 30]], now=t0 + 1) == []

    threads = [threading.Thread(target=guarded(w)) for w in (heartbeats, finishes, releases)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [], errors[:3]
    statuses = Counter(j["status"] for j in store.list_jobs(limit=1000))
    assert statuses == {JobStatus.SUCCEEDED: 150, JobStatus.QUEUED: 150}
