"""What the chaos runs found, each as a deterministic test (see docs/RELIABILITY.md).

All of them are fixed; these are their regression tests. A finding not fixed yet goes
here as `xfail(strict=True)` with its reason, so that the fix turns it into a failure
and the marker is removed.

The chaos runner also found the PostgreSQL liveness lock that was never taken again
after its session dropped (every `pg_terminate` fault turned into a stream of
"liveness false positive" anomalies); its test is `tests/integration/test_postgres.py::
test_a_living_worker_whose_lock_session_drops_is_not_taken_for_dead`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from heartq.event_stream import EventStream
from heartq.lifecycle.fate import AttemptEnd
from heartq.model import ClaimedJob, NewJob, WorkerInfo
from heartq.store.postgres.connection import parse_url
from heartq.worker.attempt import RunningJob
from heartq.worker.ledger import ExecutionPool, Ledger
from heartq.worker.pools import AsyncPool
from heartq.worker.process_pool import ProcessPool
from tests.conftest import BACKENDS
from tests.soak import chaos_tasks
from tests.soak.chaos_checks import Checker
from tests.soak.chaos_config import ChaosConfig, Fault
from tests.soak.chaos_run import ChaosRun, fresh_queue
from tests.soak.chaos_workers import WorkerProc, all_threads_stopped
from tests.soak.chaos_workers import read_events as chaos_read_events
from tests.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


# -- fixed: two attempts of one job in one worker's pool ---------------------------------
def attempt_of(task: str, args: dict[str, object], execution_id: int) -> RunningJob:
    job = ClaimedJob(
        id="job-1",
        task=task,
        queue="default",
        args=args,
        attempt=execution_id,
        execution_id=execution_id,
        max_retries=3,
        retry_backoff=0.0,
        retry_backoff_max=0.0,
        checkpoint=None,
        lease_expires_at=0.0,
    )
    task_obj = chaos_tasks.app.tasks[task]
    return RunningJob(
        job, task_obj, None, claim_sent_at=time.monotonic(), trust_window=60.0,  # type: ignore[arg-type]
        max_payload_bytes=1 << 20,
    )  # fmt: skip


@pytest.mark.parametrize("pool_name", ["async", "process"])
def test_stopping_a_lost_attempt_leaves_the_newer_attempt_of_its_job_alone(
    pool_name: str, tmp_path: Path
) -> None:
    """A worker can hold a lost attempt of a job (still winding down) and a newer attempt
    of the same job it claimed again (after a freeze, a dropped session, a self-fence).
    Stopping the lost one must not stop the new one. It did: the async and process pools
    kept attempts by job id, so the chaos runs saw async jobs `cancelled` that nobody
    cancelled (fixed: keyed by lease, job id and execution id)."""
    ledger = Ledger("w", 2, EventStream())
    pool: ExecutionPool
    if pool_name == "async":
        pool = AsyncPool(ledger, 1 << 20)
        old = attempt_of("chaos_async", {"n": 0, "ms": 1500}, 1)
        new = attempt_of("chaos_async", {"n": 0, "ms": 1500}, 2)
    else:
        # the queue's URL serves ctx.transaction() in a child: unused by these attempts
        url = f"sqlite:///{tmp_path / 'unused.db'}"
        pool = ProcessPool(ledger, "tests.soak.chaos_tasks:app", 1 << 20, url)
        # runs 10 s unless stopped (no timeout: the pool would end it at one itself)
        old = attempt_of("chaos_short", {"n": 0, "ms": 10_000}, 1)
        new = attempt_of("chaos_short", {"n": 0, "ms": 10_000}, 2)
    ledger.pool = pool

    def ends() -> dict[int, AttemptEnd]:
        """How each attempt ended, as its pool reported it to the ledger."""
        return {r.job.execution_id: r.ended for r in (old, new) if r.ended is not None}

    try:
        for run in (old, new):
            ledger.claimed(run)
            pool.start([run])
        time.sleep(0.5 if pool_name == "async" else 1.0)  # both are running
        pool.stop(old)  # the worker gives up the lost attempt
        deadline = time.monotonic() + 5
        while 1 not in ends() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        assert 1 in ends(), "the lost attempt did not stop"
        assert 2 not in ends() or ends()[2].outcome.value == "succeeded", ends()
    finally:
        pool.stop(new)
        deadline = time.monotonic() + 5
        while 2 not in ends() and time.monotonic() < deadline:
            time.sleep(0.02)  # no coroutine left pending for the garbage collector
        pool.close()


def wait_started(run: ChaosRun) -> None:
    deadline = time.monotonic() + 30
    while any(p.state == "starting" for p in run.procs):
        run.refresh_workers()
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.05)


def long_jobs(count: int, queue: str, steps: int, max_retries: int = 2) -> list[NewJob]:
    return [
        NewJob(
            task="chaos_long",
            args_json=json.dumps({"n": n, "steps": steps, "step_s": 0.2}),
            queue=queue,
            max_retries=max_retries,
            retry_backoff=0.05,
        )
        for n in range(count)
    ]


def test_a_worker_frozen_mid_transaction_does_not_stop_recovery(
    pg_server_url: str, tmp_path: Path
) -> None:
    """A worker stopped (SIGSTOP, a VM pause, a partition) between its heartbeat
    statement and its COMMIT keeps its `workers` row locked. Another worker is SIGKILLed
    meanwhile: its jobs must still leave `running` within lease + reclaim interval (I1).

    They did not: every worker's monitor waited on that row lock (DEACTIVATE_STALE), and
    the reaper and the liveness probe share its thread (fixed in c59fee0: SKIP LOCKED)."""
    config = ChaosConfig(backend="postgres", pg_url=pg_server_url, verbose=False)
    with fresh_queue(config, tmp_path) as (url, schema):
        run = ChaosRun(config, tmp_path, url, schema)
        import psycopg

        frozen = "frozen-mid-heartbeat"
        locker = psycopg.connect(parse_url(url)[0])  # a transaction, never committed
        liveness = None
        try:
            doomed = run.start_worker(1, "doomed", queues="pinned")
            survivor = run.start_worker(4, "survivor", queues="elsewhere")  # maintenance
            wait_started(run)
            # The frozen worker: registered, alive (its liveness lock is held here), and
            # stopped inside its heartbeat transaction (its row is locked, uncommitted).
            # Lock first, then register, as a worker starts: a registered worker whose lock
            # is free is what a probe tries (and holds for that moment: this hold failed
            # once in CI, taken in that moment).
            liveness = run.store.link.liveness_hold(frozen)
            run.store.register_worker(WorkerInfo(frozen, "host", os.getpid(), ("x",), 1))
            locker.execute(
                f"UPDATE {schema}.workers SET last_heartbeat_at = last_heartbeat_at WHERE id = %s",
                (frozen,),
            )
            ids = run.store.enqueue(long_jobs(3, "pinned", steps=60))
            deadline = time.monotonic() + 15
            while any(run.store.get_job(i)["status"] != "running" for i in ids):
                assert time.monotonic() < deadline, "the jobs did not start"
                time.sleep(0.05)
            time.sleep(config.lease + 1.0)  # the frozen worker is stale by now
            os.kill(doomed.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            bound = config.lease + config.reclaim + 3.0
            while any(run.store.get_job(i)["status"] == "running" for i in ids):
                if time.monotonic() - killed_at > bound:
                    with psycopg.connect(parse_url(url)[0]) as conn:
                        waiting = conn.execute(
                            "SELECT wait_event_type, left(query, 60) AS query "
                            "FROM pg_stat_activity WHERE application_name = %s "
                            "AND wait_event_type = 'Lock'",
                            (survivor.app_name,),
                        ).fetchall()
                    pytest.fail(
                        f"the killed worker's jobs were still running {bound:g} s later; "
                        f"the survivor's sessions waiting on a lock: {waiting}"
                    )
                time.sleep(0.1)
        finally:
            with contextlib.suppress(Exception):
                locker.rollback()
            locker.close()
            if liveness is not None:
                liveness.close()
            run.close()


# -- fixed: the runner froze a SQLite worker that was about to take the write lock -------
SPINNER = """
import threading, time
def spin():
    while True:
        pass
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""


def test_the_runner_looks_at_the_write_lock_only_once_every_thread_stopped() -> None:
    """SIGSTOP takes effect thread by thread, asynchronously: the runner looked at the
    SQLite write lock right after sending it, and a worker's thread still running could
    take the lock just after that look, then stop holding it (every writer then waited
    30 s: RELIABILITY.md, the seed-44 and seed-211 stalls). `freeze` now looks once
    `all_threads_stopped` says so: true of a stopped process, never of a running one."""
    proc = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        assert not all_threads_stopped(proc.pid, wait=0.2)  # four threads, three spinning
        os.kill(proc.pid, signal.SIGSTOP)
        assert all_threads_stopped(proc.pid)
        os.kill(proc.pid, signal.SIGCONT)
        assert not all_threads_stopped(proc.pid, wait=0.2)
    finally:
        proc.kill()
        proc.wait()
    assert all_threads_stopped(proc.pid)  # gone: holds nothing


# -- finding 12: a task's closed sys.stderr and a server restart wedged a PostgreSQL worker
@pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL only")
def test_a_task_that_closed_sys_stderr_does_not_wedge_its_worker_across_a_restart(
    tmp_path: Path,
) -> None:
    """The hostile family's 10-minute PostgreSQL run (seed 402): after a `closed_stdio`
    task replaced the async-pool worker's `sys.stdout`/`sys.stderr` with closed
    `StringIO`s, the server restarted while an attempt's `ctx.transaction()` was open.
    The attempt failed with `ValueError` (here every time), the worker's pool then
    answered "no connection within 5 s" to everything (its jobs reclaimed as crashed when
    it was deemed stale), and on SIGTERM it did not exit within shutdown timeout + 15 s
    (there; here now and then). Without the closed stdio the same restart ends the
    attempt `interrupted` (not counted) and it succeeds on the next. Fixed: logging's last
    resort writes to heartq's own stderr (`events.keep_last_resort`)."""
    from tests.pg_harness import PrivateCluster

    config = ChaosConfig(backend="postgres", private_pg=True, verbose=False)
    with (
        PrivateCluster.running() as cluster,
        fresh_queue(config, tmp_path, cluster) as (
            url,
            schema,
        ),
    ):
        run = ChaosRun(config, tmp_path, url, schema, cluster)
        try:
            worker = run.start_worker(2, "closes-stdio")  # slot 2: the async pool
            wait_started(run)

            def ended(job_id: str) -> bool:
                return run.store.get_job(job_id)["status"] in ("succeeded", "dead")

            closes = run.store.enqueue([hostile("chaos_hostile_async", case="closed_stdio")])[0]
            wait_for(lambda: ended(closes), 15, "closed_stdio to end")
            held = run.store.enqueue([hostile("chaos_short", hold_ms=3000)])[0]
            wait_for(lambda: started(run, held), 15, "the transaction to open")
            time.sleep(0.5)  # inside its transaction (the insert, then a 3 s hold)
            cluster.stop("immediate")
            time.sleep(1.0)
            cluster.start()
            run.wait_for_database()
            wait_for(lambda: ended(held), 20, "the held job to end")
            errors = [e["error"] for e in run.store.get_job(held)["executions"]]
            assert not [e for e in errors if "ValueError" in (e or "")], errors
            after = run.store.enqueue([hostile("chaos_short")])[0]
            wait_for(lambda: ended(after), 20, "a job after the restart to end")
            assert run.store.get_job(after)["status"] == "succeeded"
            os.kill(worker.pid, signal.SIGTERM)
            worker.popen.wait(config.shutdown_timeout + 15)
        finally:
            run.close()


def hostile(task: str, **args: Any) -> NewJob:
    return NewJob(
        task=task, args_json=json.dumps({"n": 0, **args}), max_retries=2, retry_backoff=0.05
    )


def started(run: ChaosRun, job_id: str) -> bool:
    run.side.poll()
    return any(key[0] == job_id for key in run.side.starts)


# -- finding 13: a plain task's GeneratorExit on the async pool got past run_async -------
def test_a_plain_tasks_generator_exit_on_the_async_pool_is_its_own_outcome(
    tmp_path: Path,
) -> None:
    """The hostile family on the newest main (4050428: the pools' guard says when it
    fires): a plain (`def`) task raising `GeneratorExit` on the async pool ends `failed`
    as it should, but through the pool's guard (`maintenance_failed`, service `pool`),
    not `run_async`: its attempt hooks are not told how it ended. `await
    asyncio.to_thread(f)` lets a `GeneratorExit` of `f` through the awaiting
    coroutine's `except BaseException` (`loop.run_in_executor` does not). Fixed: the
    thread's exception comes back as a value (`invoke._Raised`)."""
    config = ChaosConfig(backend="sqlite", verbose=False)
    with fresh_queue(config, tmp_path) as (url, schema):
        run = ChaosRun(config, tmp_path, url, schema)
        try:
            worker = run.start_worker(2, "async-pool")  # slot 2: the async pool
            wait_started(run)
            job_id = run.store.enqueue([hostile("chaos_hostile", case="generator_exit")])[0]
            wait_for(lambda: run.store.get_job(job_id)["status"] == "dead", 20, "the job to end")
            [execution, *_] = run.store.get_job(job_id)["executions"]
            assert execution["outcome"] == "failed"
            assert "GeneratorExit" in (execution["error"] or "")
            guards = [
                e
                for e in chaos_read_events(worker.log_path)
                if e["event"] == "maintenance_failed" and e.get("service") == "pool"
            ]
            assert not guards, guards[0]["error"][-300:]
        finally:
            run.close()


# -- the hostile family's release check: jobs claimed ahead went back uncounted (seed 702)
def test_the_release_check_exempts_only_attempts_that_never_started(tmp_path: Path) -> None:
    """The hostile family's PostgreSQL run with `--prefetch 4` (seed 702) reported a job
    "released uncounted by worker ..., which was not stopped": a job claimed ahead and
    never started goes back uncounted whenever it is given back (its worker's start
    refused, a gone worker's buffer reclaimed), as docs/design/claim.md "Claim ahead" says. The
    check now exempts exactly those: a released attempt its worker handed to a pool
    (`job_claimed` in its log) or whose code started (the side file) still needs a stop."""
    config = ChaosConfig(backend="sqlite", verbose=False, hostile=0.1)
    with fresh_queue(config, tmp_path) as (url, schema):
        run = ChaosRun(config, tmp_path, url, schema)
        try:
            running, stopped = gone_worker(run, 0, "w-running"), gone_worker(run, 1, "w-stopped")
            run.faults.append(Fault("sigterm", 100.0, stopped.number, stopped.id))
            launched = {"event": "job_claimed", "job_id": "a", "execution_id": 1}
            running.log_path.write_text(json.dumps({**launched, "worker_id": "w-running"}))
            starts = [{"e": "start", "job": job, "eid": 1, "wid": wid, "task": "t"}
                      for job, wid in (("c", "w-stopped"), ("d", "w-running"))]  # fmt: skip
            run.side.path.write_text("".join(json.dumps(line) + "\n" for line in starts))
            run.side.poll()
            checker = Checker(run)
            holders = {"a": "w-running", "b": "w-running", "c": "w-stopped", "d": "w-running"}
            for job_id, worker_id in holders.items():
                run.kind_of[job_id] = "chaos_short"
                released = {"execution_id": 1, "worker_id": worker_id,
                            "outcome": "released", "ended_at": "1970-01-01T00:03:20Z"}  # fmt: skip
                checker.jobs[job_id] = {"executions": [released]}
            assert run.hostile is not None
            run.hostile.check(checker)
            assert [v.split(" at ")[0] for v in run.violations] == [
                "released: job a execution 1 released uncounted",  # handed to its pool
                "released: job d execution 1 released uncounted",  # its code started
            ]  # b: claimed ahead, never started; c: started, its worker stopped first
            assert (run.hostile.released, run.hostile.released_unstarted) == (4, 1)
        finally:
            run.close()


def gone_worker(run: ChaosRun, number: int, worker_id: str) -> WorkerProc:
    """A worker of the run's that has come and gone (exit status 0)."""
    exited = subprocess.Popen([sys.executable, "-c", ""])
    exited.wait()
    log = run.dir / f"worker-{number}.log"
    proc = WorkerProc(number, number, worker_id, "thread", exited, log, "app", 0.0, id=worker_id)
    run.procs.append(proc)
    return proc


def test_the_concurrency_check_fails_an_overlap_past_the_limit(tmp_path: Path) -> None:
    """The chaos runner's concurrency check (`chaos_limited`, a key's attempts at once)
    counts by the attempts' start and end as the database dates them: as many attempts
    of one key as its limit over the same second, one more that starts as one of them
    ends (an end before a start at one moment), and attempts of another key pass; one
    more over the same second fails it."""
    config = ChaosConfig(backend="sqlite", verbose=False)
    limit = chaos_tasks.LIMITED_LIMIT
    with fresh_queue(config, tmp_path) as (url, schema):
        run = ChaosRun(config, tmp_path, url, schema)
        try:
            checker = Checker(run)

            def attempt(job_id: str, key: str, start: int, end: int) -> None:
                run.kind_of[job_id] = "chaos_limited"
                execution = {"started_at": f"1970-01-01T00:00:{start:02d}Z",
                             "ended_at": f"1970-01-01T00:00:{end:02d}Z"}  # fmt: skip
                checker.jobs[job_id] = {"concurrency_key": key, "executions": [execution]}

            for n in range(limit):
                attempt(f"a{n}", "k0", 10 + n, 20 + n)
            attempt("next", "k0", 20, 30)  # starts as a0 ends
            attempt("other", "k1", 11, 21)
            checker.check_concurrency_limit()
            assert run.violations == [] and checker.limited["busiest"] == limit
            attempt("over", "k0", 15, 16)
            checker.check_concurrency_limit()
            assert [v.split(" ran at")[0] for v in run.violations] == [
                f"concurrency limit: {limit + 1} attempts of k0"
            ], run.violations
        finally:
            run.close()
