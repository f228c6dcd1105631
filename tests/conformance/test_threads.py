"""Threads of one process sharing a store: connections of threads that end are closed."""

from __future__ import annotations

import os
import threading

import pytest

from heartq.store import Store
from heartq.store.interface import JobStatus, WorkerInfo

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
    store.close()
    assert _open_fds() <= baseline, "close() closes every connection"
