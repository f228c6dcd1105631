"""What only PostgreSQL has, with real worker processes: a whole server that goes away
under working workers, stopped (connections reset, new ones refused) or frozen (every
server process SIGSTOPped: statements and connection attempts hang). The pool reaches a
server back from a long outage at once; a worker fences itself before its lease runs
out and gives its attempts back uncounted; a task's transaction that meets a stopped
server spends no retry; a frozen server is not a dead fleet.

Each test stops a `PrivateCluster` of its own (`private_harness`), never the shared
server; a server restart under a worker's liveness lock is test_postgres.py. What an
outage looks like on either backend (row locks, the file's write lock) is
test_self_fencing.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from heartq.errors import StoreUnavailable
from heartq.model import JobStatus
from heartq.store import open_store
from tests import pg_harness

from .conftest import only_on, parse_ts, private_harness

pytestmark = [pytest.mark.slow, only_on("postgres")]

LONG_OUTAGE = 10.0


def test_the_pool_reaches_a_server_back_from_a_long_outage_at_once(backend: str) -> None:
    """After an outage of any length (a failover, a restart), the pool connects again
    within about a second of the server's return. psycopg_pool alone retries a lost
    connection at 1, 3, 7, 15 ... s: a server back after 10 s was reached 3.5-4 s later
    (`POOL_RECONNECT_WINDOW`)."""
    cluster = pg_harness.PrivateCluster()
    store = open_store(f"{cluster.url}?schema=heartq_pool")
    try:
        store.link.migrate()
        cluster.stop("immediate")
        down_at = time.monotonic()
        while time.monotonic() < down_at + LONG_OUTAGE:  # callers meet the outage meanwhile
            with contextlib.suppress(StoreUnavailable):
                store.count_jobs()
            time.sleep(0.2)
        cluster.start()
        back_at = time.monotonic()
        while True:
            try:
                store.count_jobs()
                break
            except StoreUnavailable:
                assert time.monotonic() - back_at < 30, "the pool never came back"
        took = time.monotonic() - back_at
        print(f"the pool reached the server {took:.2f} s after it was back")
        assert took < 2.0, took
    finally:
        store.link.close()
        cluster.close()


SETTINGS = {"--heartbeat-interval": "0.2", "--lease": "1.2"}
TRUST_WINDOW = 1.2 - 1.2 / 6
OUTAGE = 2.5


def server_pids(cluster: pg_harness.PrivateCluster) -> list[int]:
    """The postmaster and every process it forked (backends, checkpointer, ...)."""
    postmaster = cluster.postmaster_pid()
    found = [postmaster]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == postmaster:
                found.append(int(entry.name))
    return found


@contextlib.contextmanager
def outage(cluster: pg_harness.PrivateCluster, how: str) -> Iterator[None]:
    """`down`: the server stops (connections reset, new ones refused); `frozen`: every
    server process is SIGSTOPped (statements and connection attempts hang)."""
    if how == "down":
        cluster.stop("immediate")
        try:
            yield
        finally:
            cluster.start()
        return
    frozen = server_pids(cluster)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


ISSUE_SETTINGS = {"--heartbeat-interval": "0.3", "--lease": "1.5", "--reclaim-interval": "0.3"}
"""The fast settings a user tried the freeze with: stale after 0.9 s, trust window 1.25 s."""
FREEZE = 4.0


def test_a_frozen_server_is_not_a_dead_fleet(backend: str, tmp_path: Path) -> None:
    """The whole server SIGSTOPped for 4 s (past every lease and staleness threshold)
    under two live workers: when it resumes, no worker marks the other inactive, and the
    attempts the workers gave up while they could not reach it are not counted against
    the jobs' retries: every `max_retries=0` job succeeds."""
    with private_harness(tmp_path) as (harness, cluster):
        workers = [
            harness.start_worker("--concurrency", "4", settings=ISSUE_SETTINGS) for _ in range(2)
        ]
        jobs = [harness.enqueue("hold", {"seconds": 1.5}, max_retries=0) for _ in range(16)]
        harness.wait_for(
            lambda: sum(harness.started_file(j, 1).exists() for j in jobs) >= 8,
            15,
            "both workers to be busy",
        )
        with outage(cluster, "frozen"):
            frozen_at = time.monotonic()
            harness.wait_for(
                lambda: all(w.events("leases_untrusted") for w in workers),
                FREEZE,
                "both workers to stop trusting their leases",
            )
            time.sleep(max(0.0, frozen_at + FREEZE - time.monotonic()))  # the freeze's length

        ended = [harness.wait_job(j, lambda x: x["finished_at"], 60, "its end") for j in jobs]
        assert {j["status"] for j in ended} == {JobStatus.SUCCEEDED}, [
            (j["id"], j["status"], j["dead_reason"]) for j in ended if j["status"] != "succeeded"
        ]
        outcomes = {e["outcome"] for j in ended for e in j["executions"]}
        assert outcomes <= {"succeeded", "interrupted"}, outcomes
        assert "interrupted" in outcomes  # the freeze did interrupt running attempts
        for w in workers:
            assert w.alive()
            assert not w.events("worker_deactivated"), w.events("worker_deactivated")
            assert harness.worker_row(w.id)["status"] == "active"


@pytest.mark.parametrize("how", ["down", "frozen"])
def test_worker_fences_itself_when_the_server_goes_away(
    backend: str, tmp_path: Path, how: str
) -> None:
    """A worker that cannot reach the server at all stops trusting its lease before the
    lease expires (DB time), reports nothing of that attempt, and once the server is back
    the job is reclaimed and completed by a new attempt."""
    with private_harness(tmp_path) as (harness, cluster):
        worker = harness.start_worker("--concurrency", "2", settings=SETTINGS)
        # No retries to spare: the outage must not spend any (the interrupted attempt is
        # not counted; a claim that waited out the outage is trusted from when its
        # statement went to the server, not from before its wait for a connection).
        job_id = harness.enqueue("hold_first", {"seconds": 120}, max_retries=0)
        harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "attempt 1")
        harness.wait_job(job_id, lambda j: j["heartbeat_at"] != j["started_at"], 5, "a renewal")

        with outage(cluster, how):
            cut_at = time.monotonic()
            untrusted = harness.wait_for(
                lambda: worker.job_events("leases_untrusted", job_id),
                OUTAGE,
                "leases_untrusted while the server is away",
            )[0]
            assert time.monotonic() < cut_at + OUTAGE
            assert untrusted["trust_window"] == pytest.approx(TRUST_WINDOW)
            time.sleep(max(0.0, cut_at + OUTAGE - time.monotonic()))  # the outage's length

        done = harness.wait_status(job_id, "succeeded", 20)
        first = done["executions"][0]
        assert first["execution_id"] == 1
        # given back once the server answered, never reported by the fenced attempt, and
        # not counted against the job's retries: the database failed it, not the job
        assert first["outcome"] == "interrupted", done["executions"]
        if how == "down":
            # No renewal of attempt 1 landed after the stop (the sessions died with the
            # server and the worker never renewed it again), so the lease its reclaim read
            # is the last one: the worker gave the job up before it ran out (DB time).
            expiry = parse_ts(first["crash"]["lease_expires_at"])
            assert parse_ts(untrusted["ts"]) < expiry, (untrusted, first["crash"])
        assert done["executions"][-1]["outcome"] == "succeeded"
        assert done["result"]["execution_id"] > 1 and done["attempts"] == done["result"]["attempt"]
        # the event is logged once the finish returned, a moment after the row shows it
        succeeded = harness.wait_for(
            lambda: worker.job_events("job_succeeded", job_id), 5, "job_succeeded"
        )
        assert not [e for e in succeeded if e["execution_id"] == 1]
        assert worker.job_events("lease_lost", job_id)
        assert worker.alive()
        following = harness.enqueue("quick")  # and it works on as before
        assert harness.wait_status(following, "succeeded", 10)["result"]["worker_id"] == worker.id


@pytest.mark.long(10)
@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_task_whose_transaction_cannot_reach_the_server_spends_no_retry(
    backend: str, tmp_path: Path, pool: str
) -> None:
    """A task's `ctx.transaction()` meets a stopped server (a restart, a failover): its
    `StoreUnavailable` is the database's fault, not the job's. The attempt is given back
    `interrupted` (not counted: the job has `max_retries=0`) once the server answers,
    within seconds, not at the next regular heartbeat (60 s here), and the next attempt
    writes the effect once."""
    with private_harness(tmp_path) as (harness, cluster):
        table = f"{harness.schema}.ledger"
        harness.sql(f"CREATE TABLE {table} (job_id text NOT NULL, execution_id integer NOT NULL)")
        settings = {"--heartbeat-interval": "60", "--lease": "180", "--reclaim-interval": "60"}
        worker = harness.start_worker("--pool", pool, settings=settings)
        job_id = harness.enqueue("ledger_write", {"table": table, "wait_first": True},
                                 max_retries=0)  # fmt: skip
        harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 20, "attempt 1")
        cluster.stop("immediate")
        try:
            harness.path(f"go-{job_id}").touch()  # its transaction now meets no server
            harness.wait_for(
                lambda: worker.job_events("lease_lost", job_id), 30, "the attempt given up"
            )
        finally:
            cluster.start()
        back_at = time.monotonic()
        # the result lands just after the commit that succeeded the job: wait for both
        done = harness.wait_job(job_id, lambda j: j["result"], 40, "its result")
        assert [e["outcome"] for e in done["executions"]] == ["interrupted", "succeeded"], done
        crash = done["executions"][0]["crash"]
        assert crash["detected_by"] == "self_fence", crash
        assert crash["reason"] == "its task could not reach the queue's database", crash
        assert done["attempts"] == 1 and done["result"]["attempt"] == 1, done
        requeued = worker.job_events("job_reclaimed", job_id)
        assert requeued and time.monotonic() - back_at < 30.0  # the next heartbeat: ~60 s
        assert harness.sql(f"SELECT execution_id FROM {table}") == [(2,)]
        assert not worker.job_events("job_failed", job_id)

