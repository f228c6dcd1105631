"""What only PostgreSQL has, with real worker processes: LISTEN/NOTIFY wake-ups, liveness
locks that are session advisory locks (and their return after a server restart), the
probe's grace, read-only roles and an unreachable server. A whole server that goes away
under working workers (stopped or frozen) is test_postgres_outages.py.

The other files test the rest on SQLite, and on both backends where real processes behave
differently by backend (`on_every_backend`, tests/integration/conftest.py); these tests
run on PostgreSQL only. Tests that stop a server use a `PrivateCluster` of
their own, never the shared server.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit, urlunsplit

import pytest

from heartq.model import DetectedBy, JobStatus, NewJob, WorkerInfo
from heartq.store import open_store
from heartq.store.link import LivenessHandle
from heartq.store.postgres.advisory_locks import (
    LIVENESS_GRACE,
    LIVENESS_RESTART_QUIET,
    LOCK_NAMESPACE,
    PROBE_NAMESPACE,
)
from heartq.store.postgres.session import LastingSession
from heartq.store.postgres.store import PostgresStore
from tests.support import free_port

from .conftest import Harness, WorkerProc, only_on, parse_ts, private_harness

pytestmark = [pytest.mark.slow, only_on("postgres")]

DEFAULTS: dict[str, str | None] = {
    "--heartbeat-interval": None,
    "--lease": None,
    "--reclaim-interval": None,
    "--liveness-interval": None,
}
"""The defaults: 30 s heartbeats, a 90 s lease, 30 s reaps, a 1 s liveness probe."""


def advisory_holders(harness: Harness, worker_id: str) -> list[int]:
    """Backend pids holding `worker_id`'s liveness lock (`pg_advisory_lock(namespace,
    hashtext(id))`: pg_locks shows the two keys as classid and objid, objsubid 2)."""
    rows = harness.sql(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND classid = %s AND objsubid = 2 AND objid = (hashtext(%s)::int8 & 4294967295)::oid",
        (LOCK_NAMESPACE, worker_id),
    )
    return [int(r[0]) for r in rows]


def wait_heartbeat(harness: Harness, worker: WorkerProc) -> None:
    beat = harness.worker_row(worker.id)["last_heartbeat_at"]
    harness.wait_for(
        lambda: harness.worker_row(worker.id)["last_heartbeat_at"] != beat, 5, "a heartbeat"
    )


# -- LISTEN/NOTIFY -------------------------------------------------------------------------
def test_idle_worker_with_a_long_poll_interval_is_woken_by_notify(harness: Harness) -> None:
    """An idle worker sleeps for its poll interval (30 s here) unless woken: a job enqueued
    by another process (this test) reaches it through NOTIFY, within a second (3 s
    allowed for a loaded machine: far from the 30 s poll either way)."""
    worker = harness.start_worker(settings={"--poll-interval": "30"})
    for n in range(3):
        # Idle: its previous claim came back empty and it sleeps (one heartbeat is plenty
        # for that; nothing else of this test wakes it).
        wait_heartbeat(harness, worker)
        sent_at = time.monotonic()
        job_id = harness.enqueue("quick", {"value": n})
        harness.wait_for(lambda j=job_id: harness.started_file(j, 1).exists(), 10, "the job")
        took = time.monotonic() - sent_at
        assert took < 3.0, (n, took)
        done = harness.wait_status(job_id, "succeeded", 10)
        assert done["result"]["worker_id"] == worker.id
        waited = parse_ts(done["executions"][0]["started_at"]) - parse_ts(done["created_at"])
        assert waited < 3.0, (n, waited)  # the same, on the database's clock
    assert worker.alive()


# -- liveness locks ------------------------------------------------------------------------
def test_sigkill_frees_the_session_advisory_lock_and_the_probe_finds_it(
    harness: Harness,
) -> None:
    """At default settings (90 s lease, 30 s reaps) a SIGKILLed worker's job is back in
    a few seconds: its liveness lock is a session advisory lock, which PostgreSQL drops
    when the gone process's connection closes, and the probe finds it in one query. The
    probe believes a free lock once it stayed free for `LIVENESS_GRACE` (a dropped session
    is not a gone process), so that is about the grace plus one probe interval."""
    victim = harness.start_worker(settings=DEFAULTS)
    job_id = harness.enqueue("hold", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "attempt 1 to start")
    assert harness.job(job_id)["worker_id"] == victim.id
    survivor = harness.start_worker(settings=DEFAULTS)

    (holder,) = advisory_holders(harness, victim.id)
    assert holder in {s["pid"] for s in harness.sessions(victim)}  # its own session holds it
    assert len(advisory_holders(harness, survivor.id)) == 1

    killed_at = victim.kill()
    harness.wait_for(
        lambda: harness.job(job_id)["worker_id"] == survivor.id, 10, "the job on the survivor"
    )
    back_after = time.time() - killed_at
    print(f"SIGKILLed worker's job back after {back_after:.2f} s")  # shown with -rP
    # The first probe after the kill (1 s apart, +-10 % jitter), then the grace (3 or 4
    # probes), + slack; the 90 s lease alone would take 90-120 s.
    assert LIVENESS_GRACE <= back_after < LIVENESS_GRACE + 3.0, back_after

    crash = harness.job(job_id)["executions"][0]["crash"]
    assert crash["detected_by"] == "liveness_lock"
    assert crash["worker_id"] == victim.id
    assert parse_ts(crash["detected_at"]) - killed_at < LIVENESS_GRACE + 3.0
    assert harness.worker_row(victim.id)["status"] == "inactive"
    assert not harness.sessions(victim)  # its sessions died with it
    assert not advisory_holders(harness, victim.id)  # the probe's try-lock was let go
    harness.wait_for(lambda: harness.started_file(job_id, 2).exists(), 5, "attempt 2")
    assert advisory_holders(harness, survivor.id)  # the survivor was never suspected
    assert harness.worker_row(survivor.id)["status"] == "active"


def drop_session(harness: Harness, worker: WorkerProc, pid: int) -> None:
    """Terminate one backend of the test's own worker (nothing else of the server)."""
    assert pid in {s["pid"] for s in harness.sessions(worker)}
    assert harness.sql("SELECT pg_terminate_backend(%s)", (pid,)) == [(True,)]
    harness.wait_for(
        lambda: pid not in {s["pid"] for s in harness.sessions(worker)}, 5, "the session to end"
    )


def test_a_living_worker_whose_lock_session_drops_is_not_taken_for_dead(
    harness: Harness,
) -> None:
    """A worker that lives and heartbeats keeps its jobs, even if the session holding its
    liveness lock drops: it must hold its lock again before a probe can take it."""
    settings = {"--heartbeat-interval": "0.2", "--lease": "30", "--reclaim-interval": "10"}
    worker = harness.start_worker(settings=settings)  # liveness probe every 0.2 s
    job_id = harness.enqueue("hold", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "the job to start")
    (holder,) = advisory_holders(harness, worker.id)

    drop_session(harness, worker, holder)

    # An observation window of 8 probe intervals, ended early by the first wrong verdict.
    deadline = time.monotonic() + 1.6
    while time.monotonic() < deadline and not worker.events("worker_deactivated"):
        time.sleep(0.05)
    job = harness.job(job_id)
    assert not worker.events("worker_deactivated", worker_id=worker.id), job
    assert job["status"] == "running" and job["execution_id"] == 1, job
    harness.wait_for(
        lambda: advisory_holders(harness, worker.id), 5, "the worker to hold its lock again"
    )
    assert harness.job(job_id)["execution_id"] == 1
    (lost,) = worker.events("liveness_lock_lost", worker_id=worker.id)
    # The server's own words ("terminating connection due to administrator command"),
    # or psycopg's when the socket closed before they were read (seen beside a CPU
    # burner): either way the event says the session went.
    assert "terminat" in lost["error"] or "connection is lost" in lost["error"], lost
    harness.wait_for(lambda: worker.events("liveness_lock_restored"), 5, "the restored event")
    assert worker.alive()


def test_a_job_whose_end_the_server_lost_is_requeued_once_the_session_is_back(
    harness: Harness,
) -> None:
    """A finish the worker saw acknowledged can be lost with the last commits of a server
    (a standby promoted after asynchronous replication): the job is `running` under a
    living worker that forgot it, and the worker's lease would cover it for as long as
    it lives. Such a job here: one the test claims under the worker's id (its queue the
    worker does not serve). A server that lost commits ended the worker's session, and
    the session coming back makes the next heartbeat sweep: the job is detached and
    requeued by the reaper once its lease runs out (without the sweep, it stays
    `running` as long as the worker lives)."""
    settings = {"--heartbeat-interval": "0.2", "--lease": "2", "--reclaim-interval": "0.2"}
    worker = harness.start_worker(settings=settings)
    wait_heartbeat(harness, worker)
    job_id = harness.enqueue("hold", {"seconds": 1}, queue="elsewhere")
    (forgotten,) = harness.store.claim(worker.id, ["elsewhere"], 1, lease=2.0)
    assert forgotten.id == job_id

    (holder,) = advisory_holders(harness, worker.id)
    drop_session(harness, worker, holder)
    harness.wait_for(lambda: worker.events("liveness_lock_restored"), 10, "the lock back")
    job = harness.wait_status(job_id, "queued", 10)
    (attempt,) = job["executions"]
    assert attempt["outcome"] == "crashed" and attempt["worker_id"] == worker.id, attempt
    assert worker.alive()


def test_notify_wakeups_survive_the_loss_of_the_listen_session(harness: Harness) -> None:
    """LISTEN/NOTIFY keeps waking an idle worker after its LISTEN session drops."""
    worker = harness.start_worker(settings={"--poll-interval": "30"})
    wait_heartbeat(harness, worker)
    (listener,) = advisory_holders(harness, worker.id)  # LISTENs on its lock's session

    drop_session(harness, worker, listener)
    wait_heartbeat(harness, worker)  # the worker itself is fine

    sent_at = time.monotonic()
    job_id = harness.enqueue("quick")
    # Allow a reconnect; the poll interval alone would take 30 s.
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 3, "the wake-up")
    assert time.monotonic() - sent_at < 3.0
    assert worker.alive()


# -- the probe's grace, store by store ------------------------------------------------------
def probe_store(harness: Harness) -> PostgresStore:
    """A store of the test's own on the test's schema."""
    return cast(PostgresStore, open_store(harness.url))


def running(store: PostgresStore, worker_id: str, t: float) -> str:
    """Register `worker_id` and give it one job of its own; returns the job's id."""
    info = WorkerInfo(id=worker_id, hostname="elsewhere", pid=1, queues=(worker_id,),
                      concurrency=1)  # fmt: skip
    store.register_worker(info, now=t)
    (job_id,) = store.enqueue([NewJob(task="hold", args_json="{}", queue=worker_id)], now=t)
    (claimed,) = store.claim(worker_id, [worker_id], 1, 600, now=t)
    assert claimed.id == job_id
    return job_id


def test_the_probe_believes_a_free_lock_only_once_it_stayed_free_for_the_grace(
    harness: Harness,
) -> None:
    """A lock found free is a suspicion: the worker is taken for dead only when its lock is
    still free on a probe `LIVENESS_GRACE` (probe time) after the first, with no probe in
    between finding it held; one found held again is forgotten."""
    store = probe_store(harness)
    handles: list[LivenessHandle] = []
    try:
        store.link.liveness_restart_quiet = 0.0  # whatever the server's uptime
        t0 = float(math.floor(store.clock()))
        jobs = {w: running(store, w, t0) for w in ("gone", "alive", "flappy")}
        handles.append(store.link.liveness_hold("alive"))
        probe = DetectedBy.LIVENESS_LOCK

        assert store.liveness_probe(probe, now=t0) == []
        assert store.liveness_suspects() == {"gone": t0, "flappy": t0}
        flappy = store.link.liveness_hold("flappy")  # back, in time
        assert store.liveness_probe(probe, now=t0 + 1) == []
        assert store.liveness_suspects() == {"gone": t0}
        flappy.close()  # and gone again: freed on the session "alive" still holds
        assert not advisory_holders(harness, "flappy")
        assert advisory_holders(harness, "alive")
        assert store.liveness_probe(probe, now=t0 + LIVENESS_GRACE - 0.5) == []
        assert store.liveness_suspects() == {"gone": t0, "flappy": t0 + LIVENESS_GRACE - 0.5}

        (dead,) = store.liveness_probe(probe, now=t0 + LIVENESS_GRACE)
        assert dead.id == "gone"
        assert [r.job_id for r in dead.reclaimed] == [jobs["gone"]]
        assert store.liveness_suspects() == {"flappy": t0 + LIVENESS_GRACE - 0.5}
        crash = store.get_job(jobs["gone"])["executions"][0]["crash"]
        assert crash["detected_by"] == "liveness_lock" and crash["worker_id"] == "gone"
        statuses = {w: store.get_job(j)["status"] for w, j in jobs.items()}
        assert statuses == {"gone": JobStatus.QUEUED, "alive": JobStatus.RUNNING,
                            "flappy": JobStatus.RUNNING}  # fmt: skip
        workers = {w["id"]: w["status"] for w in store.list_workers(include_all=True)}
        assert workers == {"gone": "inactive", "alive": "active", "flappy": "active"}
    finally:
        for handle in handles:
            handle.close()
        store.link.close()


def test_the_grace_spans_the_probes_of_every_worker_not_one_probers_memory(
    harness: Harness,
) -> None:
    """Probers take turns (one at a time per database), die, freeze and restart: a lock
    free for the whole grace is a gone worker though no single prober watched it all
    along. (The chaos run's gone workers waited for their leases: each new prober began
    the grace again.) Suspicions live in the database, seen by every store instance."""
    first, second = probe_store(harness), probe_store(harness)
    gone, back = f"gone-{harness.schema}", f"back-{harness.schema}"  # lock keys are global
    handles: list[LivenessHandle] = []
    try:
        for store in (first, second):
            store.link.liveness_restart_quiet = 0.0  # whatever the server's uptime
        t0 = float(math.floor(first.clock()))
        jobs = {w: running(first, w, t0) for w in (gone, back)}
        probe = DetectedBy.LIVENESS_LOCK

        assert first.liveness_probe(probe, now=t0) == []
        assert second.liveness_suspects() == {gone: t0, back: t0}
        first.link.close()  # the prober that saw them first is gone
        handles.append(second.link.liveness_hold(back))  # and one of them came back meanwhile
        assert second.liveness_probe(probe, now=t0 + 1) == []
        assert second.liveness_suspects() == {gone: t0}
        handles.pop().close()  # gone again: its grace starts over
        # its session closed with it: the server frees the lock as that backend exits,
        # a moment after the client let go (on a loaded machine, after the next probe)
        harness.wait_for(lambda: not advisory_holders(harness, back), 10, "the lock freed")
        (dead,) = second.liveness_probe(probe, now=t0 + LIVENESS_GRACE)
        assert (dead.id, [r.job_id for r in dead.reclaimed]) == (gone, [jobs[gone]])
        assert second.liveness_suspects() == {back: t0 + LIVENESS_GRACE}
        assert second.get_job(jobs[back])["status"] == JobStatus.RUNNING
    finally:
        for handle in handles:
            handle.close()
        second.link.close()


def test_no_probe_right_after_a_server_start_nor_while_another_probe_runs(
    harness: Harness,
) -> None:
    """A server that started less than `LIVENESS_RESTART_QUIET` ago freed every lock at
    once: no probe then, and what was suspected is forgotten. Nor does a probe run while
    another worker's probe holds the probe lock (each would see the other's try-locks as a
    held lock); it skips its turn and keeps what it suspects."""
    store = probe_store(harness)
    other = harness.pg_connect()
    try:
        t0 = float(math.floor(store.clock()))
        job_id = running(store, "gone", t0)
        probe = DetectedBy.LIVENESS_LOCK
        assert store.link.liveness_restart_quiet == LIVENESS_RESTART_QUIET
        store.link.liveness_restart_quiet = 0.0
        assert store.liveness_probe(probe, now=t0) == []
        assert store.liveness_suspects() == {"gone": t0}

        store.link.liveness_restart_quiet = 1e9  # as if the server had just started
        assert store.liveness_probe(probe, now=t0 + 10) == []
        assert store.liveness_suspects() == {}
        store.link.liveness_restart_quiet = 0.0
        assert store.liveness_probe(probe, now=t0 + 20) == []
        assert store.liveness_suspects() == {"gone": t0 + 20}

        probe_key = (PROBE_NAMESPACE, harness.schema)  # another prober of this queue
        other.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", probe_key)
        assert store.liveness_probe(probe, now=t0 + 30) == []
        assert store.liveness_suspects() == {"gone": t0 + 20}
        assert store.get_job(job_id)["status"] == JobStatus.RUNNING
        other.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", probe_key)
        (dead,) = store.liveness_probe(probe, now=t0 + 30)
        assert (dead.id, [r.job_id for r in dead.reclaimed]) == ("gone", [job_id])
    finally:
        other.close()
        store.link.close()


def test_no_probe_from_a_process_whose_own_lock_session_was_just_reopened(
    harness: Harness,
) -> None:
    """A failover ends every session at once, on a server whose uptime (a promoted
    standby's postmaster) says nothing of it. What a prober does know is its own session:
    while it is down, and for `liveness_restart_quiet` after it was reopened, the process
    does not probe (the others' sessions may be reopening too), and keeps what was
    suspected; afterwards it probes as before."""
    store = probe_store(harness)
    mine, gone = f"mine-{harness.schema}", f"gone-{harness.schema}"  # lock keys are global
    handle = store.link.liveness_hold(mine)
    try:
        store.link.liveness_restart_quiet = 2.0
        probe = DetectedBy.LIVENESS_LOCK
        t0 = float(math.floor(store.clock()))
        job_id = running(store, gone, t0)
        assert store.liveness_probe(probe, now=t0) == []
        assert store.liveness_suspects() == {gone: t0}  # a probe ran: not quiet so far

        (before,) = advisory_holders(harness, mine)
        assert harness.sql("SELECT pg_terminate_backend(%s)", (before,)) == [(True,)]
        harness.wait_for(
            lambda: advisory_holders(harness, mine) not in ([], [before]), 10, "the lock back"
        )
        reopened_at = time.monotonic()
        assert store.liveness_probe(probe, now=t0 + 10) == []  # the grace is long past
        assert store.liveness_suspects() == {gone: t0}
        assert store.get_job(job_id)["status"] == JobStatus.RUNNING

        time.sleep(max(0.0, reopened_at + store.link.liveness_restart_quiet - time.monotonic()))
        (dead,) = store.liveness_probe(probe, now=t0 + 20)
        assert (dead.id, [r.job_id for r in dead.reclaimed]) == (gone, [job_id])
    finally:
        handle.close()
        store.link.close()


# -- read-only roles and unreachable servers ------------------------------------------------
def heartq_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
    return subprocess.run(
        [sys.executable, "-m", "heartq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_an_idle_lasting_session_applies_each_new_listen_at_once(harness: Harness) -> None:
    """The lasting session's thread sleeps until its next ping is due (waking ten times
    a second as well was a third of an idle worker's CPU), so a user's new wish knocks on
    its pipe: ten LISTENs in a row on an idle session take far less than the waits for
    the next ping (up to half a second each) they took without the knock."""
    store = cast(PostgresStore, open_store(harness.url))
    sessions = LastingSession(store.link.pool.connect)
    try:
        session = sessions.get()
        handles = [session.listen("heartq_knock_0", lambda payload: None)]  # opened
        started = time.monotonic()
        for i in range(1, 11):
            handles.append(session.listen(f"heartq_knock_{i}", lambda payload: None))
        elapsed = time.monotonic() - started
        for handle in handles:
            assert handle is not None
            handle.close()
    finally:
        sessions.close()
        store.link.close()
    assert elapsed < 2.0, f"ten LISTENs took {elapsed:.2f} s"


def test_a_connection_lent_for_single_statements_comes_back_transactional(
    harness: Harness,
) -> None:
    """The hot operations (claim, finish, heartbeat, a plain enqueue) borrow a pooled
    connection on which each statement commits by itself (`ConnectionPool.autocommit`); it goes
    back as it came: the next transaction on it is one transaction, rolled back whole."""
    joiner = "&" if "?" in harness.url else "?"
    store = cast(PostgresStore, open_store(f"{harness.url}{joiner}pool_size=1"))
    try:  # one pooled session: the same one both times
        with store.link.pool.autocommit() as conn:
            assert conn.autocommit
            pid = conn.info.backend_pid
        with pytest.raises(RuntimeError), store.link.pool.transaction() as conn:
            assert conn.info.backend_pid == pid and not conn.autocommit
            conn.execute("CREATE TABLE rolled_back (x int)")
            raise RuntimeError("the block fails")
    finally:
        store.link.close()
    assert harness.sql(f"SELECT to_regclass('{harness.schema}.rolled_back')") == [(None,)]


def test_a_read_only_role_can_read_an_up_to_date_schema(harness: Harness) -> None:
    """`migrate()` reads the schema's version first and leaves an up-to-date schema alone
    (no lock, no CREATE): a role that may only read can run `heartq stats`."""
    harness.enqueue("quick")
    role = f"ro_{harness.schema}"
    harness.sql(f"CREATE ROLE {role} LOGIN")
    try:
        harness.sql(f"ALTER ROLE {role} SET default_transaction_read_only = on")
        harness.sql(f"GRANT USAGE ON SCHEMA {harness.schema} TO {role}")
        harness.sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA {harness.schema} TO {role}")
        parts = urlsplit(harness.url)
        url = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[-1]}"))

        done = heartq_cli("stats", "--json", "--url", url)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert '"queued"' in done.stdout, done.stdout
        store = open_store(url)
        try:
            assert store.link.migrate() == cast(PostgresStore, harness.store).link.migrate()
            assert store.count_jobs() == harness.store.count_jobs()
        finally:
            store.link.close()
    finally:
        harness.sql(f"DROP OWNED BY {role}")
        harness.sql(f"DROP ROLE {role}")


def test_an_unreachable_server_is_one_line_with_its_reason(backend: str) -> None:
    """The pool's warning at every connection attempt stays off stderr: the error heartq
    prints is the one line, and it says why (here, nothing listens on the port)."""
    dead_port = free_port()
    done = heartq_cli("stats", "--url", f"postgresql://postgres@127.0.0.1:{dead_port}/x")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot reach PostgreSQL" in lines[0] and "refused" in lines[0], lines


# -- a server restart: liveness locks and NOTIFY come back ---------------------------------
@pytest.mark.long(17)
def test_a_server_restart_takes_no_living_workers_jobs_and_notify_wakes_again(
    backend: str, tmp_path: Path
) -> None:
    """A restart ends every session at once, so every liveness lock is free. The worker
    opens new sessions and takes its lock again, no probe takes it for dead meanwhile (no
    probe in the first `LIVENESS_RESTART_QUIET`, then the grace), and NOTIFY wakes it
    again (its poll interval here is 30 s)."""
    with private_harness(tmp_path) as (harness, cluster):
        settings = {"--heartbeat-interval": "0.2", "--lease": "30", "--reclaim-interval": "10",
                    "--poll-interval": "30"}  # fmt: skip
        worker = harness.start_worker("--concurrency", "4", settings=settings)
        job_id = harness.enqueue("hold", {"seconds": 120})
        harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "the job")
        (before,) = advisory_holders(harness, worker.id)

        cluster.stop("fast")
        cluster.start()
        restarted_at = time.monotonic()
        harness.wait_for(
            lambda: advisory_holders(harness, worker.id), 5, "the worker to hold its lock again"
        )
        assert advisory_holders(harness, worker.id) != [before]
        sent_at = time.monotonic()
        quick = harness.enqueue("quick")
        harness.wait_for(lambda: harness.started_file(quick, 1).exists(), 5, "a wake-up")
        assert time.monotonic() - sent_at < 5.0

        # Past the quiet window and a grace: the probes run again and find the lock held.
        settle = restarted_at + LIVENESS_RESTART_QUIET + LIVENESS_GRACE + 2.0
        while time.monotonic() < settle and not worker.events("worker_deactivated"):
            time.sleep(0.1)
        assert not worker.events("worker_deactivated"), harness.job(job_id)
        job = harness.job(job_id)
        assert (job["status"], job["execution_id"]) == ("running", 1), job
        assert worker.events("liveness_lock_lost") and worker.events("liveness_lock_restored")
        assert worker.alive()
