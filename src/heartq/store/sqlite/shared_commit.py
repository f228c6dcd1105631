"""One commit for the hot writes of a process's threads that meet at SQLite's write lock.

A worker writes from several threads: the fetch loop claims, the completer finishes, the
heartbeater renews. On SQLite they queue for one write lock per process (and the file's
lock between processes), and each write pays its own `BEGIN IMMEDIATE` and its own
`COMMIT`, an fsync at `synchronous=FULL`. Measured in the benchmark's two workers of no-op
jobs (docs/BENCHMARKS.md, eleventh session): each thread spent a third of its time
waiting for the other's transaction, and a commit took 1.8 ms of the 6 ms a transaction
held the file's lock.

So a hot write (`ConnectionPool.write(share=True)`: claim, start of claimed-ahead jobs,
heartbeat, pulse, finish, and an enqueue of at most `SHARED_ENQUEUE_JOBS` jobs) that
ends while another hot write of the process waits for the lock does not commit: it
leaves its transaction open for that one (a `SharedCommit`) and waits. The next hot
write runs inside the same transaction under a savepoint, so its failure rolls back its
own statements only, and the last one commits for all. Each caller still returns only
once its statements are committed, and raises if they are not: a commit that fails
fails every write that shared it. A write that does not share (a larger enqueue, a
migration, a periodic tick, an application's effects) first commits a transaction left
open, so it never waits behind another's statements, and never joins them.

Small enqueues share too: an application's threads (a web server's) that each enqueue a
job into one file queue at the write lock as the worker's threads do, and each paid an
fsync of its own (`bench/enqueue_one.py --only 'app x8 full'`, 8 threads enqueuing one
job a call at `synchronous=FULL`: 3,907 and 4,329 jobs/s alone, 5,804 and 6,170 sharing,
a commit for 4 enqueues instead of 1; one thread alone is unchanged).

What a write sharing the commit may wait for: the statements of at most
`MAX_SHARED - 1` other hot writes, each bounded by the worker's slots or batch sizes.
"""

from __future__ import annotations

import os
import sqlite3
import threading

MAX_SHARED = 4
"""At most 4 writes share one commit (a worker has 3-4 threads that write): the first one
waits for the statements of 3 others at most."""
SHARED_ENQUEUE_JOBS = 100
"""An enqueue of at most 100 jobs shares commits; a larger batch would hold up the writes
that wait to commit with it for as long as its inserts take, so it commits alone."""
PARKED_CHECK = 0.05
"""A write that left its transaction open for a waiting one looks every 50 ms whether it
was taken: the waiter may have given up (its wait for the lock timed out), and then the
write commits its transaction itself."""
SAVEPOINT = "heartq_shared"


class SharedCommit:
    """One write transaction that hot writes of one process's threads take turns in.

    Only the thread that holds the pool's write lock touches it; `done` tells the writes
    that left it open that it ended, and `failure` why it did not commit (None: it did)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.pid = os.getpid()  # a forked child never touches its parent's transaction
        self.writes = 1
        self.done = threading.Event()
        self.failure: sqlite3.Error | None = None

    def open_to(self, pid: int) -> bool:
        """Whether a write of process `pid` may join or end this transaction."""
        return self.pid == pid and not self.done.is_set()
