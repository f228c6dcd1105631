"""Workers, enqueuers and `heartq` commands through a real PgBouncer in transaction mode
(Debian's `pgbouncer`, started by each test on a free port: `tests/pgbouncer_harness.py`),
with `?pooler=transaction` (`store/postgres/pooler.py`).

What a transaction-mode pool takes away, and what the tests hold heartq to instead:

- server-side prepared statements (`DuplicatePreparedStatement`, the failure this mode
  fixes: reproduced with plain psycopg first);
- the session advisory lock: a worker is judged by its heartbeats and leases alone, so a
  SIGKILLed worker's jobs come back after its stale threshold plus a reclaim interval
  (measured), and a live worker is never taken for dead while many workers share fewer
  server sessions than they are;
- LISTEN: idle workers poll, the pulse reads cancels, `App.result` re-reads;
- unless a direct URL gives the worker its session back: lock and LISTEN there, every
  statement still through the pooler;
- a worker says at startup how long its death would go unseen (`recovery_within`);
- without `?pooler=transaction`, what only such a pooler answers (its startup options
  dropped, prepared statements on the wrong server session) is one line naming it.

The test's own reads and checks (`harness.sql`) go straight to the server; its enqueues
and `Store` reads go through the pooler, as a producer's would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import psycopg
import pytest

import heartq
from heartq.errors import JobNotFound, StoreRefused
from heartq.model import CancelResult, NewJob
from heartq.store import open_store
from heartq.store.postgres.connection import parse_url
from tests import pg_harness
from tests.pgbouncer_harness import PgBouncer, pgbouncer

from .conftest import Harness, WorkerProc, only_on, parse_ts

pytestmark = [pytest.mark.slow, only_on("postgres")]

POOLED: dict[str, str | None] = {
    "--heartbeat-interval": "0.5",
    "--lease": "2",
    "--reclaim-interval": "0.5",
    "--liveness-interval": "0.2",
    "--poll-interval": "0.1",
}
"""Without a lock, a gone worker is found by its silence: stale after 2 s (the lease; 4
heartbeats), looked for every 0.5 s. Trust window 1.67 s."""

STEADY_POOLED: dict[str, str | None] = {**POOLED, "--lease": "4"}
"""POOLED with a 4 s lease (stale after 4 s, trust window 3.3 s), for the test that must
never take a live worker for dead: a margin a loaded 2-core machine does not eat."""

QUIET_EVENTS = (
    "worker_deactivated",
    "reclaim_detected",
    "lease_lost",
    "leases_untrusted",
    "heartbeat_failed",
    "job_reclaimed",
)
"""Events that would mean a live worker was taken for dead, or nearly."""


class Pooled:
    """A harness whose workers and store go through PgBouncer, and the bouncer."""

    def __init__(self, harness: Harness, bouncer: PgBouncer, server: str, direct: str) -> None:
        self.harness = harness
        self.bouncer = bouncer
        self.server = server
        """The server's URL (no schema): what a direct URL names."""
        self.direct = direct
        """The test schema's URL on the server, bypassing the pooler."""


@pytest.fixture
def pooled(backend: str, pg_server_url: str, tmp_path: Path) -> Iterator[Pooled]:
    """A fresh schema, a PgBouncer (transaction mode, 2 server sessions) in front of its
    server, and a `Harness` whose workers use `?pooler=transaction` through it."""
    with (
        pg_harness.schema_url(pg_server_url) as direct,
        pgbouncer(pg_server_url, pool_size=2) as bouncer,
    ):
        harness = Harness(tmp_path, "postgres", bouncer.url(of=direct, pooler="transaction"))
        harness.pg_conninfo = parse_url(direct)[0]  # the test's own checks: straight there
        try:
            yield Pooled(harness, bouncer, pg_server_url, direct)
        finally:
            harness.close()


def held_session_locks(harness: Harness) -> int:
    """How many of the schema's workers have their liveness lock held right now (a
    session advisory lock `(LOCK_NAMESPACE, hashtext(id))`: pg_locks shows the keys as
    classid and objid, objsubid 2)."""
    from heartq.store.postgres.advisory_locks import LOCK_NAMESPACE

    rows = harness.sql(
        "SELECT count(*) FROM workers AS w JOIN pg_locks AS l"
        " ON l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objsubid = 2"
        " AND l.objid = (hashtext(w.id)::int8 & 4294967295)::oid"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (LOCK_NAMESPACE,),
    )
    return int(rows[0][0])


def assert_quiet(workers: list[WorkerProc]) -> None:
    for worker in workers:
        for name in QUIET_EVENTS:
            assert worker.events(name) == [], (name, worker.events(name)[:3])


# -- the failure this mode fixes -----------------------------------------------------------
def test_prepared_statements_broke_through_the_pooler_and_no_longer_do(
    pooled: Pooled,
) -> None:
    """psycopg prepares a statement it ran 5 times on its server session (`_pg3_0`); with
    one server session shared by two clients, the other client's next preparation finds
    it there: `DuplicatePreparedStatement`, as workers met it. heartq's connections in
    this mode prepare nothing: two stores sharing that one session run the same
    statements 60 times each, alternately, without an error, each transaction with
    heartq's settings. And heartq's usual startup options are refused by the pooler:
    without the mode it says at once what to set."""
    with pgbouncer(pooled.server, pool_size=1) as single:
        database = urlsplit(pooled.direct).path.lstrip("/")
        plain = [psycopg.connect(single.url(database), autocommit=True) for _ in range(2)]
        try:
            with pytest.raises(
                (psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName)
            ):
                for n in range(10):
                    for conn in plain:
                        conn.execute("SELECT %s::int + 1", (n,)).fetchone()
        finally:
            for conn in plain:
                conn.close()

        url = single.url(of=pooled.direct)
        with pytest.raises(StoreRefused, match=r"pooler=transaction"):
            open_store(url).link.reach()
        stores = [open_store(f"{url}&pooler=transaction") for _ in range(2)]
        try:
            for store in stores:
                store.link.migrate()
            job_ids = []
            for n in range(60):
                for k, store in enumerate(stores):
                    (job_id,) = store.enqueue([_job({"value": n})])
                    job_ids.append(job_id)
                    assert store.get_job(job_id)["status"] == "queued"
                    assert store.claim(f"w{k}", ["default"], 1, 30)
            assert len(set(job_ids)) == 120
            # Each transaction sets what a direct session's startup options would: the
            # planner's settings too (docs/design/claim.md, "Plans that cannot turn").
            with stores[0].link.pool.transaction() as conn:
                row = conn.execute(
                    "SELECT current_setting('jit') AS jit, current_setting('enable_seqscan')"
                    " AS seqscan, current_setting('enable_bitmapscan') AS bitmapscan"
                ).fetchone()
            assert row == {"jit": "off", "seqscan": "off", "bitmapscan": "off"}, row
        finally:
            for store in stores:
                store.link.close()


def _one_line_naming_the_setting(text: str) -> None:
    assert "?pooler=transaction" in text, text
    assert "\n" not in text.strip(), text
    assert "Traceback" not in text and "psycopg" not in text, text


def _heartq_cli(pooled: Pooled, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "heartq", *args],
        cwd=pooled.harness.dir,
        env=pooled.harness.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_the_setting_a_pooler_that_drops_heartq_s_options_is_named(
    pooled: Pooled,
) -> None:
    """A PgBouncer told to ignore heartq's startup options (`ignore_startup_parameters =
    options`, as hosted poolers are) lets heartq connect without its schema on the search
    path: it ran as the role's own (`relation "jobs" does not exist`, raw). Checked at the
    first connection now: the App, a command and a worker each say, in one line, to set
    `?pooler=transaction`; with it, the same pooler works."""
    harness = pooled.harness
    job_id = harness.enqueue("quick", {"value": 1})
    with pgbouncer(pooled.server, settings={"ignore_startup_parameters": "options"}) as lax:
        url = lax.url(of=pooled.direct)
        app = heartq.App(url)
        try:
            with pytest.raises(StoreRefused) as raised:
                app.get_job(job_id)
        finally:
            app.close()
        _one_line_naming_the_setting(str(raised.value))
        assert "search_path" in str(raised.value)

        shown = _heartq_cli(pooled, "jobs", "show", job_id, "--url", url)
        assert shown.returncode == 1, shown
        _one_line_naming_the_setting(shown.stderr)

        worker = harness.start_worker(settings=POOLED, url=url, wait=False)
        assert worker.wait_exit(30) == 1
        _one_line_naming_the_setting(worker.log_text().strip().splitlines()[-1])

        app = heartq.App(f"{url}&pooler=transaction")
        try:
            assert app.get_job(job_id)["id"] == job_id
        finally:
            app.close()


def test_without_the_setting_prepared_statements_on_another_session_name_it(
    pooled: Pooled,
) -> None:
    """Where the startup options look applied anyway (the pooler's operator sets the
    search path on every server session: PgBouncer's `connect_query` here; or the role's
    own settings), heartq ran on and met psycopg's prepared statements on the wrong server
    session: a raw `DuplicatePreparedStatement: prepared statement "_pg3_0" already
    exists`, or `InvalidSqlStatementName`. Now `StoreRefused` says in one line to set
    `?pooler=transaction`, from the App API, and from a worker's log (a
    `store_unavailable` of reason `pooler`)."""
    harness = pooled.harness
    job_id = harness.enqueue("quick", {"value": 1})
    scope = (
        f"SELECT set_config('search_path', '{harness.schema}', false), "
        "set_config('idle_in_transaction_session_timeout', '10000', false)"
    )
    with pgbouncer(
        pooled.server,
        pool_size=1,
        settings={"ignore_startup_parameters": "options"},
        connect_query=scope,
    ) as lax:
        url = lax.url(of=pooled.direct)
        apps = [heartq.App(url) for _ in range(2)]
        try:
            with pytest.raises(StoreRefused) as raised:
                for _ in range(40):  # psycopg prepares a statement at its 5th run
                    for app in apps:
                        assert app.get_job(job_id)["id"] == job_id
        finally:
            for app in apps:
                app.close()
        _one_line_naming_the_setting(str(raised.value))
        assert '"_pg3_' in str(raised.value)

        worker = harness.start_worker(settings=POOLED, url=url)
        peer = harness.start_worker(settings=POOLED, url=url)
        harness.wait_for(
            lambda: worker.events("store_unavailable") or peer.events("store_unavailable"),
            30,
            "a worker's store_unavailable",
        )
        (told, *_) = worker.events("store_unavailable") or peer.events("store_unavailable")
        assert told["reason"] == "pooler", told
        _one_line_naming_the_setting(told["error"])
        for each in (worker, peer):
            assert "DuplicatePreparedStatement" not in each.log_text()
            assert "Traceback" not in each.log_text()


def _job(args: dict[str, Any], queue: str = "default") -> NewJob:
    return NewJob(task="quick", args_json=json.dumps(args), queue=queue)


# -- workers ---------------------------------------------------------------------------------
def test_jobs_run_through_the_pooler_on_several_workers(pooled: Pooled) -> None:
    """Three workers (up to 2 connections each) share the pooler's 2 server sessions:
    every job runs once and succeeds, on more than one worker; no worker holds a session
    advisory lock, each says it is judged by heartbeats and polls. Each job holds its slot
    a quarter of a second, so no one worker can take them all (with jobs that returned at
    once, one worker that happened to poll first ran all 40 on a loaded machine)."""
    harness = pooled.harness
    workers = [harness.start_worker(settings=POOLED) for _ in range(3)]
    for worker in workers:
        (started,) = worker.events("worker_started")
        assert (started["liveness"], started["wakeups"]) == ("heartbeats", "poll")
        assert started["recovery_within"] == 2.0 + 0.5  # stale after 2 s, reaps every 0.5
    job_ids = [harness.enqueue("hold", {"seconds": 0.25}) for _ in range(40)]
    for job_id in job_ids:
        done = harness.wait_status(job_id, "succeeded", 30)
        assert len(done["executions"]) == 1
        assert done["result"]["job_id"] == job_id
    ran_on = {harness.job(j)["worker_id"] for j in job_ids}
    assert len(ran_on) >= 2, ran_on
    assert held_session_locks(harness) == 0
    rows = harness.sql("SELECT liveness_lock FROM workers")
    assert [r[0] for r in rows] == [False] * 3
    assert all(w.alive() for w in workers)
    assert_quiet(workers)
    pools = [p for p in pooled.bouncer.show("POOLS") if p["database"] != "pgbouncer"]
    assert sum(p["sv_active"] + p["sv_idle"] + p["sv_used"] for p in pools) <= 2


def test_a_sigkilled_worker_s_jobs_come_back_after_its_stale_threshold(
    pooled: Pooled,
) -> None:
    """No lock tells that a pooled worker died: its jobs come back once it has been
    silent past its stale threshold (2 s here: the lease) and a peer's monitor looks
    (every reclaim interval, 0.5 s): about 2 to 2.5 s after its last heartbeat, found as
    `stale_worker` (or its lease, at the same moment)."""
    harness = pooled.harness
    victim = harness.start_worker(settings=POOLED)
    job_id = harness.enqueue("hold", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 15, "attempt 1")
    survivor = harness.start_worker(settings=POOLED)
    killed_at = victim.kill()
    back = harness.wait_job(
        job_id, lambda j: j["worker_id"] == survivor.id, 15, "the job on the survivor"
    )
    recovered_after = time.time() - killed_at
    crash = back["executions"][0]["crash"]
    silent_for = parse_ts(crash["detected_at"]) - parse_ts(crash["last_heartbeat_at"])
    print(  # shown with -rP: the figure OPERATIONS.md quotes
        f"pooled worker SIGKILLed: job back after {recovered_after:.2f} s, detected "
        f"{silent_for:.2f} s after its last heartbeat ({crash['detected_by']})"
    )
    assert crash["detected_by"] in ("stale_worker", "lease_expired")
    assert silent_for >= 2.0, silent_for  # never before its threshold
    assert silent_for < 2.0 + 0.5 + 5.0, silent_for  # + slack for a loaded machine
    assert recovered_after < 2.0 + 0.5 + 7.0, recovered_after
    assert harness.wait_status(job_id, "running", 5)["attempts"] == 2


DEFAULT_TIMINGS: dict[str, str | None] = dict.fromkeys(POOLED)
"""Every timing option dropped: heartq's defaults (30 s heartbeat, 90 s lease and stale
threshold, 30 s reaps, 1 s probes and polls)."""


def test_a_pooled_worker_tells_at_startup_how_long_its_death_would_go_unseen(
    pooled: Pooled,
) -> None:
    """At the default timings a pooled worker without a direct URL holds no lock, so a
    death of its process is seen only after its stale threshold plus a reclaim interval: it
    says so when it starts (`recovery_within`, 120 s), where an operator reads it before a
    crash shows it. One given a direct URL holds its lock there: 4 s (the 3 s grace and a
    1 s probe interval), as without a pooler."""
    harness = pooled.harness
    lockless = harness.start_worker(settings=DEFAULT_TIMINGS)
    (started,) = lockless.events("worker_started")
    assert (started["liveness"], started["lease"]) == ("heartbeats", 90.0)
    assert started["recovery_within"] == 90.0 + 30.0
    harness.env["HEARTQ_DIRECT_URL"] = pooled.server
    locked = harness.start_worker(settings=DEFAULT_TIMINGS)
    (started,) = locked.events("worker_started")
    assert (started["liveness"], started["recovery_within"]) == ("lock", 3.0 + 1.0)


@pytest.mark.long(20)
def test_live_workers_are_never_taken_for_dead_while_sharing_one_server_session(
    backend: str, pg_server_url: str, tmp_path: Path
) -> None:
    """Four workers through a pool of ONE server session (every transaction of every
    worker waits its turn for it), for 16 s: 32 heartbeat intervals, 4 stale thresholds.
    Long jobs run through it all while short ones come and go: every job runs exactly
    once, no worker is deactivated, loses or distrusts a lease."""
    with (
        pg_harness.schema_url(pg_server_url) as direct,
        pgbouncer(pg_server_url, pool_size=1) as bouncer,
    ):
        harness = Harness(tmp_path, "postgres", bouncer.url(of=direct, pooler="transaction"))
        harness.pg_conninfo = parse_url(direct)[0]
        try:
            workers = [harness.start_worker(settings=STEADY_POOLED) for _ in range(4)]
            long_jobs = [harness.enqueue("hold", {"seconds": 14}) for _ in range(4)]
            short_jobs = []
            deadline = time.monotonic() + 16
            while time.monotonic() < deadline:
                short_jobs.append(harness.enqueue("quick", {"value": len(short_jobs)}))
                time.sleep(0.1)
            for job_id in [*long_jobs, *short_jobs]:
                done = harness.wait_status(job_id, "succeeded", 30)
                assert len(done["executions"]) == 1, done["executions"]
            assert {harness.job(j)["worker_id"] for j in long_jobs} <= {w.id for w in workers}
            for worker in workers:
                assert harness.worker_row(worker.id)["status"] == "active"
                assert worker.alive()
            assert_quiet(workers)
            (pool,) = [p for p in bouncer.show("POOLS") if p["database"] != "pgbouncer"]
            stats = {s["database"]: s for s in bouncer.show("STATS")}
            xacts = int(stats[pool["database"]]["total_xact_count"])
            print(f"one server session served {xacts} transactions of 4 workers and the test")
            assert xacts > 4 * 16 * 2  # at least the workers' heartbeats went through it
        finally:
            harness.close()


def test_cancels_and_results_work_through_the_pooler(pooled: Pooled) -> None:
    """Without NOTIFY, a cancel reaches the worker at its next pulse (which reads cancel
    requests while it runs jobs), and `App.result` re-reads until the job ended."""
    harness = pooled.harness
    harness.start_worker(settings={**POOLED, "--pulse-interval": "0.2"})
    app = heartq.App(harness.url)
    try:
        job_id = harness.enqueue("heartbeat_loop", {"seconds": 60})
        harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 15, "the job")
        asked = time.monotonic()
        assert app.cancel(job_id) == CancelResult.CANCEL_REQUESTED
        done = harness.wait_status(job_id, "cancelled", 15)
        print(f"cancel through the pooler: cancelled after {time.monotonic() - asked:.2f} s")
        assert done["executions"][0]["outcome"] == "cancelled"

        quick = harness.enqueue("quick", {"value": 7})
        result = app.result(quick, timeout=20)
        assert (result["job_id"], result["value"]) == (quick, 7)
    finally:
        app.close()


def test_a_task_s_transaction_commits_with_its_job_through_the_pooler(pooled: Pooled) -> None:
    """`ctx.transaction()` through the pooler, in a process-pool child (whose own store goes
    through it too): the task's write and its job's completion commit together, on the
    task's default search path, heartq's own statements on its schema; a child killed
    inside the block leaves nothing, and the next attempt's write lands once."""
    harness = pooled.harness
    table = f"{harness.schema}.ledger"
    harness.sql(f"CREATE TABLE {table} (job_id text NOT NULL, execution_id integer NOT NULL)")
    harness.start_worker("--pool", "process", settings=POOLED)
    job_id = harness.enqueue("ledger_write", {"table": table, "crash_first": "process"})
    done = harness.wait_job(job_id, lambda j: j["result"], 30, "the job's result")
    assert [e["outcome"] for e in done["executions"]] == ["crashed", "succeeded"]
    assert harness.sql(f"SELECT job_id, execution_id FROM {table}") == [(job_id, 2)]


def test_an_enqueue_in_the_caller_s_transaction_opens_its_queue_through_the_pooler(
    pooled: Pooled,
) -> None:
    """An application's transaction through the pooler enqueues into a queue new to the
    database: the queue's lane is made and committed on a connection of heartq's own,
    aside (one transaction behind the pooler, its schema set first), while the caller's
    transaction, older than the lane (REPEATABLE READ) or not, goes on. Committed, each
    job is claimed; rolled back, none is queued. Behind the pooler the aside connection
    once changed its autocommit inside a transaction, and never committed."""
    conninfo, _ = parse_url(pooled.harness.url)
    store = open_store(pooled.harness.url)
    try:
        store.link.migrate()
        kept: dict[str, str] = {}
        for isolation in ("READ COMMITTED", "REPEATABLE READ"):
            queue = f"fresh_{isolation.split()[0].lower()}"
            with psycopg.connect(conninfo, prepare_threshold=None) as app:
                app.execute(f"BEGIN ISOLATION LEVEL {isolation}")
                app.execute("SELECT 1")  # the caller's snapshot, before the lane
                (kept[queue],) = store.enqueue([_job({}, queue=queue)], connection=app)
            with psycopg.connect(conninfo, prepare_threshold=None) as app:
                app.execute("BEGIN")
                (dropped,) = store.enqueue([_job({}, queue=f"{queue}_undone")], connection=app)
                app.rollback()
            with pytest.raises(JobNotFound):
                store.get_job(dropped)
        for queue, job_id in kept.items():
            assert [job.id for job in store.claim("w1", [queue], 5, 30)] == [job_id]
    finally:
        store.link.close()


def test_heartq_commands_work_through_the_pooler(pooled: Pooled) -> None:
    """The operator's commands, given the pooler's URL and `HEARTQ_POOLER=transaction`
    (the environment variable: the URL does not say), each exit 0."""
    harness = pooled.harness
    worker = harness.start_worker(settings=POOLED)
    url = pooled.bouncer.url(of=pooled.direct)

    def heartq_cmd(*args: str) -> str:
        return harness.heartq(*args, url="", HEARTQ_URL=url, HEARTQ_POOLER="transaction")

    heartq_cmd("migrate")
    job_id = heartq_cmd("enqueue", "quick", "--args", '{"value": 1}').strip()
    harness.wait_status(job_id, "succeeded", 20)
    held = heartq_cmd("enqueue", "hold", "--args", '{"seconds": 60}').strip()
    harness.wait_for(lambda: harness.started_file(held, 1).exists(), 15, "the held job")
    listed = json.loads(heartq_cmd("jobs", "list", "--status", "succeeded", "--json"))
    assert job_id in json.dumps(listed)
    assert json.loads(heartq_cmd("jobs", "show", held, "--json"))["status"] == "running"
    assert worker.id in heartq_cmd("workers")
    assert json.loads(heartq_cmd("stats", "--json"))
    heartq_cmd("reclaim")
    heartq_cmd("jobs", "cancel", held)
    harness.wait_status(held, "cancelled", 15)
    heartq_cmd("dlq", "list")
    heartq_cmd("tasks")
    assert harness.job(job_id)["status"] == "succeeded"


# -- a direct URL ------------------------------------------------------------------------------
def test_with_a_direct_url_a_pooled_worker_keeps_its_lock_and_its_wakeups(
    pooled: Pooled,
) -> None:
    """Given a direct URL (`HEARTQ_DIRECT_URL` here), a pooled worker holds its liveness
    lock and LISTENs on one session straight to the server: an idle worker polling every
    30 s is woken at once by an enqueue through the pooler, and when it is SIGKILLed
    its job is back within the liveness grace, at default timings (90 s lease)."""
    harness = pooled.harness
    harness.env["HEARTQ_DIRECT_URL"] = pooled.server
    timings: dict[str, str | None] = {
        "--heartbeat-interval": "1",
        "--lease": "90",  # stale after 90 s too: only the lock can find a death soon
        "--reclaim-interval": "30",
        "--liveness-interval": None,  # 1 s, the default
        "--poll-interval": "30",
    }
    victim = harness.start_worker(settings=timings)
    (started,) = victim.events("worker_started")
    assert (started["liveness"], started["wakeups"]) == ("lock", "notify")
    assert started["recovery_within"] == 3.0 + 1.0  # the grace and a probe interval
    assert held_session_locks(harness) == 1
    assert harness.sql("SELECT liveness_lock FROM workers") == [(True,)]

    first = harness.enqueue("quick", {"value": 1})
    harness.wait_status(first, "succeeded", 30)
    beat = harness.worker_row(victim.id)["last_heartbeat_at"]
    harness.wait_for(  # idle since: its claim after that job found nothing
        lambda: harness.worker_row(victim.id)["last_heartbeat_at"] != beat, 5, "a heartbeat"
    )
    sent = time.monotonic()
    job_id = harness.enqueue("hold", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 10, "the job")
    assert time.monotonic() - sent < 5.0  # woken, not the 30 s poll

    survivor = harness.start_worker(settings=timings)
    killed_at = victim.kill()
    harness.wait_job(job_id, lambda j: j["worker_id"] == survivor.id, 15, "on the survivor")
    back_after = time.time() - killed_at
    print(f"pooled worker with a direct URL SIGKILLed: job back after {back_after:.2f} s")
    crash = harness.job(job_id)["executions"][0]["crash"]
    assert crash["detected_by"] == "liveness_lock"
    assert back_after < 3.0 + 1.1 + 3.0, back_after  # grace + a probe interval + slack


def test_a_direct_url_is_kept_out_of_every_output(pooled: Pooled) -> None:
    """A password in a direct URL given in the queue URL is never printed: a worker that
    cannot reach it says so, with the password hidden, and waits."""
    harness = pooled.harness
    secret = "pw-that-must-not-show"
    direct = f"postgresql://postgres:{secret}@127.0.0.1:1/nowhere"
    harness.url = f"{harness.url}&direct_url={quote(direct, safe='')}"
    worker = harness.start_worker(settings=POOLED, wait=False)
    harness.wait_for(lambda: worker.events("waiting_for_database"), 20, "its startup wait")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(20) == 0
    (waiting, *_) = worker.events("waiting_for_database")
    assert waiting["step"] == "liveness_lock"
    assert "postgres:***@127.0.0.1:1/nowhere" in waiting["error"]
    assert secret not in worker.log_text()
