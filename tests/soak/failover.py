"""The failover runner: a fleet on a multi-host URL while its primary dies and the
standby is promoted; what carried on, how fast, and what was lost, checked afterwards.

    python -m tests.soak.failover [--async] [--failovers N] [--workers N] [--fast] \
        [--outage S] [--cut S] [--json-out PATH] [--workdir DIR] [--quiet]

What one run does:

1. A primary and its streaming hot standby (`tests/pg_replication.py`: private
   clusters, `pg_basebackup -R`, a replication slot), synchronous (the default:
   `synchronous_standby_names` lists the standby, `synchronous_commit = on`) or
   asynchronous (`--async`). Everything reaches them through the multi-host URL
   `postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=
   read-write&schema=heartq_failover`. Beside the queue, a ledger table without a unique
   constraint.
2. `--workers` real `heartq worker tests.soak.failover_tasks:app` processes, at heartq's
   default settings (30 s heartbeats, a 90 s lease, 1 s liveness probes and polls), or
   with `--fast` at the default suite's (0.2 s heartbeats, a 4 s lease: a 3.3 s trust
   window, shorter than the outage, so attempts running through it are given up), and
   an enqueuer process that enqueues a job every 50 ms (`max_retries=0`: an attempt
   counted against a job kills it; every tenth job works 4 s, the others 0.3 s, then
   each writes its ledger row in its `ctx.transaction()`), noting each id once the
   enqueue returned (acknowledged) and each enqueue that raised.
3. `--failovers` times: once the standby has been up for longer than the liveness
   probes' quiet period after a restart (so only heartq's own failover handling keeps
   them quiet), the standby is cut off for `--cut` seconds (it stops receiving:
   asynchronous commits go on without it, synchronous ones wait), then the primary is
   stopped (`pg_ctl stop -m immediate`), and `--outage` seconds later the standby is
   promoted (`pg_ctl promote`). `heartq stats` runs at once on the multi-host URL. The
   runner then times, from the promotion: every worker's first claim and the first
   finish on the new primary, every worker's liveness lock held there again, the
   enqueuer's first acknowledged enqueue. Between failovers a new standby takes the old
   primary's place (`StreamingPair.rejoin`).
4. The enqueuer stops, the queue drains, an idle worker is woken by one more enqueue
   (`heartq enqueue`: LISTEN carried over), `heartq workers` and `heartq jobs show` run,
   and the workers are stopped with SIGTERM.
5. Checks on what the promoted standby holds, for every job it has: I1 (terminal), I2
   (execution ids increasing, none open, each started after the previous ended, up to
   0.25 s of `now()` inversion), I3 (a succeeded job has one succeeded execution, the
   last, its result and its one ledger row from it; no other job has a result or a row),
   I4 (known outcomes, crash context), I5 (attempts = counted executions <= max_retries
   + 1), I6 (every job in the database was enqueued), no worker taken for dead, every
   worker alive to the end. Synchronous only: every acknowledged enqueue is there and
   succeeded, no attempt was counted for the failover (no crashed execution: the jobs
   have `max_retries=0`), and no job whose finish a worker saw acknowledged ran again.
   Asynchronous: those losses are measured (acknowledged enqueues lost; finishes lost, so
   the job runs again) and reported, not failed. The checks and the report are
   `tests/soak/failover_checks.py`.

Exit status 0 when every check held, 1 otherwise (the violations are listed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.sigterm import unwind_on_sigterm
from heartq.store import open_store
from heartq.store.postgres.advisory_locks import LIVENESS_RESTART_QUIET, LOCK_NAMESPACE
from tests import leftovers
from tests.pg_replication import Failover, StreamingPair
from tests.soak.failover_checks import Checker, format_report
from tests.soak.failover_tasks import LEDGER, LEDGER_ENV, SCHEMA, SIDE_ENV, TASK
from tests.support import STEADY, wait_for, worker_flags

REPO = Path(__file__).resolve().parents[2]
APP_REF = "tests.soak.failover_tasks:app"

FAST: dict[str, str] = worker_flags({**STEADY, "poll_interval": 30.0})
"""The default suite's settings (`tests.support.STEADY`): fast heartbeats, but a 4 s lease
(a 3.3 s trust window) that a loaded machine's late heartbeat cannot break; polls every
30 s, so that work after a failover is found through NOTIFY (LISTEN carried over) or the
reopened session's wake."""

ENQUEUER = textwrap.dedent(
    """
    import json, os, sys, time
    import heartq

    url, out, stop, interval, short, long, every, retries = sys.argv[1:9]
    app = heartq.App(url)
    n = 0
    with open(out, "a", buffering=1) as log:
        while not os.path.exists(stop):
            n += 1
            seconds = float(long) if n % int(every) == 0 else float(short)
            sent = time.time()
            try:
                job_id = app.enqueue("failover_job", {"seconds": seconds},
                                     max_retries=int(retries), meta={"n": n})
            except Exception as exc:
                said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                log.write(json.dumps({"n": n, "sent": sent, "failed": time.time(),
                                      "error": said}) + "\\n")
                time.sleep(0.05)
                continue
            log.write(json.dumps({"n": n, "sent": sent, "acked": time.time(),
                                  "id": job_id}) + "\\n")
            time.sleep(float(interval))
    """
)
"""The enqueuer: a process of its own on the multi-host URL, as an application's is."""


@dataclass
class FailoverConfig:
    synchronous: bool = True
    workers: int = 3
    concurrency: int = 4
    settings: dict[str, str] = field(default_factory=dict)
    """Worker flags over heartq's defaults (`FAST` for the default suite)."""
    failovers: int = 1
    warmup: float = 3.0
    """Seconds of load before each failover (at least)."""
    cut: float = 1.0
    """Seconds the standby is cut off before the primary dies (0: not cut)."""
    outage: float = 4.0
    """Seconds from the primary's death to the promotion."""
    enqueue_interval: float = 0.05
    short_seconds: float = 0.3
    long_seconds: float = 3.0
    """Shorter than `outage`: every attempt running when the primary stops ends before
    the promotion, so none that a lost claim started can complete on the new primary
    (tests/integration/test_failover_fencing.py provokes that one: such an attempt is
    fenced out by its worker's id, docs/design/database-bad-days.md "A failover that forgets a
    claim")."""
    long_every: int = 10
    max_retries: int = 0
    carry_on_timeout: float = 60.0
    drain_timeout: float = 240.0
    """Asynchronous at heartq's defaults, a lost finish waits for its lease (90 s) and a
    reclaim interval (30 s) before its job runs again."""
    workdir: str | None = None
    verbose: bool = True


@dataclass
class Worker:
    number: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    id: str | None = None

    def alive(self) -> bool:
        return self.popen.poll() is None

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        found = []
        with contextlib.suppress(FileNotFoundError), open(self.log_path, errors="replace") as f:
            for line in f:
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        doc = json.loads(line)
                        if isinstance(doc, dict) and (name is None or doc.get("event") == name):
                            found.append(doc)
        return found


class FailoverRun:
    def __init__(self, config: FailoverConfig, pair: StreamingPair, workdir: Path) -> None:
        self.config = config
        self.pair = pair
        self.dir = workdir
        self.url = pair.url(schema=SCHEMA)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env[LEDGER_ENV] = LEDGER
        self.side_path = workdir / "committed.jsonl"
        self.env[SIDE_ENV] = str(self.side_path)
        self.workers: list[Worker] = []
        self.failovers: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self.results_lost: list[str] = []
        self.enqueued_path = workdir / "enqueued.jsonl"
        self.stop_path = workdir / "enqueuer.stop"
        self.enqueuer: subprocess.Popen[bytes] | None = None
        for stale in (self.enqueued_path, self.stop_path, self.side_path):  # a kept --workdir
            stale.unlink(missing_ok=True)
        self.store = open_store(self.url)
        self.store.link.migrate()
        with self.connect() as conn:
            columns = "job_id text, execution_id bigint, worker_id text, run text"
            conn.execute(f"CREATE TABLE {LEDGER} ({columns})")

    def say(self, text: str) -> None:
        if self.config.verbose:
            print(f"[failover {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def connect(self) -> psycopg.Connection[Any]:
        """A session of the runner's own on whichever server is the primary now."""
        return psycopg.connect(
            self.pair.url(), autocommit=True, connect_timeout=5, options=f"-c search_path={SCHEMA}"
        )

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            return conn.execute(query, params).fetchall()  # type: ignore[arg-type]

    # -- processes -----------------------------------------------------------------------
    def start_worker(self) -> Worker:
        number = len(self.workers)
        argv = [sys.executable, "-m", "heartq", "worker", APP_REF, "--url", self.url,
                "--name", f"failover-{number}",
                "--concurrency", str(self.config.concurrency)]  # fmt: skip
        for option, value in self.config.settings.items():
            argv += [option, value]
        argv += ["--log-format", "json", "--log-level", "debug"]
        log_path = self.dir / f"worker-{number}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        worker = Worker(number, popen, log_path)
        self.workers.append(worker)
        return worker

    def wait_started(self, worker: Worker) -> None:
        started = wait_for(
            lambda: worker.events("worker_started") or not worker.alive(), 60, "a worker"
        )
        if not worker.alive() or started is True:
            raise RuntimeError(f"worker {worker.number} did not start:\n{self.tail(worker)}")
        worker.id = str(started[0]["worker_id"])

    def tail(self, worker: Worker, lines: int = 20) -> str:
        text = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def start_enqueuer(self) -> None:
        c = self.config
        script = self.dir / "enqueuer.py"
        script.write_text(ENQUEUER)
        argv = [sys.executable, str(script), self.url, str(self.enqueued_path), str(self.stop_path),
                str(c.enqueue_interval), str(c.short_seconds), str(c.long_seconds),
                str(c.long_every), str(c.max_retries)]  # fmt: skip
        with open(self.dir / "enqueuer.log", "wb") as log:
            self.enqueuer = subprocess.Popen(
                argv, cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def committed(self) -> list[dict[str, Any]]:
        """The completions the tasks saw committed (the side file)."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.side_path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def enqueued(self) -> list[dict[str, Any]]:
        found = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.enqueued_path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def heartq(self, *args: str) -> dict[str, Any]:
        """Run a `heartq` command on the multi-host URL; what it said, how long it took."""
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "heartq", *args, "--url", self.url],
            cwd=REPO, env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        said = (done.stderr.strip().splitlines() or [""])[-1]
        record = {
            "command": " ".join(["heartq", *args]),
            "rc": done.returncode,
            "seconds": round(time.monotonic() - started, 3),
            "stdout": done.stdout.strip(),
            "stderr": said,
        }
        self.commands.append(record)
        return record

    # -- the run -------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        c = self.config
        wall0 = time.time()
        for _ in range(c.workers):
            self.start_worker()
        for worker in self.workers:
            self.wait_started(worker)
        self.say(f"{c.workers} workers on {self.url}")
        self.start_enqueuer()
        for number in range(c.failovers):
            if number:
                self.pair.rejoin()
                self.say("a new standby took the old primary's place")
            self.failover(number)
        self.stop_enqueuer()
        self.first_acks()
        drained = self.drain()
        self.after_the_drain()
        self.stop_workers()
        figures = Checker(self).check(drained)
        figures["wall"] = round(time.time() - wall0, 1)
        return figures

    def failover(self, number: int) -> None:
        c = self.config
        began = time.time()
        acked_before = len([x for x in self.enqueued() if "id" in x])
        wait_for(
            lambda: (
                len([x for x in self.enqueued() if "id" in x]) >= acked_before + 10
                and time.time() >= began + c.warmup
            ),
            60,
            "enqueues before the failover",
        )
        up = self.pair.standby_uptime()
        time.sleep(max(0.0, LIVENESS_RESTART_QUIET + 1.0 - up))
        running = self.sql("SELECT count(*) FROM jobs WHERE status = 'running'")[0][0]
        cut_at = None
        if c.cut > 0:
            self.pair.cut_replication()
            cut_at = time.time()
            time.sleep(c.cut)
        stopped = self.pair.stop_primary()
        time.sleep(c.outage)
        sent, promoted = self.pair.promote()
        event = Failover(stopped_at=stopped, promote_sent_at=sent, promoted_at=promoted)
        self.say(f"failover {number + 1}: primary stopped, standby promoted "
                 f"{promoted - stopped:.2f} s later")  # fmt: skip
        stats: dict[str, Any] = {}  # a command at once, while the runner times the rest
        command = threading.Thread(target=lambda: stats.update(self.heartq("stats", "--json")))
        command.start()
        record: dict[str, Any] = {"cut_at": cut_at, **asdict(event), "running_at_stop": running}
        record.update(self.carry_on(promoted))
        command.join(90)
        record["stats_after_promotion"] = {k: stats.get(k) for k in ("rc", "seconds", "stderr")}
        self.failovers.append(record)
        self.say(f"carried on: {json.dumps({k: v for k, v in record.items() if 'first' in k})}")

    def carry_on(self, promoted: float) -> dict[str, Any]:
        """From the promotion: each worker's first claim on the new primary, the first
        finish there, each worker's liveness lock held there again, the enqueuer's first
        acknowledged enqueue."""
        ids = [w.id for w in self.workers]
        claims: dict[str, float] = {}
        locks: dict[str, float] = {}

        def look() -> bool:
            rows = self.sql(
                "SELECT worker_id, min(extract(epoch from started_at))::float8 FROM executions"
                " WHERE started_at >= to_timestamp(%s) GROUP BY worker_id",
                (promoted,),
            )
            claims.update({r[0]: r[1] for r in rows if r[0] not in claims})
            for worker_id in ids:
                if worker_id not in locks and self.lock_held(worker_id):
                    locks[worker_id] = time.time()
            return len(claims) >= len(ids) and len(locks) >= len(ids)

        with contextlib.suppress(TimeoutError):
            wait_for(look, self.config.carry_on_timeout, "every worker to carry on")
        finish = self.sql(
            "SELECT min(extract(epoch from ended_at))::float8 FROM executions"
            " WHERE ended_at >= to_timestamp(%s) AND outcome = 'succeeded'",
            (promoted,),
        )[0][0]

        def after(t: float | None) -> float | None:
            return None if t is None else round(t - promoted, 3)

        return {
            "first_claim": after(min(claims.values(), default=None)),
            "every_worker_first_claim": {w: after(t) for w, t in claims.items()},
            "first_finish": after(finish),
            "every_lock_back": {w: after(t) for w, t in locks.items()},
            "workers_not_carried_on": sorted(set(ids) - claims.keys()),
            "locks_not_back": sorted(set(ids) - locks.keys()),
        }

    def first_acks(self) -> None:
        """Each failover's first acknowledged enqueue after its promotion, from the whole
        record (an enqueue under way at the promotion may wait for the pool's timeout)."""
        acks = sorted(x["acked"] for x in self.enqueued() if "id" in x)
        for record in self.failovers:
            promoted = record["promoted_at"]
            first = next((t for t in acks if t >= promoted), None)
            record["first_enqueue_acked"] = None if first is None else round(first - promoted, 3)

    def lock_held(self, worker_id: str | None) -> bool:
        """The worker's liveness lock is held on the current primary (`pg_locks` shows
        the two keys of `pg_advisory_lock(namespace, hashtext(id))` as classid, objid)."""
        rows = self.sql(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
            " AND classid = %s AND objid = (hashtext(%s)::int8 & 4294967295)::oid",
            (LOCK_NAMESPACE, worker_id),
        )
        return bool(rows)

    def stop_enqueuer(self) -> None:
        self.stop_path.touch()
        if self.enqueuer is not None:
            try:
                self.enqueuer.wait(30)
            except subprocess.TimeoutExpired:
                self.enqueuer.kill()
                self.enqueuer.wait(10)

    def drain(self) -> bool:
        def drained() -> bool:
            rows = self.sql("SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')")
            return rows[0][0] == 0

        try:
            wait_for(drained, self.config.drain_timeout, "the queue to drain")
        except AssertionError:  # tests.support.wait_for ran out
            return False
        return True

    def after_the_drain(self) -> None:
        """Commands on the multi-host URL, and one more job: the idle workers are woken
        by its NOTIFY on the new primary (with `FAST`, they would otherwise poll in 30 s)."""
        sent = time.time()
        enqueued = self.heartq("enqueue", TASK, "--args", '{"seconds": 0}', "--max-retries", "0")
        job_id = enqueued["stdout"].split()[-1] if enqueued["rc"] == 0 else None
        self.wake: dict[str, Any] = {"job_id": job_id, "claimed_after": None}
        if job_id is not None:
            with contextlib.suppress(AssertionError):  # tests.support.wait_for ran out
                started = wait_for(
                    lambda: self.sql(
                        "SELECT extract(epoch from started_at)::float8 FROM jobs"
                        " WHERE id = %s AND started_at IS NOT NULL",
                        (job_id,),
                    ),
                    40,
                    "the last job's claim",
                )
                self.wake["claimed_after"] = round(started[0][0] - sent, 3)
            with contextlib.suppress(AssertionError):  # tests.support.wait_for ran out
                wait_for(self.drain, 30, "the last job")
            self.heartq("jobs", "show", job_id)
        self.heartq("workers")

    def stop_workers(self) -> None:
        for worker in self.workers:
            self.alive_at_end = getattr(self, "alive_at_end", {})
            self.alive_at_end[worker.number] = worker.alive()
            with contextlib.suppress(ProcessLookupError):
                worker.popen.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.violations.append(f"worker {worker.number} did not stop on SIGTERM")

    def close(self) -> None:
        self.stop_path.touch()
        procs = [w.popen for w in self.workers] + ([self.enqueuer] if self.enqueuer else [])
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self.store.link.close()


def run_failover(config: FailoverConfig) -> dict[str, Any]:
    """One run; returns the figures (with `ok` and `violations`)."""
    keep = config.workdir is not None
    if keep:
        workdir = Path(str(config.workdir)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="heartq-failover-", dir=leftovers.scratch_dir()))
    try:
        pair = StreamingPair(synchronous=config.synchronous)
        try:
            run = FailoverRun(config, pair, workdir)
            try:
                return run.run()
            finally:
                run.close()
        finally:
            pair.close()
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    unwind_on_sigterm()
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak.failover",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = FailoverConfig()
    parser.add_argument("--async", dest="asynchronous", action="store_true")
    parser.add_argument("--failovers", type=int, default=defaults.failovers)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--fast", action="store_true", help="the default suite's settings")
    parser.add_argument("--outage", type=float, default=defaults.outage)
    parser.add_argument("--cut", type=float, default=defaults.cut)
    parser.add_argument("--warmup", type=float, default=defaults.warmup)
    parser.add_argument("--workdir", default=None, help="keep the logs here")
    parser.add_argument("--json-out", default=None, help="write the figures here as JSON")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    config = FailoverConfig(
        synchronous=not args.asynchronous,
        workers=args.workers,
        concurrency=args.concurrency,
        settings=dict(FAST) if args.fast else {},
        failovers=args.failovers,
        warmup=args.warmup,
        cut=args.cut,
        outage=args.outage,
        workdir=args.workdir,
        verbose=not args.quiet,
    )
    figures = run_failover(config)
    print(format_report(figures))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
