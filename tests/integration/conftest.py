"""Harness for the real-process integration tests of the worker runtime.

Each test gets a `Harness` on a fresh directory (`tmp_path`) holding:

- `tasks.py`, the app the workers run (`heartq.App()` without a URL: `--url` gives it;
  its source is `worker_tasks.TASKS_SOURCE`);
- a fresh queue of the test's backend (the `backend` fixture of `tests/conftest.py`), read
  by the test through `heartq.store.open_store`: a SQLite file `heartq.db` or a fresh
  schema on the session's PostgreSQL server (`pg_schemas`: migrated ahead of the test,
  dropped after it);
- one log file per worker (`worker-N.log`, stdout and stderr, JSON events).

Backends: these tests are a layer over the store (tests/conftest.py, `LAYERS`), whose
every operation runs on both backends in tests/conformance, so a test here runs on the
run's first backend (SQLite) unless it is marked `on_every_backend`: what real processes
do differently by backend. Those are the liveness locks and the reclaim of a killed,
frozen or restarted worker (a session advisory lock and its grace on PostgreSQL, a lock
file on SQLite: test_worker_crash.py, the restarted worker's crash hook), listened
cancels (NOTIFY on PostgreSQL, the pulse's read on SQLite: test_pulse.py), an outage as
each database shows it (row locks, the file's write lock: test_self_fencing.py), a task's
transaction on the queue's database (test_transactional.py), concurrent claims by id
(test_nats_transport.py) and the store's statements counted per tick
(test_heartbeat_cost.py). What only PostgreSQL has (NOTIFY wake-ups, a server stopped,
frozen or unreachable, sessions the server ended, the pool and a pooler) is
`only_on("postgres")`: test_postgres.py, test_postgres_outages.py,
test_terminated_sessions.py, test_pooler.py, test_partitions.py, test_database_bad_days.py;
what only SQLite has (its file's faults), test_sqlite_faults.py.
`HEARTQ_TEST_LAYER_BACKENDS=sqlite,postgres` runs every test on both, unchanged: each runs
on either backend, and what differs (how to block the database, how to freeze a worker
outside a transaction) is a `Harness` method with one branch per backend.

Workers are real processes, `python -m heartq worker tasks:app --url ... --log-format json`,
each in its own session so that teardown can kill it and every process it started (the
process pool's forkserver and children). Tasks report progress by touching files in the
directory (`started-<job>-<attempt>`) or through the database; tests wait on conditions
with deadlines (`wait_for`), never on fixed sleeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from heartq.model import NewJob
from heartq.store import open_store
from heartq.store.postgres.connection import parse_url
from tests import pg_harness, support
from tests.cli.helpers import run_in_process
from tests.conftest import only_on as only_on  # the integration tests' import
from tests.integration.worker_tasks import TASKS_SOURCE

T = TypeVar("T")

STEADY: dict[str, str | None] = {**support.worker_flags(support.STEADY)}
"""`tests.support.STEADY` (a 4 s lease), as a worker's `settings`."""

RECONCILIATION_ONLY: dict[str, str | None] = {
    "--heartbeat-interval": "10",
    "--lease": "30",
    "--reclaim-interval": "10",
    "--liveness-interval": "3600",
}
"""Slow heartbeats, a 30 s lease and no liveness probing: within seconds only a restarted
namesake's reconciliation can take back what a gone worker held."""

STARTUP_TIMEOUT = 20.0



def parse_ts(text: str) -> float:
    """An ISO-8601 UTC time (`...Z`) as seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def read_events(path: Path) -> list[dict[str, Any]]:
    """The JSON log events in a worker's log (other lines, e.g. tracebacks, skipped)."""
    found = []
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a line being written right now
        if isinstance(doc, dict) and "event" in doc:
            found.append(doc)
    return found


class WorkerProc:
    """One `heartq worker` process started by the test."""

    def __init__(self, popen: subprocess.Popen[bytes], log_path: Path, argv: list[str]) -> None:
        self.popen = popen
        self.log_path = log_path
        self.argv = argv
        self._id: str | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def id(self) -> str:
        """The worker id it registered under (from its `worker_started` event)."""
        if self._id is None:
            started = self.events("worker_started")
            if not started:
                raise AssertionError(f"worker {self.pid} has not started:\n{self.log_tail()}")
            self._id = str(started[0]["worker_id"])
        return self._id

    def events(self, name: str | None = None, **match: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in read_events(self.log_path)
            if (name is None or e["event"] == name) and all(e.get(k) == v for k, v in match.items())
        ]

    def job_events(self, name: str, job_id: str) -> list[dict[str, Any]]:
        """Events `name` about `job_id` (a `job_id` field, or a `job_ids` list)."""
        return [
            e
            for e in self.events(name)
            if e.get("job_id") == job_id or job_id in (e.get("job_ids") or [])
        ]

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> float:
        """SIGKILL the worker process itself (not its children); returns when it is gone,
        with the wall-clock time of the kill."""
        at = time.time()
        self.signal(signal.SIGKILL)
        self.popen.wait(10)
        return at

    def wait_exit(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


@contextlib.contextmanager
def private_harness(
    tmp_path: Path, settings: dict[str, str] | None = None
) -> Iterator[tuple[Harness, pg_harness.PrivateCluster]]:
    """A harness on a PostgreSQL server of its own (with `settings`), which the test may
    stop."""
    cluster = pg_harness.PrivateCluster(settings)
    try:
        harness = Harness(tmp_path, "postgres", f"{cluster.url}?schema=heartq_it")
        try:
            yield harness, cluster
        finally:
            harness.close()
    finally:
        cluster.close()


class Harness:
    def __init__(self, directory: Path, backend: str, url: str) -> None:
        self.dir = directory
        self.backend = backend
        self.url = url
        self.db_path = directory / "heartq.db"  # SQLite only
        self.pg_conninfo = self.schema = ""  # PostgreSQL only
        if backend == "postgres":
            self.pg_conninfo, self.schema = parse_url(url)
        (directory / "tasks.py").write_text(TASKS_SOURCE)
        self.store = open_store(self.url)
        self.store.link.migrate()
        self.workers: list[WorkerProc] = []
        self.launcher: list[str] = []  # a command that runs the worker (e.g. setpriv ...)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.pop("PYTHONFAULTHANDLER", None)  # a segfaulting child must just die

    # -- the operator's commands -------------------------------------------------------
    def heartq(self, *args: str, url: str | None = None, **env: str) -> str:
        """`heartq ARGS --url URL` (the test's queue, or `url`) as an operator types it, at
        200 columns: its stdout, the command having exited 0. Run in the test's process
        (tests/cli/helpers.py, `run_in_process`: the real entry point with the real argv
        and environment, in the test's directory), not `python -m heartq`: a Python start
        and heartq's import each (0.5-1.5 s on a loaded 2-core machine) test nothing here;
        tests/cli holds the command as a process. `url=""` gives no `--url` (`env` names
        the queue)."""
        typed = [*args, "--url", url or self.url] if url != "" else list(args)
        return run_in_process(typed, self.dir, {"COLUMNS": "200", **env}).ok().out

    # -- workers -----------------------------------------------------------------------
    def start_worker(
        self,
        *extra: str,
        settings: dict[str, str | None] | None = None,
        wait: bool = True,
        url: str | None = None,
    ) -> WorkerProc:
        """Start `heartq worker tasks:app` with `tests.support.FAST` (overridden by
        `settings`; a value of None drops that option so the default applies) plus `extra`
        args, on the test's queue or on `url` (the same queue through a fault proxy, a
        pooler)."""
        merged: dict[str, str | None] = {**support.worker_flags(support.FAST), **(settings or {})}
        argv = [*self.launcher, sys.executable, "-m", "heartq", "worker", "tasks:app"]
        argv += ["--url", url or self.url]
        for option, value in merged.items():
            if value is not None:
                argv += [option, value]
        argv += [*extra, "--log-format", "json", "--log-level", "debug"]
        log_path = self.dir / f"worker-{len(self.workers)}.log"
        env = dict(self.env)
        if self.backend == "postgres":  # tells its sessions apart in pg_stat_activity
            env["PGAPPNAME"] = self.app_name(len(self.workers))
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv,
                cwd=self.dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # teardown kills its whole process group
            )
        worker = WorkerProc(popen, log_path, argv)
        self.workers.append(worker)
        if wait:
            self.wait_started(worker)
        return worker

    def wait_started(self, worker: WorkerProc) -> str:
        self.wait_for(
            lambda: worker.events("worker_started") or not worker.alive(),
            STARTUP_TIMEOUT,
            "worker to start",
        )
        if not worker.events("worker_started"):
            raise AssertionError(f"worker exited at startup:\n{worker.log_text()}")
        return worker.id

    def app_name(self, n: int) -> str:
        """PostgreSQL: the `application_name` of worker number `n`'s sessions."""
        return f"hq_{self.schema}_w{n}"

    # -- the database, directly --------------------------------------------------------
    def pg_connect(self, autocommit: bool = True) -> psycopg.Connection[Any]:
        """PostgreSQL: a session of the test's own on the test's schema."""
        assert self.backend == "postgres", self.backend
        return psycopg.connect(
            self.pg_conninfo,
            autocommit=autocommit,
            options=f"-c search_path={self.schema}",
            application_name=f"hq_{self.schema}_test",
            connect_timeout=5,
        )

    def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on the test's database (own connection, autocommit)."""
        if self.backend == "postgres":
            with self.pg_connect() as conn:
                cur = conn.execute(query, params)  # type: ignore[arg-type]
                return cur.fetchall() if cur.description else []
        conn = sqlite3.connect(self.db_path, timeout=10, isolation_level=None)
        try:
            return conn.execute(query, params).fetchall()
        finally:
            conn.close()

    def sessions(self, worker: WorkerProc) -> list[dict[str, Any]]:
        """PostgreSQL: the worker's live sessions (pid, state, wait_event_type, query)."""
        n = self.workers.index(worker)
        rows = self.sql(
            "SELECT pid, state, wait_event_type, query FROM pg_stat_activity"
            " WHERE application_name = %s",
            (self.app_name(n),),
        )
        return [
            dict(zip(("pid", "state", "wait_event_type", "query"), r, strict=True)) for r in rows
        ]

    def write_lock_free(self, timeout: float = 0.25) -> bool:
        """SQLite: True if a write transaction can begin within `timeout` s."""
        return support.sqlite_write_lock_free(self.db_path, timeout)

    def outside_transactions(self, worker: WorkerProc) -> bool:
        """True if the (stopped) `worker` holds no transaction open: SQLite, the write lock
        is free; PostgreSQL, every session of the worker is idle."""
        if self.backend == "postgres":
            # Twice: a statement it sent just before it stopped may still be on its way to
            # the server, which would then run it and wait, inside the transaction, for
            # the COMMIT the stopped worker never sends.
            for settle in (0.05, 0.0):
                if not all(s["state"] == "idle" for s in self.sessions(worker)):
                    return False
                time.sleep(settle)
            return True
        return self.write_lock_free()

    def freeze(self, worker: WorkerProc, attempts: int = 50) -> None:
        """SIGSTOP `worker` at a moment it holds no transaction open.

        A process stopped inside a transaction would keep its locks (SQLite: the single
        write lock of the file; PostgreSQL: the row locks of its jobs and worker row, which
        the reaper skips and the monitor waits for), a stall of the test, not of the
        protocol: if it holds one once stopped, continue it and try again."""
        for _ in range(attempts):
            worker.signal(signal.SIGSTOP)
            if self.outside_transactions(worker):
                return
            worker.signal(signal.SIGCONT)
            time.sleep(0.01)  # let it finish its transaction
        raise AssertionError("could not stop the worker outside a transaction")

    def by_id(self, worker_id: str) -> WorkerProc:
        for worker in self.workers:
            if worker.events("worker_started") and worker.id == worker_id:
                return worker
        raise AssertionError(f"no worker of this test has id {worker_id}")

    def close(self) -> None:
        for worker in self.workers:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(worker.pid, sig)  # the worker and its children
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.popen.wait(10)
        self.store.link.close()

    # -- jobs --------------------------------------------------------------------------
    def enqueue(
        self,
        task: str,
        args: dict[str, Any] | None = None,
        *,
        max_retries: int = 3,
        retry_backoff: float = 0.0,
        queue: str = "default",
        delay: float = 0.0,
    ) -> str:
        """Queue a job (retrying at once by default, so tests need not wait out a backoff)."""
        job = NewJob(
            task=task,
            args_json=json.dumps(args or {}),
            queue=queue,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            retry_backoff_max=max(retry_backoff, 1.0),
            delay=delay,
        )
        return self.store.enqueue([job])[0]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.store.get_job(job_id)

    def worker_row(self, worker_id: str) -> dict[str, Any]:
        for row in self.store.list_workers(include_all=True):
            if row["id"] == worker_id:
                return row
        raise AssertionError(f"worker {worker_id} is not in the registry")

    def path(self, name: str) -> Path:
        return self.dir / name

    def started_file(self, job_id: str, attempt: int) -> Path:
        return self.dir / f"started-{job_id}-{attempt}"

    def wait_job(
        self,
        job_id: str,
        predicate: Callable[[dict[str, Any]], Any],
        timeout: float,
        what: str,
    ) -> dict[str, Any]:
        """Wait until `predicate(job)` holds; returns the job as it was then."""
        seen: dict[str, Any] = {}

        def check() -> Any:
            seen["job"] = self.job(job_id)
            return predicate(seen["job"])

        self.wait_for(check, timeout, f"job {job_id}: {what}", lambda: seen.get("job"))
        return seen["job"]

    def wait_status(self, job_id: str, status: str, timeout: float) -> dict[str, Any]:
        return self.wait_job(job_id, lambda j: j["status"] == status, timeout, f"status {status}")

    # -- waiting -----------------------------------------------------------------------
    def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float,
        what: str,
        detail: Callable[[], Any] | None = None,
        interval: float = 0.02,
    ) -> T:
        """Poll `predicate` until it returns something truthy; fail after `timeout` s
        with the workers' logs."""
        return support.wait_for(
            predicate,
            timeout,
            what,
            diagnostics=lambda: self._diagnostics(detail),
            interval=interval,
        )

    def _diagnostics(self, detail: Callable[[], Any] | None) -> str:
        parts = []
        if detail is not None:
            parts.append(f"last seen: {json.dumps(detail(), indent=1, default=str)}")
        for n, worker in enumerate(self.workers):
            state = "alive" if worker.alive() else f"exited {worker.popen.returncode}"
            parts.append(f"--- worker {n} (pid {worker.pid}, {state}):\n{worker.log_tail()}")
        return "\n".join(parts)


@pytest.fixture
def harness(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    """A `Harness` on a fresh queue of `backend`; its workers are killed afterwards."""
    with contextlib.ExitStack() as cleanup:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path / 'heartq.db'}"  # absolute: sqlite:////tmp/...
        elif backend == "postgres":
            schemas = request.getfixturevalue("pg_schemas")
            url = schemas.take()  # migrated ahead
            cleanup.callback(schemas.drop_behind, url)  # dropped last
        else:
            raise AssertionError(f"no integration recipe for backend {backend!r}")
        h = Harness(tmp_path, backend, url)
        cleanup.callback(h.close)
        yield h
