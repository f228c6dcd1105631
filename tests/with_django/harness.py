"""A running Django site for the tests: the test project (tests/with_django/project) on one
database (a SQLite file, or PostgreSQL: Django's tables in a schema of the run's
database, heartq's queue in another), in one Django environment (`environments`), with
`manage.py migrate` run, a `manage.py heartq_worker` running beside it, and the project's
driver (project/driver.py) answering the tests' operations.

Every process is the project's own: `manage.py` commands and the driver, started with the
environment's Python in the project's directory, each told where its databases are by one
JSON variable (`DJANGO_SITE`, read by project/site_settings.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import psycopg
from psycopg import sql

from tests.support import pytest_env, wait_for
from tests.with_django.environments import Flavor

PROJECT = Path(__file__).resolve().with_name("project")
WORKER_SETTINGS = [
    "--heartbeat-interval", "0.2", "--lease", "4", "--reclaim-interval", "0.3",
    "--liveness-interval", "0.2", "--poll-interval", "0.1", "--shutdown-timeout", "5",
]  # fmt: skip
"""`heartq worker` options for the site's workers, typed on `manage.py heartq_worker`'s
command line: tests.support.STEADY's timings (a killed worker found within about 0.2 s
by its liveness lock, a 4 s lease that a loaded machine's late heartbeat does not lose)."""
STARTUP = 60.0
"""Seconds a worker or the driver may take to start (imports, Django's setup)."""
CALL_TIMEOUT = 90.0


class Process:
    """A process of the site (`manage.py heartq_worker ...`, the driver): its output in a
    log file; stopped by SIGTERM (then SIGKILL) when the site ends."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path, **more: Any):
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stderr=self._log, start_new_session=True, **more
        )
        self.pid = self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc.poll() is None:
            self.kill(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


class Driver(Process):
    """project/driver.py: one JSON request a line, one answer a line."""

    def __init__(self, python: str, env: dict[str, str], log: Path) -> None:
        super().__init__(
            [python, "driver.py"], PROJECT, env, log, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in: IO[bytes] = self.proc.stdin
        self._out: IO[bytes] = self.proc.stdout

    def call(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> Any:
        self._in.write(json.dumps({"op": op, "args": args}).encode() + b"\n")
        self._in.flush()
        ready, _, _ = select.select([self._out], [], [], timeout)
        line = self._out.readline() if ready else b""
        if not line:
            raise AssertionError(f"the driver did not answer {op!r}:\n{self.log()}")
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(f"driver {op!r}: {answer['error']}\n{answer['traceback']}")
        return answer["ok"]


class Site:
    """The test project, set up and running (see the module's docstring)."""

    def __init__(self, flavor: Flavor, database: dict[str, Any], workdir: Path,
                 elsewhere_url: str, queue_schema: str | None = None) -> None:  # fmt: skip
        self.flavor = flavor
        self.database = database
        self.workdir = workdir
        (workdir / "outbox").mkdir()
        config = {
            "flavor": flavor.name,
            "database": database,
            "queue_schema": queue_schema,
            "elsewhere_url": elsewhere_url,
            "outbox": str(workdir / "outbox"),
        }
        # Bytecode cached once for all of the site's processes, never beside the project's
        # sources (`pytest_env`): under PYTHONDONTWRITEBYTECODE each one compiled Django
        # and heartq again, 0.8 s of a core a process.
        self.env = pytest_env({
            **{k: v for k, v in os.environ.items() if not k.startswith(("HEARTQ_", "DJANGO_"))},
            "DJANGO_SITE": json.dumps(config),
            "DJANGO_SETTINGS_MODULE": "site_settings",
        })  # fmt: skip
        self.name = f"{flavor.name}-{'sqlite' if database['engine'] == 'sqlite' else 'postgres'}"
        self.processes: list[Process] = []
        self._logs = 0

    def manage(
        self, *args: str, timeout: float = 120.0, status: int = 0
    ) -> subprocess.CompletedProcess[str]:
        """`python manage.py ARGS` to its end, which must exit with `status`."""
        done = subprocess.run(
            [self.flavor.python, "manage.py", *args],
            cwd=PROJECT, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        said = f"manage.py {' '.join(args)} ({done.returncode}):\n{done.stdout}{done.stderr}"
        assert done.returncode == status, said
        return done

    def _log(self, name: str) -> Path:
        self._logs += 1
        return self.workdir / f"{self._logs:02d}-{name}.log"

    def workers(self, *args: str, count: int = 1) -> list[Process]:
        """`count` processes of `manage.py heartq_worker ARGS` (with `WORKER_SETTINGS`),
        started together, once each has started."""
        argv = [self.flavor.python, "manage.py", "heartq_worker", *WORKER_SETTINGS, *args]
        started = [Process(argv, PROJECT, self.env, self._log("worker")) for _ in range(count)]
        self.processes += started
        for worker in started:
            self._started(worker, "worker_started")
        return started

    def _started(self, process: Process, word: str) -> None:
        wait_for(
            lambda: word in process.log() or process.proc.poll() is not None,
            STARTUP,
            f"{process.log_path.name} to start",
        )
        assert process.proc.poll() is None, f"{process.log_path.name} exited:\n{process.log()}"

    def start(self) -> None:
        """`manage.py migrate`, then the main worker (the `default` queue) and the driver,
        started together."""
        self.migrate_output = self.manage("migrate", "--no-input").stdout
        self.queue_tables_after_migrate = self.queue_tables()
        argv = [self.flavor.python, "manage.py", "heartq_worker", *WORKER_SETTINGS,
                "--queues", "default", "--concurrency", "4"]  # fmt: skip
        self.main_worker = Process(argv, PROJECT, self.env, self._log("worker"))
        self.driver = Driver(self.flavor.python, self.env, self._log("driver"))
        self.processes += [self.main_worker, self.driver]
        self._started(self.main_worker, "worker_started")
        self.call("flags")  # the driver answers once Django is set up

    def call(self, op: str, **args: Any) -> Any:
        return self.driver.call(op, **args)

    def queue_tables(self) -> bool:
        """Whether heartq's tables are in the queue's database (read here, directly)."""
        if self.database["engine"] == "sqlite":
            with contextlib.closing(sqlite3.connect(self.database["name"])) as conn:
                found = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'heartq_jobs'"
                ).fetchone()
            return found is not None
        with psycopg.connect(self.database["url"]) as conn:
            row = conn.execute("SELECT to_regclass(%s)", (f"{self.queue_schema}.jobs",)).fetchone()
        return row is not None and row[0] is not None

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    @property
    def queue_schema(self) -> str:
        return str(self.database["queue_schema"])


def sqlite_site(flavor: Flavor, workdir: Path) -> Site:
    database = {"engine": "sqlite", "name": str(workdir / "site.sqlite3")}
    (workdir / "elsewhere").mkdir()
    return Site(flavor, database, workdir, f"sqlite:///{workdir / 'elsewhere' / 'heartq.db'}")


@contextlib.contextmanager
def postgres_site(flavor: Flavor, workdir: Path, server: str) -> Iterator[Site]:
    """A site whose tables are in three schemas of the run's database, dropped after:
    Django's (its search path), heartq's queue, and the queue elsewhere."""
    from tests import pg_harness

    with (
        pg_harness.schema_url(server) as django_url,
        pg_harness.schema_url(server) as queue_url,
        pg_harness.schema_url(server) as elsewhere_url,
    ):
        parts = urlsplit(server)
        django_schema = parse_qs(urlsplit(django_url).query)["schema"][0]
        queue_schema = parse_qs(urlsplit(queue_url).query)["schema"][0]
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(django_schema)))
        database = {
            "engine": "postgresql",
            "name": parts.path.lstrip("/"),
            "user": parts.username or "",
            "password": parts.password or "",
            "host": parts.hostname or "",
            "port": str(parts.port or ""),
            "schema": django_schema,
            "queue_schema": queue_schema,
            "url": server,
        }
        yield Site(flavor, database, workdir, elsewhere_url, queue_schema=queue_schema)


def wait_until(predicate: Any, timeout: float, what: str) -> Any:
    """`wait_for`, polling every 50 ms (the driver's answers cost a round trip)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            assert value, f"timed out after {timeout:g} s waiting for {what}"
            return value
        time.sleep(0.05)
