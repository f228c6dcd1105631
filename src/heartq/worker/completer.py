"""The completer: saves finished attempts in batches, one fenced statement per batch.

Finished attempts queue up here; the completer flushes every `flush_interval` (a few
milliseconds) or every `batch_size` attempts. An outcome counts as saved only once that
commit returned. If the database cannot be reached, the batch is retried with backoff
for as long as each attempt's lease is trusted: the heartbeater keeps renewing them
while the database answers it, and once it cannot, trust runs out and the attempt is
dropped unreported, since another worker may hold its job by then. A write that fencing
refuses means the lease was lost: nothing of it landed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from heartq import events
from heartq.errors import StoreUnavailable
from heartq.store.interface import Finish, Store
from heartq.worker.attempt import RunningJob

DEFAULT_FLUSH_INTERVAL = 0.005
"""Defaults to 5 ms: how long the completer gathers finished jobs into one batch."""
DEFAULT_BATCH_SIZE = 200
"""Defaults to 200 attempts per batch."""
RETRY_BACKOFF = (0.05, 0.1, 0.25, 0.5, 1.0)

Item = tuple[RunningJob, Finish]


class Completer:
    def __init__(
        self,
        store: Store,
        worker_id: str,
        *,
        on_saved: Callable[[RunningJob, Finish], None],
        on_lost: Callable[[RunningJob, str], None],
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._on_saved = on_saved
        self._on_lost = on_lost
        self._flush_interval = flush_interval
        self._batch_size = batch_size
        self._queue: queue.Queue[Item | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="heartq-completer", daemon=True)
        self._stopping = threading.Event()
        self.batches = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, run: RunningJob, finish: Finish) -> None:
        self._queue.put((run, finish))

    def stop(self, timeout: float) -> None:
        """Flush what is queued (within `timeout`), then stop."""
        self._queue.put(None)
        self._thread.join(timeout)
        self._stopping.set()

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, done = [first], False
            deadline = time.monotonic() + self._flush_interval
            while len(batch) < self._batch_size:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    done = True
                    break
                batch.append(item)
            self._flush(batch)
            if done:
                return

    def _flush(self, batch: list[Item]) -> None:
        """Save a batch. A database that cannot be reached is waited out while the leases
        hold; any other failure is the data's, not the database's, so the batch is split
        and saved item by item, and an item that still fails is given up (its lease then
        runs out and the reaper closes the attempt), never retried forever."""
        attempt = 0
        while batch:
            batch = self._still_trusted(batch)
            if not batch:
                return
            try:
                lost = set(self._store.finish([finish for _, finish in batch]))
            except StoreUnavailable as exc:
                delay = RETRY_BACKOFF[min(attempt, len(RETRY_BACKOFF) - 1)]
                attempt += 1
                events.emit(
                    events.COMPLETION_RETRY,
                    logging.WARNING,
                    worker_id=self._worker_id,
                    jobs=len(batch),
                    attempt=attempt,
                    error=str(exc),
                )
                if self._stopping.wait(delay):
                    return
                continue
            except Exception as exc:  # noqa: BLE001 - isolate the item the database refuses
                if len(batch) > 1:
                    for item in batch:
                        self._flush([item])
                    return
                run, _ = batch[0]
                self._on_lost(run, f"result not saved: the database refused it ({exc})")
                return
            self.batches += 1
            for run, finish in batch:
                if finish.lease in lost:
                    self._on_lost(run, "result refused: the job was reclaimed")
                else:
                    self._on_saved(run, finish)
            return

    def _still_trusted(self, batch: list[Item]) -> list[Item]:
        """Drop (and report) attempts whose lease is lost or no longer trusted."""
        now = time.monotonic()
        kept = []
        for run, finish in batch:
            if run.lost:
                self._on_lost(run, "result not saved: the lease was lost")
            elif run.trusted_until <= now:
                self._on_lost(run, "result not saved: the lease could not be renewed in time")
            else:
                kept.append((run, finish))
        return kept
