"""A worker whose every session the server ended while the server stays up
(`pg_terminate_backend`: an administrator clearing a role's sessions, a pooler or a
proxy recycling them): the next job starts within a second, measured from the
termination to the job's code running, through a real worker process.

Two ways the sessions can be found dead, each of which cost seconds:

- idle in the pool: psycopg_pool, checking each connection on its way out, waited
  longer after each dead one (nothing, then 1 s, 2 s ...), so 2 pooled connections cost
  about a second and 4 or more "no connection within 5 s", then the claim's retry
  pause (`store/postgres/checkout.py`);
- under a claim in flight: the failed claim paused a second (`CLAIM_RETRY_DELAY`), then
  slept the poll interval unless woken (`worker/claimer.py`).

And one race under both: a session the server is ending may not have said so yet (its
process is signalled at once, and writes its last words when next scheduled), so the
claim tried again at once could be handed another connection about to fail. Once one
connection of a pool is found dead, the others idle since are checked with a round trip
(the last test: a backend of a private cluster of the test's own held stopped, so that it
has surely not spoken yet).

Only the test's own worker's sessions are terminated, found by the `application_name`
the harness gave its process (unique to the test's schema).
"""

from __future__ import annotations

import contextlib
import os
import signal
import textwrap
import threading
import time
from typing import Any, cast

import psycopg
import pytest

from heartq.errors import StoreUnavailable
from heartq.model import NewJob
from heartq.store import open_store
from heartq.store.postgres.queries import CLAIM_IN_ORDER, KEYED_QUEUED
from heartq.store.postgres.store import PostgresStore
from tests import pg_harness
from tests.support import wait_for

from .conftest import Harness, WorkerProc, only_on
from .worker_tasks import TASKS_SOURCE

pytestmark = [pytest.mark.slow, only_on("postgres")]

NEXT_JOB_WITHIN = 1.0
"""Seconds from the termination to the next job's code running. Measured here: 0.03-0.15 s
(a connection opened, a claim). Before: 7.1 s with 8 idle pooled connections, 1.06 s
with a claim in flight."""

DEFAULTS: dict[str, str | None] = {
    "--heartbeat-interval": None,
    "--lease": None,
    "--reclaim-interval": None,
    "--liveness-interval": None,
    "--poll-interval": None,
}
"""heartq's defaults (a 1 s poll: an idle worker is woken by NOTIFY), what a user meets."""

TRANSACTION_TASKS = TASKS_SOURCE + textwrap.dedent(
    '''

    @app.task
    def transaction_until_go(ctx):
        """Holds a `ctx.transaction()` (one of its worker's pooled connections) open
        until the file `go` exists."""
        with ctx.transaction():
            mark(f"in-transaction-{ctx.job_id}")
            while not (HERE / "go").exists():
                time.sleep(0.02)
        return ident(ctx)
    '''
)


def terminate_sessions(harness: Harness, worker: WorkerProc) -> tuple[int, float]:
    """`pg_terminate_backend` on every session of `worker` (and nothing else): how many,
    and when (wall clock, as the tasks' files are stamped). The worker is stopped
    (SIGSTOP) meanwhile, so that it meets all its sessions ended at once: the server
    ends them one after another, and a worker that runs in between (a loaded machine
    descheduled the statement between two) retries its failed claim on a session ended
    just after, fails twice and pauses, which is what it should do when its sessions
    keep failing, not what these tests are about. Each termination is waited for (up to
    5 s), so every session has ended before the worker goes on."""
    name = harness.app_name(harness.workers.index(worker))
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        with harness.pg_connect() as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000))"
                " FROM pg_stat_activity"
                " WHERE application_name = %s",
                (name,),
            ).fetchone()
            at = time.time()
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    assert row is not None
    return int(row[0]), at


def opening(statement: str) -> str:
    """`statement`'s text as `pg_stat_activity.query` begins with it: up to its first
    parameter (psycopg sends `$1` for `%(name)s`), which comes well within the column's
    1,024 bytes (`track_activity_query_size`)."""
    return statement[: statement.index("%")]


CLAIM_STATEMENTS = (opening(CLAIM_IN_ORDER), opening(KEYED_QUEUED))
"""The statements of an idle worker's claim (one queue, no fairness key, nothing
running), in order: the claim proper (in order), then, since it filled fewer than its
limit, the check for keyed jobs (`store/sql/keyed.py`), each a round trip of its own. A
lock taken between the two holds the claim at the second: under load (8-20) 3 lock
moments in 80 did, and a wait for the first alone timed out after 10 s. Their openings,
not `WITH snap AS MATERIALIZED` alone, which the vacuum service's `IDLE_LANES` and
`DELETE_EMPTY_LANES` open with too."""


def claim_waiting(harness: Harness, worker: WorkerProc) -> bool:
    """Whether one of `worker`'s sessions runs a statement of its claim
    (`CLAIM_STATEMENTS`) and waits for a lock."""
    return any(
        s["state"] == "active"
        and s["wait_event_type"] == "Lock"
        and s["query"].startswith(CLAIM_STATEMENTS)
        for s in harness.sessions(worker)
    )


def started_after(harness: Harness, job_id: str, since: float) -> float:
    """Seconds from `since` (wall clock) until attempt 1 of `job_id` started its code."""
    started = harness.started_file(job_id, 1)
    harness.wait_for(started.exists, 30, f"job {job_id} to start")
    return started.stat().st_mtime - since


def test_a_worker_whose_idle_connections_were_terminated_starts_the_next_job_at_once(
    harness: Harness,
) -> None:
    """A worker of 8 pooled connections (`pool_size=8`), idle in its pool when the
    server ends them: the next job enqueued starts within `NEXT_JOB_WITHIN`, not after
    "no connection within 5 s", the claim's retry pause and the poll (7.1 s before)."""
    harness.path("tasks.py").write_text(TRANSACTION_TASKS)
    worker = harness.start_worker(
        "--concurrency", "8", settings=DEFAULTS, url=f"{harness.url}&pool_size=8"
    )
    held = [harness.enqueue("transaction_until_go") for _ in range(8)]
    harness.wait_for(  # 8 pooled connections out at once: the pool grew to 8
        lambda: all(harness.path(f"in-transaction-{j}").exists() for j in held),
        20,
        "8 transactions open at once",
    )
    harness.path("go").write_text("")
    harness.wait_for(
        lambda: all(harness.job(j)["status"] == "succeeded" for j in held), 20, "the 8 jobs"
    )
    # The lasting session and 6 or more pooled (an idle pool lets one go every 5 s).
    assert len(harness.sessions(worker)) >= 7

    count, terminated_at = terminate_sessions(harness, worker)
    assert count >= 7, count
    job_id = harness.enqueue("quick")
    took = started_after(harness, job_id, terminated_at)
    print(f"{count} sessions terminated: the next job started {took:.3f} s later")
    assert took < NEXT_JOB_WITHIN, f"{took:.3f} s:\n{worker.log_tail()}"  # str: not elided
    assert not worker.events("store_unavailable", part="claim")
    # psycopg_pool's warning for each dead connection is not among the JSON events.
    assert "discarding closed connection" not in worker.log_text()
    harness.wait_for(lambda: worker.events("liveness_lock_restored"), 5, "the lock back")
    assert worker.alive()


def test_a_worker_whose_claim_was_terminated_in_flight_claims_again_at_once(
    harness: Harness,
) -> None:
    """The server ends the worker's sessions while its claim runs (held here by the
    test's lock on the jobs table, so that it is surely in flight): the claim fails
    with the server's reason, and the next one goes at once. The job the test
    enqueued in the lock's transaction starts within `NEXT_JOB_WITHIN` of the
    termination, not after the claim's retry pause and the poll interval."""
    worker = harness.start_worker(settings=DEFAULTS)
    warm = harness.enqueue("quick")  # the worker has claimed and finished once
    harness.wait_status(warm, "succeeded", 10)
    with harness.pg_connect(autocommit=False) as lock:
        lock.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        harness.wait_for(  # its next poll's claim (or the one under way) waits behind it
            lambda: claim_waiting(harness, worker),
            10,
            "a claim waiting for the lock",
            lambda: harness.sessions(worker),
        )
        count, terminated_at = terminate_sessions(harness, worker)
        (job_id,) = harness.store.enqueue(
            [NewJob(task="quick", args_json="{}", queue="default")], connection=lock
        )
        harness.wait_for(lambda: worker.events("claim_failed"), 5, "the claim's failure")
        lock.commit()  # the job and the table at once
    took = started_after(harness, job_id, terminated_at)
    print(f"claim terminated in flight ({count} sessions): the next job {took:.3f} s later")
    assert took < NEXT_JOB_WITHIN, f"{took:.3f} s:\n{worker.log_tail()}"  # str: not elided
    (failed,) = worker.events("claim_failed")[:1]
    assert "terminating connection" in failed["error"], failed
    assert worker.alive()


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
    assert row is not None
    return int(row["pid"])


@pytest.mark.parametrize("found", ["at its check", "in use", "in use, still open"])
def test_once_a_pooled_connection_is_found_dead_the_others_are_checked_before_use(
    backend: str, found: str
) -> None:
    """Two pooled connections, both used just now, their sessions ended by the server;
    the backend of one (`quiet`) is held stopped, so it has not said so yet. The other
    one is found dead first, at its check (it had the server's last words on its
    socket) or in use (taken before the server ended it): closed by then, or, as libpq
    may leave it for a moment after handing over the server's last words, still open
    (`still open`: the error raised while it is). The next caller is not handed `quiet`
    unchecked, to fail as soon as its backend runs: its round trip meets the end, and
    the caller gets a new connection."""
    cluster = pg_harness.PrivateCluster()
    store = cast(PostgresStore, open_store(f"{cluster.url}?schema=heartq_pool&pool_size=2"))
    quiet_pid = 0
    try:
        pool = store.link.pool
        with pool.transaction() as quiet_conn:
            quiet_pid = backend_pid(quiet_conn)
            with pool.transaction() as other_conn:  # the pool grows to its second
                other_pid = backend_pid(other_conn)
        # In the pool now: `other` (given back first, so handed out first), `quiet`.
        os.kill(quiet_pid, signal.SIGSTOP)
        with psycopg.connect(cluster.url, autocommit=True) as admin:

            def end_both() -> None:
                for pid in (other_pid, quiet_pid):
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                wait_for(
                    lambda: not admin.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (other_pid,)
                    ).fetchall(),
                    5,
                    "the other session to end",
                )

            if found == "in use":
                with pytest.raises(StoreUnavailable), pool.transaction() as conn:
                    assert conn.pgconn.backend_pid == other_pid
                    end_both()
                    conn.execute("SELECT 1")
            elif found == "in use, still open":
                with pytest.raises(StoreUnavailable), pool.transaction() as conn:
                    assert conn.pgconn.backend_pid == other_pid
                    end_both()
                    assert not conn.closed  # nothing read since: it looks open
                    raise psycopg.errors.AdminShutdown("terminating connection")
            else:
                end_both()
            threading.Timer(0.5, os.kill, (quiet_pid, signal.SIGCONT)).start()
            with pool.transaction() as conn:
                assert backend_pid(conn) not in (quiet_pid, other_pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            if quiet_pid:
                os.kill(quiet_pid, signal.SIGCONT)
        store.link.close()
        cluster.close()
