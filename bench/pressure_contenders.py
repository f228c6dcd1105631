"""The queues `bench.pressure` runs: heartq, and pgqueuer in the same shape.

Each gives what a cell needs of it: its tables and how its depth and its jobs' times
are read (a `Subject`), its schema installed, its worker processes, its batch enqueue,
and how many of its workers are up. heartq runs in this interpreter's environment;
pgqueuer with the peers' (`.bench-venv`, pinned in `bench/environment.py`) through
`bench/contenders/pgqueuer_pressure.py`.

Where a pickup starts and ends, on the server's clock: heartq's job row carries both
(`run_at`, set at enqueue; `started_at`, set by the claim); pgqueuer deletes a job when
it completes and keeps one log row per change of status (`pgqueuer_log`: `queued` by
the enqueue, `picked` by the claim, `successful` by the completion, each stamped with
its transaction's `now()`), so its pickup is `picked.created - queued.created`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import psycopg

from bench.contenders.common import FAIR_KEY, fair_key_args
from bench.pressure_figures import Subject
from bench.pressure_load import WORKER_APP
from bench.worker_processes import TASKS, WorkerProcesses
from heartq.app import App
from heartq.store.postgres.queries.inspection import QUEUED

ROOT = Path(__file__).resolve().parent.parent

HEARTQ = Subject(
    name="heartq",
    schema="heartq",
    tables=("job_documents", "leases", "ready", "job_ends", "ended_executions"),
    # Where queued jobs are held (as `heartq stats` reads them): through `jobs`, every
    # sample read every job kept, a load on the machine that grew with the run.
    depth=f"SELECT count(*) FROM ({QUEUED}) AS queued",
    window="""
SELECT
  (SELECT count(*) FROM heartq.jobs
   WHERE created_at >= to_timestamp(%(start)s) AND created_at < to_timestamp(%(end)s)),
  (SELECT count(*) FROM heartq.jobs WHERE status = 'succeeded'
     AND finished_at >= to_timestamp(%(start)s) AND finished_at < to_timestamp(%(end)s)),
  count(*),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY pickup),
  percentile_cont(0.99) WITHIN GROUP (ORDER BY pickup)
FROM (SELECT extract(epoch FROM started_at - run_at)::float8 AS pickup FROM heartq.jobs
      WHERE started_at >= to_timestamp(%(start)s) AND started_at < to_timestamp(%(end)s))
  AS picked
""",
    finished="SELECT count(*) FROM heartq.jobs WHERE finished_at IS NOT NULL",
    unfinished="""
SELECT count(*) FILTER (WHERE status IN ('queued', 'running')),
       count(*) FILTER (WHERE status NOT IN ('queued', 'running', 'succeeded')
                         OR attempts > 1)
FROM heartq.jobs
""",
    fair_keys="SELECT count(DISTINCT fair_key) FROM heartq.jobs",
)

PGQUEUER = Subject(
    name="pgqueuer",
    schema="public",
    tables=("pgqueuer", "pgqueuer_log", "pgqueuer_statistics"),
    depth="SELECT count(*) FROM pgqueuer WHERE status = 'queued'",
    window="""
SELECT
  (SELECT count(*) FROM pgqueuer_log WHERE status = 'queued'
     AND created >= to_timestamp(%(start)s) AND created < to_timestamp(%(end)s)),
  (SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'
     AND created >= to_timestamp(%(start)s) AND created < to_timestamp(%(end)s)),
  count(*),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY pickup),
  percentile_cont(0.99) WITHIN GROUP (ORDER BY pickup)
FROM (SELECT extract(epoch FROM p.created - q.created)::float8 AS pickup
      FROM pgqueuer_log AS p JOIN pgqueuer_log AS q
        ON q.job_id = p.job_id AND q.status = 'queued'
      WHERE p.status = 'picked'
        AND p.created >= to_timestamp(%(start)s) AND p.created < to_timestamp(%(end)s))
  AS picked
""",
    finished="SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
    unfinished="""
SELECT (SELECT count(*) FROM pgqueuer),
       (SELECT count(*) FROM pgqueuer_log
        WHERE status NOT IN ('queued', 'picked', 'successful'))
     + (SELECT count(*) FROM (SELECT job_id FROM pgqueuer_log WHERE status = 'picked'
                              GROUP BY job_id HAVING count(*) > 1) AS twice)
""",
)


class Contender:
    """What a cell needs of a queue (heartq's and pgqueuer's below)."""

    subject: Subject
    settings: str
    """What its workers run with, for the report."""

    def install(self, url: str) -> None:
        raise NotImplementedError

    def workers(self, url: str, logs: Path, count: int, threads: int) -> WorkerProcesses:
        """`count` worker processes, each logging to a file in `logs`."""
        raise NotImplementedError

    def enqueuer(self, url: str) -> Any:
        """A `pressure_load.Enqueue` for this queue at `url`."""
        raise NotImplementedError

    def workers_up(self, conn: psycopg.Connection[Any]) -> int:
        """Worker processes ready to take jobs."""
        raise NotImplementedError


class Heartq(Contender):
    """heartq: `heartq worker` processes at `--threads` slots, its defaults otherwise;
    with `fair_keys`, its jobs spread over that many fairness keys in turn (as
    `python -m bench --fair-keys` spreads them: `fair_key_args`)."""

    subject = HEARTQ

    def __init__(self, fair_keys: int = 0) -> None:
        self.fair_keys = fair_keys
        self.settings = "heartq worker --concurrency THREADS (thread pool), defaults otherwise"
        if fair_keys:
            self.settings += f", {fair_keys} fairness keys"

    def install(self, url: str) -> None:
        app = App(url)
        app.migrate()
        app.close()

    def workers(self, url: str, logs: Path, count: int, threads: int) -> WorkerProcesses:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / "pressure_tasks.py").write_text(TASKS)
        # This checkout's heartq (src/) before any installed one, as in the bench's own
        # process: a worktree's run otherwise timed the venv's editable install.
        path = [str(logs), str(ROOT / "src"), str(ROOT)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        command = [sys.executable, "-m", "heartq", "worker", "pressure_tasks:app",
                   "--url", url, "--concurrency", str(threads)]  # fmt: skip
        return _processes(command, env, logs, count)

    def enqueuer(self, url: str) -> HeartqEnqueue:
        return HeartqEnqueue(url, self.fair_keys)

    def workers_up(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT count(*) FROM heartq.workers WHERE status = 'active'")
        found = row.fetchone()
        return int(found[0]) if found else 0


def fair_noop(key: int) -> None:
    """The workers' `fair_noop` (`bench/worker_processes.py`), registered on the
    enqueuing app too: an enqueue by name takes its key from the registered task."""


class HeartqEnqueue:
    """`App.enqueue_many` of `count` no-op jobs: one statement, one commit; with
    `fair_keys`, the n-th job enqueued has the n-th key in turn."""

    def __init__(self, url: str, fair_keys: int = 0) -> None:
        self._app = App(url)
        self._app.task(fair_key=FAIR_KEY)(fair_noop)
        self._keys = fair_keys
        self._sent = 0

    def __call__(self, count: int) -> None:
        if not self._keys:
            self._app.enqueue_many("noop", [{}] * count)
            return
        first, self._sent = self._sent, self._sent + count
        jobs = [fair_key_args(n, self._keys) for n in range(first, self._sent)]
        self._app.enqueue_many("fair_noop", jobs)

    def close(self) -> None:
        self._app.close()


class Pgqueuer(Contender):
    """pgqueuer at its defaults (`QueueManager.run()`: batch_size 10, continuous), one
    asyncpg connection a worker; `--threads` does not apply."""

    subject = PGQUEUER
    settings = "QueueManager.run() at its defaults (batch_size 10), asyncpg"
    script = str(ROOT / "bench" / "contenders" / "pgqueuer_pressure.py")

    def __init__(self, python: Path) -> None:
        self.python = str(python)

    def install(self, url: str) -> None:
        subprocess.run([self.python, self.script, "install", url], check=True)

    def workers(self, url: str, logs: Path, count: int, threads: int) -> WorkerProcesses:
        command = [self.python, self.script, "work", url]
        return _processes(command, dict(os.environ), logs, count)

    def enqueuer(self, url: str) -> PipeEnqueue:
        return PipeEnqueue([self.python, self.script, "enqueue", url])

    def workers_up(self, conn: psycopg.Connection[Any]) -> int:
        found = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND datname = current_database()",
            (WORKER_APP,),
        ).fetchone()
        return int(found[0]) if found else 0


class PipeEnqueue:
    """The harness's pacer protocol: `ENQUEUE <n>` lines to a process that enqueues."""

    def __init__(self, command: list[str]) -> None:
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, text=True)
        assert self._proc.stdin is not None
        self._pipe: IO[str] = self._proc.stdin

    def __call__(self, count: int) -> None:
        if self._proc.poll() is not None:
            raise RuntimeError(f"the enqueuing process exited ({self._proc.returncode})")
        self._pipe.write(f"ENQUEUE {count}\n")
        self._pipe.flush()

    def close(self) -> None:
        """End its input; it enqueues what it read, then exits."""
        self._pipe.close()
        self._proc.wait(120)


def _processes(command: list[str], env: dict[str, str], logs: Path, count: int) -> WorkerProcesses:
    """`count` workers of `command`, named `WORKER_APP` to the server (libpq's
    `PGAPPNAME`; pgqueuer's set it themselves)."""
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(env, PGAPPNAME=WORKER_APP)
    return WorkerProcesses(command, env, [logs / f"worker-{n}.log" for n in range(count)])
