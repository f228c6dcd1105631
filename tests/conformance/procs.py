"""The processes of test_concurrency.py, in a module that spawned children can import by
its stable name (`tests.conformance.procs`): pytest's importlib mode gives test modules
names that only the parent process knows."""

from __future__ import annotations

import multiprocessing
import queue
import random
import time
import traceback
from collections.abc import Callable
from typing import Any

from heartq.model import DetectedBy
from heartq.store import open_store

PROCESSES = 4
TIMEOUT = 60.0
"""Seconds without progress that count as a hang: no process reported its result or a
round done (`_progress`). It bounds a hang, never the whole work: a bound on the whole
(60 s for the first result) failed the 25 rounds of concurrent migrations, which took
46-68 s beside a CPU burner (load 11-21 on 2 cores), by `queue.Empty` alone."""
EXIT_GRACE = 5.0
"""Seconds a process that exited has for its report to come through the queue."""


def run_processes(
    target: Callable[..., None], args_per_process: list[tuple[Any, ...]]
) -> list[Any]:
    """Start one spawned process per args tuple; return what each reported, in order."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(args_per_process))
    results = context.Queue()
    processes = [
        context.Process(target=target, args=(index, barrier, results, *args), daemon=True)
        for index, args in enumerate(args_per_process)
    ]
    for process in processes:
        process.start()
    try:
        gathered = _gather(results, processes)
    except BaseException:
        for process in processes:  # a failure is known: the others need not finish
            process.kill()
        raise
    finally:
        for process in processes:
            process.join(timeout=TIMEOUT)
            if process.is_alive():
                process.kill()
    for process in processes:
        assert process.exitcode == 0, f"process exited with {process.exitcode}"
    failures = {i: r for i, r in gathered.items() if isinstance(r, str)}
    assert not failures, failures
    return [gathered[i] for i in range(len(processes))]


def _gather(results: Any, processes: list[Any]) -> dict[int, Any]:
    """Each process's report, waiting as long as they make progress (`TIMEOUT`); a process
    that exited without a report fails within `EXIT_GRACE`."""
    gathered: dict[int, Any] = {}
    last_progress = time.monotonic()
    exited_at: dict[int, float] = {}
    while len(gathered) < len(processes):
        try:
            index, result = results.get(timeout=1.0)
        except queue.Empty:
            index, result = None, _QUIET
        now = time.monotonic()
        if result is not _QUIET:
            last_progress = now
            if index is not None:
                gathered[index] = result
            continue
        for i, process in enumerate(processes):
            if i not in gathered and not process.is_alive():
                since = exited_at.setdefault(i, now)
                assert now - since < EXIT_GRACE, (
                    f"process {i} exited with {process.exitcode} and no report"
                )
        assert now - last_progress < TIMEOUT, (
            f"no progress in {TIMEOUT:.0f} s; reports from {sorted(gathered)}"
        )
    return gathered


_QUIET = object()
"""What `_gather` notes for a second with nothing from any process."""


def _progress(results: Any) -> None:
    """Tell the parent a round is done (the process is not hung): its wait lasts while
    rounds go on (`TIMEOUT`)."""
    results.put((None, None))


def _report(index: int, results: Any, work: Callable[[], Any]) -> None:
    try:
        results.put((index, work()))
    except BaseException as exc:  # noqa: BLE001 - the parent shows it
        results.put((index, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def claimer(index: int, barrier: Any, results: Any, url: str, now: float) -> None:
    """Claim random-sized batches until the queue is empty; report the ids."""

    def work() -> list[str]:
        store = open_store(url)
        rng = random.Random(index)
        got: list[str] = []
        barrier.wait(TIMEOUT)
        while True:
            claimed = store.claim(f"w{index}", ["default"], rng.randint(1, 10), 600, now=now)
            if not claimed:
                break
            got.extend(c.id for c in claimed)
        store.link.close()
        return got

    _report(index, results, work)


def reaper(index: int, barrier: Any, results: Any, url: str, now: float) -> None:
    """Reap random-sized batches until nothing is left; report (job_id, execution_id)s."""

    def work() -> list[tuple[str, int]]:
        store = open_store(url)
        rng = random.Random(index)
        got: list[tuple[str, int]] = []
        barrier.wait(TIMEOUT)
        while True:
            limit = rng.randint(1, 50)
            batch = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, limit=limit, now=now)
            if not batch:
                break
            got.extend((r.job_id, r.execution_id) for r in batch)
        store.link.close()
        return got

    _report(index, results, work)


def migrator(index: int, barrier: Any, results: Any, urls: list[str]) -> None:
    """Migrate each database in turn, all processes together; report versions or errors."""

    def work() -> list[int | str]:
        versions: list[int | str] = []
        for url in urls:  # every process goes through every round, errors or not
            store = open_store(url)
            barrier.wait(TIMEOUT)
            try:
                versions.append(store.link.migrate())
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                versions.append(f"{type(exc).__name__}: {exc}")
            finally:
                store.link.close()
            _progress(results)
        return versions

    _report(index, results, work)


def unique_enqueuer(index: int, barrier: Any, results: Any, url: str, key: str) -> None:
    """Enqueue one job with `key` through the public API the moment every process is
    ready (the store opened and migrated first, so only the enqueues race); report the
    id it answered (in a list: a string is how a child reports a failure)."""
    import heartq

    def work() -> list[str]:
        app = heartq.App(url)
        app.migrate()
        barrier.wait(timeout=TIMEOUT)
        try:
            return [app.enqueue("report", {"by": index}, unique_key=key)]
        finally:
            app.close()

    _report(index, results, work)


def limited_claimer(
    index: int, barrier: Any, results: Any, url: str, now: float, key: str, limit: int
) -> None:
    """Claim random-sized batches of a queue whose jobs share one concurrency key, read
    how many of the key run right after each claim, and finish what was claimed (at
    random, sometimes before the next claim); until nothing is left. Reports the ids
    claimed and the most running at once seen."""
    from heartq.lifecycle.fate import succeeded

    def work() -> tuple[list[str], int]:
        store = open_store(url)
        rng = random.Random(index)
        got: list[str] = []
        held: list[Any] = []
        most = 0
        barrier.wait(TIMEOUT)
        while True:
            claimed = store.claim(f"w{index}", ["default"], rng.randint(1, 3), 600, now=now)
            got.extend(c.id for c in claimed)
            held.extend(claimed)
            running = [
                j
                for j in store.list_jobs(status="running", limit=1000)
                if j.get("concurrency_key") == key
            ]
            most = max(most, len(running))
            if held and (not claimed or rng.random() < 0.7):
                cut = rng.randint(1, len(held))
                done, held = held[:cut], held[cut:]
                store.finish([succeeded(c, None) for c in done], now=now)
            if not claimed and not held and not store.list_jobs(status="queued", limit=1):
                break
        store.link.close()
        return got, most

    _report(index, results, work)


def rate_claimer(index: int, barrier: Any, results: Any, url: str, now: float, key: str) -> None:
    """Claim small batches of a queue whose jobs share one rate key, all at the same
    instant (`now`), finishing each claim's jobs at once, for a fixed number of rounds
    (a round may lose the key's lock to another claimer: it skips, and asks again).
    Reports the ids claimed."""
    from heartq.lifecycle.fate import succeeded

    def work() -> list[str]:
        store = open_store(url)
        rng = random.Random(index)
        got: list[str] = []
        barrier.wait(TIMEOUT)
        for _ in range(30):
            claimed = store.claim(f"w{index}", ["default"], rng.randint(1, 3), 600, now=now)
            got.extend(c.id for c in claimed)
            store.finish([succeeded(c, None) for c in claimed], now=now)
        store.link.close()
        return got

    _report(index, results, work)
