"""The chaos runner: real workers, random faults, and the invariants checked afterwards.

    python -m tests.soak.chaos --backend sqlite|postgres --duration S --workers N \
        --jobs N --seed N [--private-pg] [--json-out PATH] [--workdir DIR] [--strict] \
        [--faults process|failover|partition|slow-link[,...]] [--replication sync|async] \
        [--hostile FRACTION]

What one run does:

1. A fresh queue: a SQLite file in a temporary directory, or a fresh schema on the
   PostgreSQL server of `tests/pg_harness.py` (the shared server, else a private
   cluster), dropped afterwards; with `--private-pg`, on a private cluster
   (`pg_harness.PrivateCluster`: initdb on a free port in a temporary directory) started
   for the run and removed after it, the only kind of server the runner may restart.
   Beside it, the ledger: a table `chaos_ledger (job_id, execution_id, worker_id)` in the
   queue's database (SQLite: the queue's file; PostgreSQL: the run's schema, named in
   full and handed to the tasks in `HEARTQ_CHAOS_LEDGER`), without a unique constraint.
2. `--workers` real `heartq worker tests.soak.chaos_tasks:app` processes, each in its own
   session, with sub-second protocol settings (heartbeat 0.3 s, lease 1.5 s, reap 0.5 s,
   liveness probe 0.25 s). Slot 0 (and every third) runs the process pool and also serves
   the `proc` queue, the next the thread pool, the next the async pool. Each slot has a
   stable `--name`; a replacement keeps it or takes a new one (seeded coin).
3. A stream of `--jobs` jobs of mixed kinds (`chaos_tasks`: short, long with checkpoints
   and progress, flaky, Permanent, timing out, silent, async, child-crashing, long in a
   child process), enqueued in batches over the first 80 % of the run. Every kind that can
   succeed writes its effect, one ledger row, through `ctx.transaction()` just before it
   returns (some keep the transaction open a few ms, so faults land inside it).
4. For `--duration` seconds, a fault about every `--fault-interval` seconds, chosen and
   aimed with `random.Random(--seed)`:
   - `sigkill`: SIGKILL a worker; a replacement starts 0-1 s later;
   - `sigstop`: SIGSTOP a worker for 1.5-2.5 leases, then SIGCONT (on SQLite only at a
     moment it does not hold the write lock: a frozen writer would stall every process,
     a limit of SQLite, see docs/RELIABILITY.md);
   - `sigterm`: graceful stop (shutdown timeout 1 s, the rest released), then a
     replacement;
   - `twin`: a second worker under the name of a live one, the old one SIGTERMed
     1-2.5 s later, like a rolling update (reconciliation must leave a live namesake's
     jobs alone; if it took them, fencing must keep the old one from writing);
   - `kill_child`: SIGKILL the child process of a running `chaos_proc_long` attempt;
   - `pg_terminate` (PostgreSQL): `pg_terminate_backend` on every session of one worker,
     found by the `application_name` the runner gave that process (`PGAPPNAME`, unique
     to this run's schema), so no other session of the server is touched;
   - `pg_restart` (PostgreSQL with `--private-pg` only): `pg_ctl stop -m fast|immediate`
     (seeded), and `pg_ctl start` 0.5-2 s later; one falls at a seeded moment of the
     first half of the chaos whatever the draws, more as drawn. The runner's own calls
     (enqueue batches, the monitor, cancels, its `pg_terminate` session) ride it out:
     skipped or retried while it is down, reconnected after (nothing of the runner's is
     in flight when it stops the server, so a failed enqueue stored nothing);
   - `cancel`: an operator cancels one of the 20 jobs enqueued last.
   Those are the `process` family, the default of `--faults`. The others (PostgreSQL;
   `tests/soak/chaos_links.py`): `failover` (the queue on a primary and its streaming
   standby, reached through a multi-host URL; the primary stopped, the standby promoted,
   a new standby rejoined), `partition` (every worker through a `FaultProxy` of its own,
   one cut off for seconds, then healed) and `slow-link` (200 ms each way on some
   workers' proxies). With asynchronous replication what a failover lost inside its
   window is counted, not failed (`chaos_links.LinkFaults.loss_windows`).
   Rate-limited jobs (`chaos_rated`, one key, 4 starts a second) ride in the stream too.
   Pipelines ride in the same stream (`--pipelines`, the share of draws that make one):
   groups of 2-5 members of the kinds above whose callback (`chaos_fan_in`) waits for
   them (`depends_on`) and receives their results, and chains of 2-4 steps each waiting
   for the one before, enqueued in the same batch as their dependencies.
   Every second a monitor reads the running jobs: one held by a worker the runner killed
   longer than `lease + reap interval + --slack` ago (plus, for each server outage in
   between, its length and a lease) is a zombie (I1).
5. Drain: faults stop, frozen workers continue, every slot gets a live worker, and the run
   waits until every job is terminal; then every worker is stopped with SIGTERM.
6. The invariants (docs/DESIGN.md I1-I6) are checked against the database (`Store.get_job`,
   `list_jobs`, `list_workers`) and the side file the tasks append to (a line per attempt
   start and end; on PostgreSQL an execution dated up to `CLOCK_TOLERANCE` before the
   previous one ended is a `now()` inversion, counted, not an I2 violation); effects
   exactly once against the ledger: a succeeded job of a kind that writes one has
   exactly one row, from the execution that succeeded; a job that did not succeed has
   none; two rows or more is "effect N times". Pipelines: no job ran before each of
   its dependencies succeeded (its first execution started after theirs ended, and no
   job whose dependency failed ran at all); a job whose dependency ended dead or
   cancelled ended cancelled (`dependency_failed`), one whose dependencies all succeeded
   was not cancelled for it; every callback that succeeded received every member's
   result, from the attempt that succeeded, in order, and wrote its effect once. Rate
   limits: no window of the period held more starts of the rated key than its limit. A
   succeeded job with
   no result is accepted for those kinds (its worker died between the commit and saving
   the result) and counted as "results lost after the commit". Then the figures are
   printed (and written as JSON with --json-out).

Exit status 0 when every invariant held, 1 otherwise (the violations are listed); with
--strict, anomalies (jobs taken from live workers) fail the run too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import heapq
import itertools
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from heartq.errors import DependencyNotFound, JobNotFound, StoreUnavailable
from heartq.ids import new_job_id
from heartq.model import STORED_OUTCOMES, TERMINAL_STATUSES, CancelResult, DetectedBy, NewJob
from heartq.store import Store, open_store
from tests.soak.chaos_hostile import HostileFamily, hostile_report, mix_hostile
from tests.soak.chaos_links import LINK_FAULTS, LinkFaults, family_weights, parse_families
from tests.soak.chaos_tasks import (
    LEDGER_ENV,
    LOG_ENV,
    PROC_QUEUE,
    RATE_KEY,
    RATE_LIMIT,
    RATE_PERIOD,
)

try:
    import psycopg

    TRANSIENT: tuple[type[Exception], ...] = (StoreUnavailable, psycopg.OperationalError)
    """What the runner's own database calls may meet while the server restarts: it skips
    or retries them, it does not crash."""
except ImportError:  # a SQLite-only installation
    TRANSIENT = (StoreUnavailable,)

REPO = Path(__file__).resolve().parents[2]
LATE_HEAL = 5.0
"""Seconds before the run's last claim after which a healed worker that claimed nothing
more is not counted as one that did not carry on (there may have been nothing left)."""
SERVER_SETTINGS = {"max_connections": "400"}
"""The run's own servers (private cluster, streaming pair): room for a fleet of 16 and more
workers, each with its pools, and the runner."""
APP_REF = "tests.soak.chaos_tasks:app"
TERMINAL = {str(s) for s in TERMINAL_STATUSES}
OUTCOMES = {str(o) for o in STORED_OUTCOMES}
DETECTORS = {str(d) for d in DetectedBy}
FAULT_KINDS = (
    "sigkill", "sigstop", "sigterm", "twin", "kill_child", "pg_terminate", "pg_restart",
    "cancel", "failover", "partition", "slow_link",
)  # fmt: skip
"""Fault kinds, in the order the figures list them."""
PG_FAULTS = ("pg_terminate", "pg_restart", "failover")
LEDGER_KINDS = frozenset(
    {"chaos_short", "chaos_long", "chaos_proc_long", "chaos_flaky", "chaos_silent",
     "chaos_async", "chaos_child_crash", "chaos_fan_in", "chaos_rated"}
)  # fmt: skip
"""The kinds that can succeed: each writes its effect (one ledger row) in the transaction
that completes its job (`chaos_tasks.effect`)."""
LEDGER_TABLE = "chaos_ledger"
CLOCK_TOLERANCE = 0.25
"""Seconds a detection time may precede the fault it detects: PostgreSQL's `now()` is
the start of the transaction, which may begin just before the fault it then sees."""
POOLS = ("process", "thread", "async")
"""Slot i runs POOLS[i % 3]; process-pool slots also serve the `proc` queue."""


# -- configuration ---------------------------------------------------------------------
@dataclass
class ChaosConfig:
    backend: str = "sqlite"
    duration: float = 25.0
    workers: int = 3
    jobs: int = 300
    seed: int = 1
    concurrency: int = 4
    prefetch: int = 0
    """Jobs each worker claims ahead of its free slots (`heartq worker --prefetch`)."""
    heartbeat: float = 0.3
    lease: float = 1.5
    reap: float = 0.5
    liveness: float = 0.25
    poll: float = 0.1
    shutdown_timeout: float = 1.0
    fault_interval: float = 1.5
    """Mean seconds between two faults (each gap is 0.5-1.5 times this)."""
    fault_weights: dict[str, float] = field(
        default_factory=lambda: {
            "sigkill": 3.0,
            "sigstop": 2.0,
            "sigterm": 2.0,
            "kill_child": 1.5,
            "pg_terminate": 1.5,
            "pg_restart": 0.7,
            "cancel": 1.5,
            "twin": 1.0,
        }
    )
    faults: str = "process"
    """The fault families (`chaos_links.FAMILIES`, joined by commas): `process` (the kinds
    of `fault_weights`: worker signals, sessions, server restarts, cancels), `failover`,
    `partition`, `slow-link` (PostgreSQL only; see tests/soak/chaos_links.py)."""
    replication: str = "sync"
    """`failover`: the standby's replication, `sync` or `async`."""
    failover_outage: float = 3.0
    """`failover`: mean seconds from the primary's stop to the promotion (0.8-1.2 times
    this): longer than a lease, so attempts running at the stop are given up before the
    new primary takes writes."""
    failover_cut: float = 1.0
    """`failover`: seconds the standby is cut off before the primary stops (0: none)."""
    failover_gap: float = 20.0
    """`failover`: seconds at least from one failover's rejoined standby to the next."""
    partition_max: float = 6.0
    """`partition`: the longest cut, seconds (each is 25-100 % of this)."""
    slow_ms: float = 200.0
    """`slow-link`: the delay each way, milliseconds."""
    slow_share: float = 0.25
    """`slow-link`: the share of the slots whose link is slow all run long."""
    pipelines: float = 0.08
    """The share of the plan's draws that make a pipeline (a group with its callback, or
    a chain) instead of one job; 0 for none."""
    hostile: float = 0.0
    """The share of standalone jobs replaced by hostile ones (tests/soak/chaos_hostile.py)."""
    drain_timeout: float = 60.0
    slack: float = 5.0
    """Scheduling slack on top of lease + reap interval before a dead worker's job is a
    zombie (a loaded 2-core machine delays every process)."""
    pg_url: str | None = None
    """A PostgreSQL server to create this run's schema on (default: tests/pg_harness)."""
    private_pg: bool = False
    """PostgreSQL: a private cluster of the run's own (`pg_harness.PrivateCluster`), which
    the `pg_restart` fault stops and starts under the workers; removed afterwards."""
    workdir: str | None = None
    keep: bool = False
    verbose: bool = True

    @property
    def zombie_bound(self) -> float:
        return self.lease + self.reap + self.slack


KIND_WEIGHTS: dict[str, float] = {
    "chaos_short": 40,
    "chaos_rated": 6,
    "chaos_long": 14,
    "chaos_flaky": 12,
    "chaos_async": 8,
    "chaos_permanent": 5,
    "chaos_timeout": 4,
    "chaos_silent": 3,
    "chaos_child_crash": 6,
    "chaos_proc_long": 8,
}


def make_job(kind: str, n: int, rng: random.Random) -> NewJob:
    """One job of `kind` (arguments and retry policy drawn from `rng`)."""
    args: dict[str, Any] = {"n": n}
    max_retries = 5
    rate: dict[str, Any] = {}
    if kind == "chaos_short":
        args["ms"] = rng.randint(0, 30)
    elif kind == "chaos_rated":
        args["ms"] = rng.randint(0, 30)
        rate = {"rate_key": RATE_KEY, "rate_limit": RATE_LIMIT, "rate_period": RATE_PERIOD}
    elif kind in ("chaos_long", "chaos_proc_long"):
        args["steps"] = rng.randint(4, 10)
        args["step_s"] = round(rng.uniform(0.08, 0.25), 3)
    elif kind == "chaos_flaky":
        args["fail_times"] = rng.randint(1, 2)
    elif kind == "chaos_async":
        args["ms"] = rng.randint(10, 100)
    elif kind == "chaos_timeout":
        max_retries = 1
    elif kind == "chaos_permanent":
        max_retries = 3
    if kind in LEDGER_KINDS:
        # some effects keep their transaction open a little, so faults land inside it
        long_kind = kind in ("chaos_long", "chaos_proc_long")
        if rng.random() < (0.5 if long_kind else 0.1):
            args["hold_ms"] = rng.randint(2, 20) if long_kind else rng.randint(1, 5)
    return NewJob(
        task=kind,
        args_json=json.dumps(args),
        queue=PROC_QUEUE if kind in ("chaos_child_crash", "chaos_proc_long") else "default",
        priority=rng.randint(0, 2),
        max_retries=max_retries,
        retry_backoff=0.05,
        retry_backoff_max=0.5,
        **rate,
    )


MEMBER_WEIGHTS: dict[str, float] = {
    "chaos_short": 30,
    "chaos_flaky": 12,
    "chaos_long": 10,
    "chaos_async": 8,
    "chaos_proc_long": 6,
    "chaos_child_crash": 3,
    "chaos_permanent": 2,
}
"""The kinds of a group's members and a chain's steps: mostly ones that succeed (after
retries, crashes and checkpoints), a few that end dead and so cancel what waits."""


def job_plan(config: ChaosConfig) -> list[NewJob]:
    """`config.jobs` jobs, dependencies before what waits for them (a batch of the plan
    holds a pipeline's callback only with or after its members)."""
    rng = random.Random(f"jobs-{config.seed}")
    kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
    plan: list[NewJob] = []
    while len(plan) < config.jobs:
        left, n = config.jobs - len(plan), len(plan)
        draw = rng.random()
        if left >= 3 and draw < config.pipelines / 2:
            plan += make_group(rng.randint(2, min(5, left - 1)), n, rng)
        elif left >= 2 and draw < config.pipelines:
            plan += make_chain(rng.randint(2, min(4, left)), n, rng)
        else:
            plan.append(make_job(rng.choices(kinds, weights)[0], n, rng))
    return plan


def _member(n: int, rng: random.Random, depends_on: tuple[str, ...] = ()) -> NewJob:
    kinds, weights = list(MEMBER_WEIGHTS), list(MEMBER_WEIGHTS.values())
    job = make_job(rng.choices(kinds, weights)[0], n, rng)
    return dataclasses.replace(job, id=new_job_id(), depends_on=depends_on)


def make_group(size: int, n: int, rng: random.Random) -> list[NewJob]:
    """`size` members and their callback (`chaos_fan_in`), which waits for them all and
    receives their results."""
    members = [_member(n + i, rng) for i in range(size)]
    args: dict[str, Any] = {"n": n + size}
    if rng.random() < 0.2:
        args["hold_ms"] = rng.randint(1, 5)
    callback = NewJob(
        task="chaos_fan_in",
        args_json=json.dumps(args),
        priority=rng.randint(0, 2),
        max_retries=5,
        retry_backoff=0.05,
        retry_backoff_max=0.5,
        id=new_job_id(),
        depends_on=tuple(m.id for m in members if m.id),
        dependency_results=True,
    )
    return [*members, callback]


def make_chain(size: int, n: int, rng: random.Random) -> list[NewJob]:
    """`size` steps, each waiting for the one before."""
    steps: list[NewJob] = []
    for i in range(size):
        before = (steps[-1].id,) if steps and steps[-1].id else ()
        steps.append(_member(n + i, rng, before))
    return steps


# -- time helpers ----------------------------------------------------------------------
def parse_ts(text: str | None) -> float | None:
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values) if values else None,
    }


# -- the queue -------------------------------------------------------------------------
@contextlib.contextmanager
def fresh_queue(
    config: ChaosConfig, workdir: Path, cluster: Any = None
) -> Iterator[tuple[str, str | None]]:
    """`(url, schema)` of a fresh queue; PostgreSQL schemas are dropped after. `cluster`:
    a `pg_harness.PrivateCluster` to put the schema on."""
    if config.backend == "sqlite":
        url = f"sqlite:///{workdir / 'heartq.db'}"
        yield url, None
        return
    if config.backend != "postgres":
        raise SystemExit(f"unknown backend {config.backend!r}: sqlite or postgres")
    from tests import pg_harness

    with contextlib.ExitStack() as stack:
        if cluster is not None:
            base = cluster.url
        else:
            base = config.pg_url or stack.enter_context(pg_harness.server_url())
        url = stack.enter_context(pg_harness.schema_url(base))
        schema = url.rsplit("schema=", 1)[1]
        yield url, schema


# -- worker processes ------------------------------------------------------------------
@dataclass
class WorkerProc:
    """One `heartq worker` process the runner started."""

    number: int
    slot: int
    name: str
    pool: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    app_name: str
    started_at: float
    id: str | None = None
    state: str = "starting"  # starting, running, frozen, retiring, terminating, exited
    killed_at: float | None = None
    exited_at: float | None = None
    frozen_at: list[float] = field(default_factory=list)
    twinned_at: list[float] = field(default_factory=list)
    thawed_at: list[float] = field(default_factory=list)
    terminated_backends_at: list[float] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def frozen_during(self, at: float) -> bool:
        """True if the runner had this worker stopped (SIGSTOP) at wall-clock `at`."""
        ends = [*self.thawed_at, math.inf]
        return any(start <= at <= min(e for e in ends if e >= start) for start in self.frozen_at)

    def read_id(self) -> str | None:
        """The worker id from its `worker_started` event, once it has logged it."""
        if self.id is None:
            with contextlib.suppress(FileNotFoundError):
                with open(self.log_path, errors="replace") as log:
                    head = log.read(65536)
                for line in head.splitlines():
                    if '"worker_started"' in line:
                        with contextlib.suppress(ValueError):
                            self.id = str(json.loads(line)["worker_id"])
                            break
        return self.id


def read_events(path: Path) -> list[dict[str, Any]]:
    found = []
    with contextlib.suppress(FileNotFoundError), open(path, errors="replace") as log:
        for line in log:
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    doc = json.loads(line)
                    if isinstance(doc, dict) and "event" in doc:
                        found.append(doc)
    return found


# -- the side file ---------------------------------------------------------------------
class SideLog:
    """Reads the tasks' append-only side file incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.starts: dict[tuple[str, int], dict[str, Any]] = {}
        self.ends: dict[tuple[str, int], dict[str, Any]] = {}
        self.crashes: list[dict[str, Any]] = []
        """What the workers' crash hooks were told, a line each (duplicates kept)."""
        self.bad_lines = 0

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            try:
                doc = json.loads(raw)
            except ValueError:
                self.bad_lines += 1
                continue
            if doc["e"] == "crash":
                self.crashes.append(doc)
                continue
            key = (doc["job"], int(doc["eid"]))
            (self.starts if doc["e"] == "start" else self.ends)[key] = doc

    def open_attempts(self, task: str) -> list[dict[str, Any]]:
        return [d for k, d in self.starts.items() if d.get("task") == task and k not in self.ends]


# -- the run ---------------------------------------------------------------------------
@dataclass
class Fault:
    kind: str
    at: float  # wall clock (time.time()), comparable with the database's timestamps
    worker: int | None = None  # WorkerProc.number
    worker_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


STOP_WAIT = 1.0
"""How long the runner waits for a SIGSTOPped worker's threads to stop, in seconds."""


def all_threads_stopped(pid: int, wait: float = STOP_WAIT) -> bool:
    """Whether every thread of process `pid` is stopped (state T in /proc) within `wait`
    seconds of a SIGSTOP: the signal takes effect asynchronously, thread by thread. A
    process that is gone counts as stopped (it holds nothing)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            states = [
                (task / "stat").read_text().rpartition(")")[2].split()[0]
                for task in Path(f"/proc/{pid}/task").iterdir()
            ]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if all(state in ("T", "t", "Z", "X") for state in states):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)


class ChaosRun:
    def __init__(
        self,
        config: ChaosConfig,
        workdir: Path,
        url: str,
        schema: str | None,
        cluster: Any = None,
        pair: Any = None,
    ) -> None:
        """`cluster`: the run's own `pg_harness.PrivateCluster` (`pg_restart` faults);
        `pair`: the run's `pg_replication.StreamingPair` (`failover` faults)."""
        self.config = config
        self.dir = workdir
        self.url = url
        self.schema = schema
        self.cluster = cluster
        self.store: Store = open_store(url)
        self.store.migrate()
        self.ledger = f"{schema}.{LEDGER_TABLE}" if schema else LEDGER_TABLE
        self.create_ledger()
        self.outages: list[list[float]] = []  # [stopped at, answering again at (or inf)]
        self.outage_kinds: list[str] = []  # the fault of each outage
        self.acked_at: dict[str, float] = {}  # job id: when its enqueue returned
        self.plan_pos = 0  # jobs of the plan enqueued, or left out (`not_enqueued`)
        self.not_enqueued: list[str] = []
        self.pg_down = False
        self.side = SideLog(workdir / "attempts.jsonl")
        # the kinds and times of faults come from the seed alone; targets and restarts
        # from a second stream (which workers are up depends on timing)
        self.schedule = random.Random(f"faults-{config.seed}")
        self.rng = random.Random(f"targets-{config.seed}")
        self.procs: list[WorkerProc] = []
        self.slots: dict[int, WorkerProc] = {}
        self.faults: list[Fault] = []
        self.skipped: Counter[str] = Counter()
        self.enqueued: list[str] = []
        self.kind_of: dict[str, str] = {}
        self.args_of: dict[str, dict[str, Any]] = {}
        self.cancel_asked: dict[str, str] = {}
        self.deps_of: dict[str, list[str]] = {}
        self.zombies: dict[tuple[str, int], str] = {}
        self.violations: list[str] = []
        self.anomalies: list[str] = []
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._numbers = itertools.count()
        self._pg: Any = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env[LOG_ENV] = str(self.side.path)
        self.env[LEDGER_ENV] = self.ledger
        self.env.pop("PYTHONFAULTHANDLER", None)
        self.timeline: dict[str, float] = {}
        self.links = LinkFaults(self, pair)
        self.hostile = HostileFamily(self) if config.hostile else None

    # -- the ledger -------------------------------------------------------------------
    def plain_connection(self) -> Any:
        """A connection of the runner's own to the queue's database (not heartq's)."""
        if self.config.backend == "sqlite":
            return contextlib.closing(sqlite3.connect(self.url.removeprefix("sqlite:///")))
        import psycopg

        from heartq.store.postgres.connection import parse_url

        return psycopg.connect(parse_url(self.url)[0], autocommit=True)

    def create_ledger(self) -> None:
        """The tasks' effects table, in the queue's database (PostgreSQL: in the run's
        schema, named in full), without a unique constraint: a double effect shows."""
        with self.plain_connection() as conn:
            conn.execute(
                f"CREATE TABLE {self.ledger} (job_id text NOT NULL, "
                "execution_id bigint NOT NULL, worker_id text)"
            )
            if self.config.backend == "sqlite":
                conn.commit()

    def ledger_rows(self) -> list[tuple[str, int, str | None]]:
        with self.plain_connection() as conn:
            rows = conn.execute(
                f"SELECT job_id, execution_id, worker_id FROM {self.ledger}"
            ).fetchall()
        return [(str(r[0]), int(r[1]), r[2]) for r in rows]

    # -- logging ----------------------------------------------------------------------
    def say(self, text: str) -> None:
        if self.config.verbose:
            elapsed = time.monotonic() - self.timeline.get("t0", time.monotonic())
            print(f"[{elapsed:7.2f}s] {text}", file=sys.stderr, flush=True)

    # -- workers ----------------------------------------------------------------------
    def start_worker(
        self, slot: int, name: str, queues: str | None = None, url: str | None = None
    ) -> WorkerProc:
        """A worker in `slot`; `url`: another way to the queue's database (a
        `tests.faultproxy.FaultProxy` in front of it), default the queue's URL."""
        c = self.config
        number = next(self._numbers)
        pool = POOLS[slot % len(POOLS)]
        if queues is None:
            queues = f"default,{PROC_QUEUE}" if pool == "process" else "default"
        app_name = f"hqc_{self.schema}_{number}" if self.schema else f"hqc_{number}"
        argv = [
            sys.executable, "-m", "heartq", "worker", APP_REF,
            "--url", url or self.links.url_for(slot) or self.url,
            "--name", name, "--pool", pool, "--queues", queues,
            "--concurrency", str(c.concurrency), "--prefetch", str(c.prefetch),
            "--heartbeat-interval", f"{c.heartbeat:g}", "--lease", f"{c.lease:g}",
            "--reap-interval", f"{c.reap:g}", "--liveness-interval", f"{c.liveness:g}",
            "--poll-interval", f"{c.poll:g}", "--shutdown-timeout", f"{c.shutdown_timeout:g}",
            "--log-format", "json", "--log-level", "debug",
        ]  # fmt: skip
        env = dict(self.env, PGAPPNAME=app_name)
        log_path = self.dir / f"worker-{number}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # cleanup kills its group: forkserver, children
            )
        proc = WorkerProc(number, slot, name, pool, popen, log_path, app_name, time.time())
        self.procs.append(proc)
        self.slots[slot] = proc
        self.say(f"start worker #{number} slot {slot} name {name} pool {pool} pid {proc.pid}")
        return proc

    def replacement_name(self, slot: int) -> str:
        """The slot's stable name (reconciliation), or a new one (seeded coin)."""
        if self.rng.random() < 0.5:
            return f"slot-{slot}"
        return f"slot-{slot}-r{next(self._seq)}"

    def restart_slot(self, slot: int) -> None:
        current = self.slots.get(slot)
        if current is not None and current.alive() and current.state != "exited":
            return
        self.start_worker(slot, self.replacement_name(slot))

    def by_id(self, worker_id: str | None) -> WorkerProc | None:
        for proc in self.procs:
            if proc.read_id() is not None and proc.id == worker_id:
                return proc
        return None

    def refresh_workers(self) -> None:
        for proc in self.procs:
            if proc.state == "starting" and proc.read_id() is not None:
                proc.state = "running"
            if proc.state != "exited" and not proc.alive():
                if proc.state == "starting" and proc.id is None and proc.killed_at is None:
                    self.violations.append(
                        f"worker #{proc.number} exited at startup: {self.tail(proc)}"
                    )
                elif proc.state in ("running", "frozen", "retiring"):
                    self.violations.append(
                        f"worker #{proc.number} ({proc.id}) died on its own, exit status "
                        f"{proc.popen.returncode}: {self.tail(proc)}"
                    )
                was_running = proc.state != "terminating"
                proc.state = "exited"
                if was_running and self.slots.get(proc.slot) is proc:
                    self.after(0.5, lambda slot=proc.slot: self.restart_slot(slot))
            if proc.exited_at is None and not proc.alive():
                proc.exited_at = proc.killed_at or time.time()

    def tail(self, proc: WorkerProc, lines: int = 15) -> str:
        with contextlib.suppress(FileNotFoundError):
            return "\n".join(proc.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def targets(self) -> list[WorkerProc]:
        return [p for p in self.procs if p.state == "running" and p.alive()]

    # -- timers -----------------------------------------------------------------------
    def after(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), action))

    def run_timers(self, until: float | None = None) -> None:
        now = time.monotonic() if until is None else until
        while self._timers and self._timers[0][0] <= now:
            _, _, action = heapq.heappop(self._timers)
            action()

    # -- faults -----------------------------------------------------------------------
    def inject(self) -> None:
        c = self.config
        weights = family_weights(self.links.families, c.fault_weights)
        kinds = [k for k in FAULT_KINDS if weights.get(k, 0) > 0]
        if c.backend != "postgres":
            kinds = [k for k in kinds if k not in PG_FAULTS]
        if self.cluster is None:
            kinds = [k for k in kinds if k != "pg_restart"]
        if not kinds:
            return
        kind = self.schedule.choices(kinds, [weights[k] for k in kinds])[0]
        getattr(self.links if kind in LINK_FAULTS else self, f"fault_{kind}")()

    def pick_target(self, kind: str) -> WorkerProc | None:
        targets = self.targets()
        if not targets:
            self.skipped[kind] += 1
            return None
        return self.rng.choice(targets)

    def fault_sigkill(self) -> None:
        proc = self.pick_target("sigkill")
        if proc is None:
            return
        at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.killed_at = at
        proc.state = "exited"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(5)
        self.faults.append(Fault("sigkill", at, proc.number, proc.id))
        self.say(f"SIGKILL worker #{proc.number} ({proc.id})")
        delay = 0.0 if self.rng.random() < 0.5 else self.rng.uniform(0.1, 1.0)
        self.after(delay, lambda: self.restart_slot(proc.slot))

    def fault_sigstop(self) -> None:
        seconds = self.schedule.uniform(1.5, 2.5) * self.config.lease
        proc = self.pick_target("sigstop")
        if proc is None:
            return
        at = self.freeze(proc)
        if at is None:
            self.skipped["sigstop"] += 1
            self.say(f"could not stop worker #{proc.number} outside a write transaction")
            return
        proc.state = "frozen"
        proc.frozen_at.append(at)
        detail: dict[str, Any] = {"seconds": seconds}
        if self.config.backend == "postgres":
            detail["open_transactions"] = self.open_transactions(proc)
        self.faults.append(Fault("sigstop", at, proc.number, proc.id, detail))
        self.say(f"SIGSTOP worker #{proc.number} ({proc.id}) for {seconds:.2f} s {detail}")
        self.after(seconds, lambda: self.thaw(proc))

    def freeze(self, proc: WorkerProc) -> float | None:
        """SIGSTOP; on SQLite only at a moment the process does not hold the write lock.
        Returns when it was stopped (None if it could not be).

        The lock is looked at only once every thread of the worker has stopped: SIGSTOP
        is delivered asynchronously, and a thread still running (in a system call, an
        fsync, on the other core) could take the write lock just after a look that
        found it free, then stop holding it: every writer, the runner's own enqueue
        among them, then waited out its busy timeout (30 s), and the runner, waiting
        too, thawed nobody meanwhile (RELIABILITY.md, the seed-44 stall)."""
        for _ in range(30):
            at = time.time()
            os.kill(proc.pid, signal.SIGSTOP)
            if self.config.backend != "sqlite" or (
                all_threads_stopped(proc.pid) and self.write_lock_free()
            ):
                return at
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.01)
        return None

    def pg(self) -> Any:
        """The runner's own PostgreSQL session (autocommit)."""
        if self._pg is None:
            import psycopg

            from heartq.store.postgres.connection import parse_url

            self._pg = psycopg.connect(parse_url(self.url)[0], autocommit=True, connect_timeout=5)
        return self._pg

    def drop_pg(self) -> None:
        """Forget the runner's session (the server ended it): the next use reconnects."""
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()
            self._pg = None

    def open_transactions(self, proc: WorkerProc) -> int | None:
        """Sessions of a stopped worker left inside a transaction: their row locks stay
        taken while it is stopped (the reaper skips those jobs; see docs/RELIABILITY.md).
        None while the server cannot say (restarting)."""
        if self.pg_down:
            return None
        time.sleep(0.05)  # a statement in flight finishes on the server
        try:
            row = (
                self.pg()
                .execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                    "AND xact_start IS NOT NULL",
                    (proc.app_name,),
                )
                .fetchone()
            )
        except psycopg.Error:
            self.drop_pg()
            return None
        return int(row[0])

    def write_lock_free(self, timeout: float = 0.2) -> bool:
        path = self.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()

    def thaw(self, proc: WorkerProc) -> None:
        if proc.state != "frozen":
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.thawed_at.append(time.time())
        proc.state = "running" if proc.alive() else "exited"
        self.say(f"SIGCONT worker #{proc.number}")

    def fault_sigterm(self) -> None:
        proc = self.pick_target("sigterm")
        if proc is not None:
            self.faults.append(Fault("sigterm", self.terminate(proc), proc.number, proc.id))

    def fault_twin(self) -> None:
        """A second worker under the name of a live one (a pod rescheduled while the old
        one still runs). Its startup reconciliation must leave the live namesake's jobs
        alone (reported as an anomaly if it takes them; fencing must then keep the old
        one's writes out). The old one is retired with SIGTERM 1-2.5 s later, as a
        rolling update would."""
        proc = self.pick_target("twin")
        if proc is None:
            return
        at = time.time()
        twin = self.start_worker(proc.slot, proc.name)
        proc.state = "retiring"
        proc.twinned_at.append(at)
        self.faults.append(Fault("twin", at, proc.number, proc.id, {"twin": twin.number}))
        self.after(self.rng.uniform(1.0, 2.5), lambda: self.terminate(proc))

    def terminate(self, proc: WorkerProc) -> float:
        """SIGTERM (graceful stop); once it has exited, its slot gets a live worker."""
        at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        proc.state = "terminating"
        self.say(f"SIGTERM worker #{proc.number} ({proc.id})")
        deadline = time.monotonic() + self.config.shutdown_timeout + 15

        def check() -> None:
            if proc.alive() and time.monotonic() < deadline:
                self.after(0.1, check)
                return
            if proc.alive():
                self.violations.append(
                    f"worker #{proc.number} did not stop within shutdown timeout + 15 s "
                    f"of SIGTERM: {self.tail(proc)}"
                )
                os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait(5)
            elif proc.popen.returncode != 0:
                self.violations.append(
                    f"worker #{proc.number} exited {proc.popen.returncode} after SIGTERM"
                )
            proc.state = "exited"
            self.restart_slot(proc.slot)

        self.after(0.1, check)
        return at

    def fault_kill_child(self) -> None:
        """SIGKILL the child process of a running `chaos_proc_long` attempt."""
        self.side.poll()
        candidates = []
        for doc in self.side.open_attempts("chaos_proc_long"):
            proc = self.by_id(doc["wid"])
            if proc is None or proc.state != "running" or not proc.alive():
                continue
            if doc["pid"] != proc.pid and is_descendant(doc["pid"], proc.pid):
                candidates.append((doc, proc))
        if not candidates:
            self.skipped["kill_child"] += 1
            return
        doc, proc = self.rng.choice(sorted(candidates, key=lambda c: (c[0]["job"], c[0]["eid"])))
        at = time.time()
        try:
            os.kill(doc["pid"], signal.SIGKILL)
        except ProcessLookupError:
            self.skipped["kill_child"] += 1
            return
        detail = {"job": doc["job"], "eid": doc["eid"], "pid": doc["pid"]}
        self.faults.append(Fault("kill_child", at, proc.number, proc.id, detail))
        self.say(f"SIGKILL child {doc['pid']} of worker #{proc.number} (job {doc['job']})")

    def fault_pg_terminate(self) -> None:
        if self.pg_down:
            self.skipped["pg_terminate"] += 1
            return
        proc = self.pick_target("pg_terminate")
        if proc is None:
            return
        try:
            self.terminate_sessions(proc)
        except psycopg.Error as exc:  # its session went with a restart: the next reconnects
            self.drop_pg()
            self.skipped["pg_terminate"] += 1
            self.say(f"pg_terminate skipped: {first_line(exc)}")

    def fault_pg_restart(self, draws: random.Random | None = None) -> None:
        """Stop the run's private cluster (`fast` or `immediate`, seeded) and start it
        again 0.5-2 s later (a timer: the runner goes on meanwhile)."""
        draws = draws or self.schedule
        mode = draws.choice(("fast", "immediate"))
        down_for = draws.uniform(0.5, 2.0)
        if self.cluster is None or self.pg_down:
            self.skipped["pg_restart"] += 1
            return
        at = time.time()
        self.pg_down = True
        self.outages.append([at, math.inf])
        self.outage_kinds.append("pg_restart")
        try:
            self.cluster.stop(mode)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"pg_ctl stop -m {mode} failed: {stderr_line(exc)}") from None
        self.drop_pg()
        stopped = time.time() - at
        detail = {"mode": mode, "stop_s": round(stopped, 3), "down_s": round(down_for, 3)}
        self.faults.append(Fault("pg_restart", at, None, None, detail))
        self.say(f"PostgreSQL stopped ({mode}, {stopped:.2f} s), starting in {down_for:.2f} s")
        self.after(down_for, self.pg_start)

    def pg_start(self) -> None:
        if not self.pg_down:
            return
        try:
            self.cluster.start()  # pg_ctl -w: returns once it accepts connections
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"pg_ctl start failed: {stderr_line(exc)}") from None
        self.outages[-1][1] = time.time()
        self.pg_down = False
        self.say(f"PostgreSQL answering again after {time.time() - self.outages[-1][0]:.2f} s")

    def outage_overlap(self, since: float, now: float) -> float:
        """Seconds the server was down between `since` and `now`, plus a lease for each
        outage in that span (workers trust their leases again only after the server is
        back): added to the zombie bound, since no one can reclaim a job meanwhile."""
        total = 0.0
        for start, end in self.outages:
            lo, hi = max(start, since), min(end, now)
            if hi > lo:
                total += hi - lo + self.config.lease
        return total

    def terminate_sessions(self, proc: WorkerProc) -> int:
        """pg_terminate_backend on every session of one worker, found by the
        application_name the runner gave it (PGAPPNAME, unique to this run's schema), so
        no other session of the server is touched."""
        at = time.time()
        rows = (
            self.pg()
            .execute(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database() "
                "AND pid <> pg_backend_pid()",
                (proc.app_name,),
            )
            .fetchall()
        )
        proc.terminated_backends_at.append(at)
        self.faults.append(Fault("pg_terminate", at, proc.number, proc.id, {"sessions": len(rows)}))
        self.say(f"pg_terminate_backend x{len(rows)} for worker #{proc.number} ({proc.id})")
        return len(rows)

    def fault_cancel(self) -> None:
        if not self.enqueued or self.pg_down:
            self.skipped["cancel"] += 1
            return
        job_id = self.rng.choice(self.enqueued[-20:])  # recent: likely queued or running
        at = time.time()
        with self.links.db_lock:
            if self.pg_down:  # a failover began meanwhile
                self.skipped["cancel"] += 1
                return
            try:
                result = self.store.cancel_job(job_id)
            except TRANSIENT as exc:  # nothing in flight when the server stopped: not done
                self.skipped["cancel"] += 1
                self.say(f"cancel skipped: {first_line(exc)}")
                return
            except JobNotFound:  # an asynchronous failover lost it (checked after the run)
                if not self.links.loss_windows():
                    raise
                self.skipped["cancel"] += 1
                return
        if result is not CancelResult.ALREADY_FINISHED:
            self.cancel_asked[job_id] = str(result)
        self.faults.append(Fault("cancel", at, None, None, {"job": job_id, "result": str(result)}))

    # -- monitoring -------------------------------------------------------------------
    def monitor(self) -> None:
        """I1 while the run goes on: a running job is held by a live worker of this run, or
        by one that died less than lease + reap interval (+ slack) ago."""
        if self.pg_down:
            return
        try:
            running = self.store.list_jobs(status="running", limit=1_000_000)
        except TRANSIENT as exc:  # the server restarted: the next round reads again
            self.say(f"monitor skipped: {first_line(exc)}")
            return
        now = time.time()
        for job in running:
            proc = self.by_id(job["worker_id"])
            key = (job["id"], int(job["execution_id"]))
            if proc is None:
                if not any(p.id is None and p.alive() for p in self.procs):
                    self.zombies.setdefault(
                        key, f"job {key} running under unknown worker {job['worker_id']}"
                    )
                continue
            if proc.alive() or key in self.zombies:
                continue
            died = proc.killed_at or proc.exited_at or now
            bound = self.config.zombie_bound + self.outage_overlap(died, now)
            if now - died > bound:
                self.zombies[key] = (
                    f"job {job['id']} execution {key[1]} still running {now - died:.1f} s "
                    f"after its worker #{proc.number} ({proc.id}) died "
                    f"(bound {bound:.1f} s)"
                )
        if self.hostile is not None:
            self.hostile.monitor(now)

    # -- phases -----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        c = self.config
        plan = mix_hostile(job_plan(c), c)
        self.timeline["t0"] = time.monotonic()
        wall0 = time.time()
        for slot in range(c.workers):
            self.start_worker(slot, f"slot-{slot}")
        deadline = time.monotonic() + 30
        while any(p.state == "starting" for p in self.procs):
            self.refresh_workers()
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start within 30 s")
            time.sleep(0.05)
        start = time.monotonic()
        self.timeline["chaos_start"] = start - self.timeline["t0"]
        chaos_end = start + c.duration
        enqueue_window = max(c.duration * 0.8, 0.1)
        next_fault = start + self.schedule.uniform(0.3, 1.0) * c.fault_interval
        self.links.start_chaos(start)
        next_monitor = start + 1.0
        # with a private cluster, one restart falls at a seeded moment of the chaos's first
        # half whatever the draws (a short run might draw none); more come as drawn
        first_restart = start + random.Random(f"restart-{c.seed}").uniform(0.2, 0.5) * c.duration
        while True:
            now = time.monotonic()
            if now >= chaos_end:
                break
            self.links.raise_errors()
            self.refresh_workers()
            self.run_timers()
            due = min(len(plan), math.ceil(len(plan) * (now - start) / enqueue_window))
            if due > self.plan_pos:
                self.try_enqueue(plan[self.plan_pos : due])
            if now >= next_fault:
                self.inject()
                next_fault = now + self.schedule.uniform(0.5, 1.5) * c.fault_interval
            elif (
                now >= first_restart
                and self.cluster is not None
                and not self.outages
                and "process" in self.links.families
            ):
                self.fault_pg_restart(random.Random(f"restart-{c.seed}"))
            if now >= next_monitor:
                self.monitor()
                self.side.poll()
                next_monitor = now + 1.0
            time.sleep(0.02)
        self.links.end_chaos()
        deadline = time.monotonic() + 60
        while not self.try_enqueue(plan[self.plan_pos :]):
            if time.monotonic() > deadline:
                raise RuntimeError("the runner could not enqueue its last jobs within 60 s")
            self.refresh_workers()
            self.run_timers()
            time.sleep(0.05)
        self.timeline["chaos"] = time.monotonic() - start
        self.say("chaos over: draining")
        drained = self.drain()
        if self.hostile is not None:  # slots back, then every one filled
            drained = self.hostile.after_drain(drained)
        self.timeline["drain"] = time.monotonic() - start - self.timeline["chaos"]
        self.stop_all()
        self.timeline["total"] = time.monotonic() - start
        self.side.poll()
        self.pg_start()  # if the drain ran out while it was down
        self.wait_for_database()
        return self.check_and_report(drained, wall0)

    def wait_for_database(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.store.count_jobs()
                return
            except TRANSIENT as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the queue's database did not answer within {timeout:g} s: "
                        f"{first_line(exc)}"
                    ) from None
                time.sleep(0.2)

    def try_enqueue(self, jobs: list[NewJob]) -> bool:
        """Enqueue a batch; False (to be tried again) while the server restarts. Nothing is
        in flight when the runner stops the server (it does both), so a failed batch was
        not stored."""
        if not jobs:
            return True
        with self.links.db_lock:
            if self.pg_down:
                return False
            try:
                self.enqueue(jobs)
            except TRANSIENT as exc:
                self.say(f"enqueue of {len(jobs)} jobs to be retried: {first_line(exc)}")
                return False
            except DependencyNotFound:
                if not self.links.loss_windows():
                    raise
                self.enqueue(self.without_lost_dependencies(jobs))
        return True

    def without_lost_dependencies(self, jobs: list[NewJob]) -> list[NewJob]:
        """The batch less the jobs that wait for a job an asynchronous failover lost (its
        enqueue acknowledged, then gone: an application's enqueue naming it fails the same
        way), and less those that wait for them; counted in `not_enqueued`."""
        lost = {
            dep
            for job in jobs
            for dep in job.depends_on
            if dep in self.kind_of and not self.job_exists(dep)
        }
        kept = []
        for job in jobs:
            if lost & set(job.depends_on):
                if job.id:
                    lost.add(job.id)
                self.not_enqueued.append(job.id or "")
            else:
                kept.append(job)
        self.say(f"{len(jobs) - len(kept)} jobs wait for jobs a failover lost: not enqueued")
        self.plan_pos += len(jobs) - len(kept)
        return kept

    def job_exists(self, job_id: str) -> bool:
        try:
            self.store.get_job(job_id)
        except JobNotFound:
            return False
        return True

    def enqueue(self, jobs: list[NewJob]) -> None:
        ids = self.store.enqueue(jobs) if jobs else []
        acked = time.time()
        self.plan_pos += len(jobs)
        for job_id, job in zip(ids, jobs, strict=True):
            self.acked_at[job_id] = acked
            self.enqueued.append(job_id)
            self.kind_of[job_id] = job.task
            self.args_of[job_id] = json.loads(job.args_json)
            if job.depends_on:
                self.deps_of[job_id] = list(job.depends_on)

    def drain(self) -> bool:
        """Faults stop; frozen workers continue; every slot has a live worker; wait until
        every job is terminal."""
        for proc in self.procs:
            if proc.state == "frozen":
                self.thaw(proc)
        deadline = time.monotonic() + self.config.drain_timeout
        next_check = 0.0
        while True:
            self.refresh_workers()
            self.run_timers()
            for slot in range(self.config.workers):
                self.restart_slot(slot)
            if time.monotonic() >= next_check:
                self.monitor()
                next_check = time.monotonic() + 0.5
                if self.drained():
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def drained(self) -> bool:
        """Every job terminal, and no worker the runner saw die still marked active."""
        if self.pg_down:
            return False
        try:
            counts = self.store.count_jobs()
            active = {w["id"] for w in self.store.list_workers()}
        except TRANSIENT:
            return False
        if any(status not in TERMINAL for _q, status, _n in counts):
            return False
        return not any(p.id in active for p in self.procs if not p.alive())

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.shutdown_timeout + 15
        for proc in self.procs:
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.violations.append(f"worker #{proc.number} ignored the final SIGTERM")
            proc.state = "exited"
        self.kill_all()

    def kill_all(self) -> None:
        for proc in self.procs:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(5)

    def close(self) -> None:
        self.kill_all()
        self.links.close()
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()
        self.store.close()

    # -- the oracle -------------------------------------------------------------------
    def check_and_report(self, drained: bool, wall0: float) -> dict[str, Any]:
        checker = Checker(self)
        checker.check(drained)
        return checker.report(wall0)


def first_line(exc: object) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def stderr_line(exc: subprocess.CalledProcessError) -> str:
    """The first line of what a failed command said (its error if it said nothing)."""
    err = exc.stderr
    text = err.decode(errors="replace") if isinstance(err, bytes) else str(err or "")
    return first_line(text or exc)


def is_descendant(pid: int, ancestor: int, depth: int = 4) -> bool:
    """True if `ancestor` is the parent, grandparent... of `pid` (Linux /proc)."""
    for _ in range(depth):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == ancestor:
            return True
    return False


class Checker:
    """docs/DESIGN.md's invariants, read from the database after the run; and the figures."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.v = run.violations
        self.jobs: dict[str, dict[str, Any]] = {}
        self.figures: dict[str, Any] = {}
        self.false_positives = 0
        self.results_lost: list[str] = []
        self.inversions: list[tuple[float, str]] = []
        self.ledger: dict[str, Any] = {}
        self.crash_hooks: dict[str, int] = {}
        self.pipelines: dict[str, int] = {}
        self.rate: dict[str, int] = {}
        self.losses: Counter[str] = Counter()
        """What asynchronous failovers lost inside their loss windows (counted, not failed)."""
        self.lost_ids: set[str] = set()
        self.failover_crashes: list[dict[str, Any]] = []

    def fail(self, text: str) -> None:
        if len(self.v) < 200:
            self.v.append(text)
        elif len(self.v) == 200:
            self.v.append("... more violations left out")

    def check(self, drained: bool) -> None:
        run = self.run
        store = run.store
        # I6: the set of ids enqueued is the set in the database, nothing lost or added.
        listed = {j["id"] for j in store.list_jobs(limit=10_000_000)}
        enqueued = set(run.enqueued)
        if len(enqueued) != len(run.enqueued):
            self.fail("I6: enqueue returned a duplicate id")
        if listed != enqueued:
            # asynchronous failovers: an enqueue acknowledged inside a loss window may be gone
            windows = run.links.loss_windows()
            self.lost_ids = {j for j in enqueued - listed if within(run.acked_at.get(j), windows)}
            self.losses["acknowledged_enqueues"] = len(self.lost_ids)
            lost, extra = sorted(enqueued - listed - self.lost_ids), sorted(listed - enqueued)
            if lost or extra:
                self.fail(f"I6: ids differ: lost {lost[:10]} ({len(lost)}), extra {extra[:10]}")
        for job_id in run.enqueued:
            if job_id in self.lost_ids:
                continue
            try:
                self.jobs[job_id] = store.get_job(job_id)
            except JobNotFound:
                self.fail(f"I6: job {job_id} not found")
        # I1 during the run: no job of a dead worker stayed running past the bound.
        for text in run.zombies.values():
            self.fail(f"I1: {text}")
        if not drained:
            self.fail(f"I1: not drained within {run.config.drain_timeout:g} s")
        workers = {w["id"]: w for w in store.list_workers(include_all=True)}
        for job_id, job in self.jobs.items():
            self.check_job(job_id, job, drained, workers)
        self.check_side_file()
        self.check_crash_hooks()
        self.check_dependencies()
        self.check_rate_limit()
        self.check_ledger()
        self.check_workers(workers)
        if run.hostile is not None:
            run.hostile.check(self)

    def check_job(
        self, job_id: str, job: dict[str, Any], drained: bool, workers: dict[str, Any]
    ) -> None:
        run = self.run
        status = job["status"]
        execs = job["executions"]
        kind = run.kind_of[job_id]
        where = f"job {job_id} ({job['task']}, {status})"
        # I1
        if status not in TERMINAL:
            if drained:
                self.fail(f"I1: {where} not terminal after draining")
            elif status == "running":
                proc = run.by_id(job["worker_id"])
                if proc is None or proc.killed_at is not None:
                    self.fail(f"I1: {where} running under a dead worker {job['worker_id']}")
            elif status not in ("queued", "waiting"):
                self.fail(f"I1: {where} has an unknown status")
        # I2/I3: execution ids strictly increase; at most one open execution, the current
        # one; each execution starts after the previous one ended (one owner at a time).
        ids = [e["execution_id"] for e in execs]
        if ids != sorted(set(ids)):
            self.fail(f"I2: {where} execution ids not strictly increasing: {ids}")
        if execs and job["execution_id"] != ids[-1]:
            self.fail(f"I2: {where} execution_id {job['execution_id']} is not the last {ids}")
        open_execs = [e for e in execs if e["outcome"] is None or e["ended_at"] is None]
        if status == "running":
            if len(open_execs) != 1 or open_execs[0]["execution_id"] != job["execution_id"]:
                self.fail(f"I2: {where} open executions {[e['execution_id'] for e in open_execs]}")
        elif open_execs:
            self.fail(f"I2: {where} has open executions {[e['execution_id'] for e in open_execs]}")
        for before, after in itertools.pairwise(execs):
            ended, started = parse_ts(before["ended_at"]), parse_ts(after["started_at"])
            if (
                run.config.backend == "postgres"
                and ended is not None
                and started is not None
                and ended - CLOCK_TOLERANCE <= started < ended
            ):
                # PostgreSQL dates both by now(), the start of their transactions: a claim
                # whose transaction began just before the requeue's, and whose statement
                # saw the requeue committed, is dated a few ms earlier (counted)
                self.inversions.append((ended - started, f"{job_id}/{after['execution_id']}"))
                continue
            if ended is None or started is None or started < ended:
                self.fail(
                    f"I2: {where} execution {after['execution_id']} started at "
                    f"{after['started_at']} before {before['execution_id']} ended "
                    f"({before['ended_at']})"
                )
        succeeded = [e for e in execs if e["outcome"] == "succeeded"]
        if status == "succeeded":
            last = execs[-1] if execs else None
            result = job["result"] or {}
            if len(succeeded) != 1 or last is None or last["outcome"] != "succeeded":
                self.fail(f"I3: {where} succeeded executions {len(succeeded)}, last {last}")
            elif job["result"] is None and kind in LEDGER_KINDS:
                # its transaction committed, then its worker died before saving the result
                # (the ledger check says whether its effect is there, once)
                self.results_lost.append(job_id)
            elif (
                result.get("job") != job_id
                or result.get("eid") != last["execution_id"]
                or result.get("wid") != last["worker_id"]
            ):
                self.fail(
                    f"I3: {where} result {result} is not from its succeeded execution "
                    f"{last['execution_id']} on {last['worker_id']}"
                )
        elif succeeded:
            self.fail(f"I3: {where} has a succeeded execution but is {status}")
        elif job["result"] is not None:
            self.fail(f"I3: {where} has a result {job['result']}")
        # I4: every closed execution has an outcome; a crashed or interrupted one its crash
        # context.
        for e in execs:
            if e["outcome"] is not None and e["outcome"] not in OUTCOMES:
                self.fail(f"I4: {where} execution {e['execution_id']} outcome {e['outcome']}")
            if e["outcome"] in ("crashed", "interrupted"):
                crash = e["crash"] or {}
                missing = [k for k in ("worker_id", "detected_at", "detected_by", "reason")
                           if not crash.get(k)]  # fmt: skip
                if missing or crash.get("detected_by") not in DETECTORS:
                    self.fail(
                        f"I4: {where} execution {e['execution_id']} crash context {crash} "
                        f"lacks {missing or 'a known detected_by'}"
                    )
        # I5: attempts are the counted executions (released and interrupted ones are not
        # counted), at most max_retries + 1; a dead job has its reason and spent its
        # retries (or was Permanent, or interrupted past the separate limit).
        counted = [e for e in execs if e["outcome"] not in ("released", "interrupted")]
        if job["attempts"] != len(counted):
            self.fail(f"I5: {where} attempts {job['attempts']} but {len(counted)} counted runs")
        if job["attempts"] > job["max_retries"] + 1:
            self.fail(f"I5: {where} attempts {job['attempts']} > max_retries + 1")
        if status == "dead":
            reason = job["dead_reason"] or ""
            if not reason:
                self.fail(f"I5: {where} has no dead_reason")
            elif job["attempts"] != job["max_retries"] + 1 and not reason.startswith(
                ("permanent failure", "interrupted ")
            ):
                self.fail(f"I5: {where} dead after {job['attempts']} attempts: {reason}")
        # What each kind may end as (the tasks' own contract).
        if (
            status == "cancelled"
            and job_id not in run.cancel_asked
            and not (run.deps_of.get(job_id) and self.dependency_failed(job_id))
        ):
            self.fail(f"{where} cancelled but nobody asked")
        if kind in ("chaos_permanent", "chaos_timeout") and status == "succeeded":
            self.fail(f"{where} succeeded, which its task never does")
        attempt_returned = (job["result"] or {}).get("att", 0)
        if job["result"] is None:  # a result lost after the commit: the side file says
            attempt_returned = run.side.starts.get((job_id, job["execution_id"]), {}).get("att", 0)
        if (
            kind == "chaos_flaky"
            and status == "succeeded"
            and (attempt_returned <= run.args_of[job_id]["fail_times"])
        ):
            self.fail(f"{where} succeeded on an attempt that raises")
        if kind in ("chaos_long", "chaos_proc_long") and status == "succeeded":
            # Fencing of checkpoints: the attempt that succeeded wrote the last one, so a
            # checkpoint written later by a fenced-out attempt would show here.
            result, checkpoint = job["result"] or {}, job["checkpoint"] or {}
            if job["result"] is None:  # lost after the commit: at least the last step's
                if checkpoint.get("step") != run.args_of[job_id]["steps"]:
                    self.fail(f"I3: {where} checkpoint {checkpoint} is not the last step")
            elif result.get("resumed_from", 0) < result.get("steps", 0) and (
                checkpoint.get("eid") != result.get("eid")
                or checkpoint.get("step") != result.get("steps")
            ):
                self.fail(f"I3: {where} checkpoint {checkpoint} not from its last attempt")

    def dependency_failed(self, job_id: str) -> list[str]:
        """Those of the job's dependencies that ended dead or cancelled."""
        deps = self.run.deps_of.get(job_id, [])
        return [d for d in deps if self.jobs.get(d, {}).get("status") in ("dead", "cancelled")]

    def check_dependencies(self) -> None:
        """Jobs that wait for jobs: none ran before its dependencies succeeded, a failed
        dependency cancels what waits for it and only that, and every callback got every
        result once."""
        run = self.run
        tolerance = CLOCK_TOLERANCE if run.config.backend == "postgres" else 0.0
        counts: Counter[str] = Counter()
        for job_id, deps in run.deps_of.items():
            job = self.jobs.get(job_id)
            if job is None or any(d not in self.jobs for d in deps):
                continue  # I6 said so already
            where = f"job {job_id} ({job['task']}, {job['status']})"
            counts["groups" if run.kind_of[job_id] == "chaos_fan_in" else "chain_steps"] += 1
            failed = self.dependency_failed(job_id)
            execs = job["executions"]
            if failed and execs:
                self.fail(f"dependencies: {where} ran though {failed[0]} ended "
                          f"{self.jobs[failed[0]]['status']}")  # fmt: skip
            started = parse_ts(execs[0]["started_at"]) if execs else None
            for dep in deps if started is not None else []:
                ended = [parse_ts(e["ended_at"]) for e in self.jobs[dep]["executions"]
                         if e["outcome"] == "succeeded"]  # fmt: skip
                if not ended or ended[0] is None:
                    self.fail(f"dependencies: {where} ran, but {dep} has no succeeded attempt")
                elif started is not None and started < ended[0] - tolerance:
                    self.fail(f"dependencies: {where} started at {execs[0]['started_at']}, "
                              f"before {dep} succeeded")  # fmt: skip
            asked = job_id in run.cancel_asked
            if failed and not asked:
                counts["cancelled_by_a_failed_dependency"] += 1
                if job["status"] != "cancelled" or not (job["error"] or "").startswith(
                    "dependency_failed"
                ):
                    self.fail(f"dependencies: {where} after {failed[0]} ended "
                              f"{self.jobs[failed[0]]['status']}: {job['error']!r}")  # fmt: skip
            elif not failed and (job["error"] or "").startswith("dependency_failed"):
                self.fail(f"dependencies: {where} says {job['error']!r}, no dependency failed")
            if run.kind_of[job_id] == "chaos_fan_in" and job["status"] == "succeeded":
                counts["callbacks_succeeded"] += 1
                if job["result"] is None:
                    continue  # lost after its commit: the ledger holds its effect to once
                expected = [
                    None if self.jobs[d]["result"] is None else [d, self.jobs[d]["result"]["eid"]]
                    for d in deps
                ]
                if job["result"].get("got") != expected:
                    self.fail(f"dependencies: {where} received {job['result'].get('got')}, "
                              f"expected {expected}")  # fmt: skip
        self.pipelines = dict(sorted(counts.items()))

    def check_rate_limit(self) -> None:
        """Rate limits across the fleet: at most `RATE_LIMIT` attempts of the rated jobs
        start in any `RATE_PERIOD` seconds (every attempt is a start: crashed, released
        and interrupted ones too), by the database's clock, whoever claimed them."""
        starts = sorted(
            t
            for job_id, job in self.jobs.items()
            if self.run.kind_of[job_id] == "chaos_rated"
            for e in job["executions"]
            if (t := parse_ts(e["started_at"])) is not None
        )
        busiest = 0
        for i, start in enumerate(starts):
            within = sum(1 for t in starts[i : i + RATE_LIMIT + 1] if t < start + RATE_PERIOD)
            busiest = max(busiest, within)
            if within > RATE_LIMIT:
                self.fail(f"rate limit: {within} starts of {RATE_KEY} within {RATE_PERIOD:g} s "
                          f"from {start:.3f} (limit {RATE_LIMIT})")  # fmt: skip
                break
        self.rate = {"starts": len(starts), "busiest_window": busiest, "limit": RATE_LIMIT}

    def check_side_file(self) -> None:
        """At-least-once and fencing, from what the attempts themselves wrote."""
        side = self.run.side
        execs = {
            (job_id, e["execution_id"]): e
            for job_id, job in self.jobs.items()
            for e in job["executions"]
        }
        windows = self.run.links.claim_windows()
        for key, doc in side.starts.items():
            e = execs.get(key)
            if key[0] in self.lost_ids:
                self.losses["attempts_of_lost_jobs"] += 1
            elif e is None and within(doc.get("t"), windows):
                self.losses["claims"] += 1  # its claim did not reach the standby
            elif e is None:
                self.fail(f"I3: attempt {key} ran but the database never issued it")
            elif e["worker_id"] != doc["wid"] and within(doc.get("t"), windows):
                # its claim was lost and the job claimed again under the same execution
                # id by another worker, whose id in the fence shuts this attempt out
                # (DESIGN.md, "A failover that forgets a claim")
                self.losses["execution_ids_issued_again"] += 1
            elif e["worker_id"] != doc["wid"]:
                self.fail(f"I3: attempt {key} ran on {doc['wid']}, issued to {e['worker_id']}")
        for job_id, job in self.jobs.items():
            if job["status"] == "succeeded":
                key = (job_id, job["execution_id"])
                how = side.ends.get(key, {}).get("how")
                # a worker killed after its task's transaction committed leaves no result,
                # and its attempt no end line, or the error its child met telling the dead
                # parent (BrokenPipeError); the ledger check holds its effect to once
                lost = job["result"] is None and self.run.kind_of[job_id] in LEDGER_KINDS
                if key not in side.starts or (how != "return" and not lost):
                    self.fail(f"I3: job {job_id} result from attempt {key} that never returned")

    def check_crash_hooks(self) -> None:
        """Crash hooks: each call names an execution the database closed `crashed`, held
        by the worker it names, and none is told twice (the reclaim's fence decides who
        tells). Some crashes go untold (a finder killed between its commit and its hook):
        counted, not failed."""
        execs = {
            (job_id, e["execution_id"]): e
            for job_id, job in self.jobs.items()
            for e in job["executions"]
        }
        windows = self.run.links.loss_windows()
        told: Counter[tuple[str, int]] = Counter()
        for doc in self.run.side.crashes:
            key = (doc["job"], int(doc["eid"]))
            told[key] += 1
            e = execs.get(key)
            if (e is None or e["outcome"] != "crashed") and within(doc.get("t"), windows):
                self.losses["crash_hooks_of_lost_reclaims"] += 1
            elif e is None or e["outcome"] != "crashed":
                how = "unknown" if e is None else e["outcome"]
                self.fail(f"crash hook: told of {key}, an execution {how}, not crashed")
            elif e["worker_id"] != doc["wid"]:
                self.fail(f"crash hook: {key} held by {e['worker_id']}, told {doc['wid']}")
        for key, n in told.items():
            if n > 1:
                self.fail(f"crash hook: told of {key} {n} times")
        crashed = [k for k, e in execs.items() if e["outcome"] == "crashed"]
        self.crash_hooks = {
            "told": len(told),
            "crashed_executions": len(crashed),
            "untold": sum(1 for k in crashed if k not in told),
        }

    def check_ledger(self) -> None:
        """Effects exactly once: a succeeded job of a kind that writes one has exactly one
        ledger row, written by the execution that succeeded; any other job has none."""
        run = self.run
        rows = run.ledger_rows()
        effects: dict[str, list[tuple[int, str | None]]] = defaultdict(list)
        for job_id, execution_id, worker_id in rows:
            effects[job_id].append((execution_id, worker_id))
        for job_id, found in sorted(effects.items()):
            job = self.jobs.get(job_id)
            if job is None:
                self.fail(f"ledger: an effect of job {job_id}, which was never enqueued")
                continue
            where = f"job {job_id} ({job['task']}, {job['status']})"
            eids = sorted(e for e, _ in found)
            if len(found) > 1:
                self.fail(f"ledger: {where} effect {len(found)} times, executions {eids}")
            if job["status"] != "succeeded":
                self.fail(f"ledger: {where} did not succeed but has effects of {eids}")
            elif run.kind_of[job_id] not in LEDGER_KINDS:
                self.fail(f"ledger: {where} has effects, which its task never writes")
            elif len(found) == 1:
                last = job["executions"][-1] if job["executions"] else {}
                if found[0] != (job["execution_id"], last.get("worker_id")):
                    self.fail(
                        f"ledger: {where} effect from execution {found[0]} but execution "
                        f"{job['execution_id']} on {last.get('worker_id')} succeeded"
                    )
        expected = [
            job_id
            for job_id, job in self.jobs.items()
            if job["status"] == "succeeded" and run.kind_of[job_id] in LEDGER_KINDS
        ]
        for job_id in expected:
            if job_id not in effects:
                self.fail(
                    f"ledger: job {job_id} ({run.kind_of[job_id]}) succeeded without its effect"
                )
        self.ledger = {
            "rows": len(rows),
            "jobs_with_effect": len(effects),
            "succeeded_jobs_of_ledger_kinds": len(expected),
            "duplicates": sum(1 for found in effects.values() if len(found) > 1),
            "results_lost_after_commit": len(self.results_lost),
            "results_lost_sample": self.results_lost[:10],
        }

    def check_workers(self, workers: dict[str, Any]) -> None:
        for proc in self.run.procs:
            row = workers.get(proc.id or "")
            if proc.id is None:
                continue
            if row is None:
                self.fail(f"worker #{proc.number} ({proc.id}) missing from the registry")
            elif row["status"] == "active":
                self.fail(f"worker #{proc.number} ({proc.id}) still active after stopping")
            elif row["running"] or row["claimed_ahead"]:
                held = row["running"] + row["claimed_ahead"]
                self.fail(f"worker #{proc.number} ({proc.id}) still holds {held} jobs")

    # -- figures ----------------------------------------------------------------------
    def report(self, wall0: float) -> dict[str, Any]:
        run = self.run
        c = run.config
        statuses = Counter(j["status"] for j in self.jobs.values())
        by_kind: dict[str, Counter[str]] = defaultdict(Counter)
        outcomes: Counter[str] = Counter()
        detected: Counter[str] = Counter()
        latencies: dict[str, list[float]] = defaultdict(list)
        reap_lag: list[float] = []
        causes: Counter[str] = Counter()
        unexplained: list[dict[str, Any]] = []
        kills, child_kills = self.kill_times()
        for job_id, job in self.jobs.items():
            by_kind[run.kind_of[job_id]][job["status"]] += 1
            for e in job["executions"]:
                outcomes[e["outcome"] or "open"] += 1
                if e["outcome"] != "crashed":
                    continue
                crash = e["crash"] or {}
                how = crash.get("detected_by", "?")
                detected[how] += 1
                at = parse_ts(crash.get("detected_at"))
                if at is None:
                    continue
                expiry = parse_ts(crash.get("lease_expires_at"))
                if how == "lease_expired" and expiry is not None:
                    reap_lag.append(at - expiry)
                cause, since = self.cause(crash, job_id, e, kills, child_kills)
                if how in ("liveness_lock", "reconciliation") and cause != "sigkill":
                    self.false_positive(job_id, e, crash, cause)
                elif how in ("lease_expired", "stale_worker"):
                    self.slow_link_reclaim(job_id, e, crash, cause)
                causes[cause or "none"] += 1
                if cause == "failover":
                    self.failover_crash(job_id, job, e, crash)
                if cause is None:
                    unexplained.append(
                        {"job": job_id, "task": job["task"], "execution": e["execution_id"],
                         "worker": crash.get("worker_id"), "detected_by": how,
                         "detected_at": crash.get("detected_at"), "reason": crash.get("reason")}
                    )  # fmt: skip
                elif since is not None:
                    latencies[cause].append(at - since)
        resumed = sum(
            1
            for j in self.jobs.values()
            if j["status"] == "succeeded" and (j["result"] or {}).get("resumed_from", 0) > 0
        )
        side = run.side
        fenced_returns = sum(
            1
            for key, end in side.ends.items()
            if end.get("how") == "return"
            and (self.jobs.get(key[0]) or {}).get("status") == "succeeded"
            and self.jobs[key[0]]["execution_id"] != key[1]
        )
        overlaps = self.overlaps()
        events: Counter[str] = Counter()
        for proc in run.procs:
            for e in read_events(proc.log_path):
                if e["event"] in (
                    "lease_lost", "leases_untrusted", "heartbeat_failed", "claim_failed",
                    "maintenance_failed", "completion_retry", "job_released",
                    "reconciliation_complete", "worker_deactivated",
                ):  # fmt: skip
                    events[e["event"]] += 1
        faults = Counter(f.kind for f in run.faults)
        all_latencies = [x for k in ("sigkill", "sigstop") for x in latencies.get(k, [])]
        total = run.timeline.get("total", 0.0)
        terminal = sum(n for s, n in statuses.items() if s in TERMINAL)
        self.figures = {
            "backend": c.backend,
            "seed": c.seed,
            "config": {k: v for k, v in asdict(c).items() if k not in ("verbose",)},
            "duration_s": {k: round(v, 2) for k, v in run.timeline.items() if k != "t0"},
            "jobs": len(run.enqueued),
            "statuses": dict(sorted(statuses.items())),
            "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
            "executions": sum(outcomes.values()),
            "outcomes": dict(sorted(outcomes.items())),
            "faults": {
                k: faults.get(k, 0)
                for k in FAULT_KINDS
                if family_weights(run.links.families, c.fault_weights).get(k, 0) > 0
                and (k not in PG_FAULTS or c.backend == "postgres")
                and (k != "pg_restart" or run.cluster is not None)
            },
            "pg_outages_s": rounded(
                latency_summary([end - start for start, end in run.outages if end < math.inf])
            ),
            "ledger": self.ledger,
            "crash_hooks": self.crash_hooks,
            "pipelines": self.pipelines,
            "rate_limited": self.rate,
            "i2_timestamp_inversions": {
                "n": len(self.inversions),
                "max_s": round(max((d for d, _ in self.inversions), default=0.0), 4),
                "sample": [k for _, k in sorted(self.inversions, reverse=True)[:5]],
            },
            "faults_skipped": dict(run.skipped),
            "sigstops_inside_a_transaction": sum(
                1 for f in run.faults if f.kind == "sigstop" and f.detail.get("open_transactions")
            ),
            "workers_started": len(run.procs),
            "reclaims_by_detected_by": dict(sorted(detected.items())),
            "detection_latency_s": {
                "sigkill+sigstop": rounded(latency_summary(all_latencies)),
                **{k: rounded(latency_summary(v)) for k, v in sorted(latencies.items())},
            },
            "reap_lag_after_lease_expiry_s": rounded(latency_summary(reap_lag)),
            "crashes_by_cause": dict(sorted(causes.items())),
            "crashes_without_injected_cause": len(unexplained),
            "crashes_without_injected_cause_sample": unexplained[:10],
            "checkpoint_resumes": resumed,
            "fenced_out_returns": fenced_returns,
            "overlapping_attempts": overlaps,
            "worker_events": dict(sorted(events.items())),
            "throughput_jobs_per_s": round(terminal / total, 2) if total else None,
            "throughput_executions_per_s": round(sum(outcomes.values()) / total, 2)
            if total
            else None,
            "side_file_bad_lines": side.bad_lines,
            "false_positive_reclaims": self.false_positives,
            **self.link_figures(),
            **(run.hostile.figures() if run.hostile is not None else {}),
            "anomalies": list(run.anomalies),
            "violations": list(self.v),
            "ok": not self.v,
        }
        return self.figures

    def kill_times(self) -> tuple[dict[str, float], dict[tuple[str, int], float]]:
        """When the runner SIGKILLed each worker (by id) and each child (by attempt)."""
        faults = self.run.faults
        kills = {f.worker_id: f.at for f in faults if f.kind == "sigkill" and f.worker_id}
        children = {
            (f.detail["job"], f.detail["eid"]): f.at for f in faults if f.kind == "kill_child"
        }
        return kills, children

    def cause(
        self,
        crash: dict[str, Any],
        job_id: str,
        execution: dict[str, Any],
        kills: dict[str, float],
        child_kills: dict[tuple[str, int], float],
    ) -> tuple[str | None, float | None]:
        """Which injected fault explains this crash, and when it was injected (None when
        there is no latency to speak of): the last fault on its worker (or its child)
        between the start of the execution and the crash's detection."""
        at = parse_ts(crash.get("detected_at")) or 0.0
        began = parse_ts(execution["started_at"]) or 0.0
        how = crash.get("detected_by")
        key = (job_id, execution["execution_id"])
        if how == "child_exit":
            if key in child_kills:
                return "kill_child", child_kills[key]
            if self.run.kind_of[job_id] in ("chaos_child_crash", "chaos_hostile_exit"):
                return "task_killed_own_child", None
            return None, None
        worker_id = crash.get("worker_id")
        # PostgreSQL's now() is its transaction's start: a probe that began just before
        # the kill may date its detection a little earlier
        if worker_id in kills and began <= kills[worker_id] <= at + CLOCK_TOLERANCE:
            return "sigkill", kills[worker_id]
        proc = self.run.by_id(worker_id)
        run = self.run
        if run.kind_of[job_id] == "chaos_silent" and how == "lease_expired":
            return "silent_task", None  # its own doing, whatever else happened meanwhile
        during = [(kind, o[0]) for o, kind in zip(run.outages, run.outage_kinds, strict=True)]
        if proc is not None:
            for kind in ("partition", "slow_link"):
                spans = run.links.spans(proc.slot, kind)
                during += [(kind, s.start) for s in spans if s.worker == proc.number]
            if how == "reconciliation" and any(t <= at for t in proc.twinned_at):
                twinned = [t for t in proc.twinned_at if began <= t <= at]
                return "twin", (max(twinned) if twinned else None)
            during += [("sigstop", t) for t in proc.frozen_at]
            during += [("pg_terminate", t) for t in proc.terminated_backends_at]
        during = [(k, t) for k, t in during if began <= t <= at + CLOCK_TOLERANCE]
        if during:
            return max(during, key=lambda kt: kt[1])
        if proc is not None and run.links.slow_at(proc.slot, at):
            return "slow_link", None  # a slot slow all run long
        return None, None

    def false_positive(
        self, job_id: str, execution: dict[str, Any], crash: dict[str, Any], cause: str | None
    ) -> None:
        """A job taken from a worker that was alive and well. The liveness probe must only
        take a dead worker's jobs (DESIGN protocol 8), startup reconciliation only a dead
        or stale namesake's (a frozen one may be stale). One round of liveness reclaims
        right after the runner terminated a worker's sessions is expected: its session,
        so its lock, did die."""
        proc = self.run.by_id(crash.get("worker_id"))
        at = parse_ts(crash.get("detected_at")) or 0.0
        how = crash.get("detected_by")
        if proc is None or (how == "liveness_lock" and cause in PG_FAULTS):
            return
        gone = proc.killed_at or proc.exited_at or math.inf
        if at + CLOCK_TOLERANCE >= gone:
            return  # it was dead (or exiting) by then
        if how == "reconciliation" and proc.frozen_during(at):
            return  # stopped: stale, fair game
        last = max((t for t in proc.terminated_backends_at if t <= at), default=None)
        note = (
            f"; its sessions were terminated at {datetime.fromtimestamp(last):%H:%M:%S.%f}"
            if last is not None
            else ""
        )
        if len(self.run.anomalies) < 50:
            self.run.anomalies.append(
                f"{how} false positive: job {job_id} execution "
                f"{execution['execution_id']} (started {execution['started_at']}) "
                f"reclaimed at {crash.get('detected_at')} from live worker "
                f"#{proc.number} ({proc.id}; {self.history(proc)}){note}"
            )
        self.false_positives += 1

    def failover_crash(
        self, job_id: str, job: dict[str, Any], e: dict[str, Any], crash: dict[str, Any]
    ) -> None:
        """An attempt counted (crashed) because of a failover. With synchronous replication
        none should be (the worker gives up what it cannot finish: `interrupted`, not
        counted), so each is an anomaly there; asynchronous, a lost finish is reclaimed so."""
        entry = {
            "job": job_id, "task": job["task"], "execution": e["execution_id"],
            "worker": crash.get("worker_id"), "started_at": e["started_at"],
            "detected_by": crash.get("detected_by"), "detected_at": crash.get("detected_at"),
            "reason": crash.get("reason"),
        }  # fmt: skip
        self.failover_crashes.append(entry)
        pair = self.run.links.pair
        if pair is not None and pair.synchronous and len(self.run.anomalies) < 50:
            self.run.anomalies.append(f"an attempt counted for a synchronous failover: {entry}")

    def slow_link_reclaim(
        self, job_id: str, execution: dict[str, Any], crash: dict[str, Any], cause: str | None
    ) -> None:
        """A job taken (lease expired, or its worker deemed silent) from a live worker whose
        only trouble was a slow link: its heartbeats should have kept it (an anomaly)."""
        proc = self.run.by_id(crash.get("worker_id"))
        at = parse_ts(crash.get("detected_at")) or 0.0
        if proc is None or cause not in (None, "slow_link"):
            return
        if at + CLOCK_TOLERANCE >= (proc.killed_at or proc.exited_at or math.inf):
            return
        if not self.run.links.slow_at(proc.slot, at):
            return
        if len(self.run.anomalies) < 50:
            self.run.anomalies.append(
                f"{crash.get('detected_by')} on a slow link: job {job_id} execution "
                f"{execution['execution_id']} (started {execution['started_at']}) reclaimed at "
                f"{crash.get('detected_at')} from live worker #{proc.number} ({proc.id}; "
                f"{self.history(proc)})"
            )
        self.false_positives += 1

    def history(self, proc: WorkerProc) -> str:
        """What the runner did to a worker, by wall-clock time."""

        def hms(t: float) -> str:
            return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]

        parts = [f"started {hms(proc.started_at)}"]
        parts += [f"stopped {hms(t)}" for t in proc.frozen_at]
        parts += [f"sessions terminated {hms(t)}" for t in proc.terminated_backends_at]
        parts += [f"twin started {hms(t)}" for t in proc.twinned_at]
        for f in self.run.faults:
            if f.worker == proc.number and f.kind in ("sigterm", "kill_child"):
                parts.append(f"{f.kind} {hms(f.at)}")
        for kind in ("partition", "slow_link"):
            for span in self.run.links.spans(proc.slot, kind):
                if span.worker == proc.number:
                    end = "" if span.end == math.inf else f" to {hms(span.end)}"
                    parts.append(f"{kind} {hms(span.start)}{end}")
        if proc.killed_at:
            parts.append(f"killed {hms(proc.killed_at)}")
        elif proc.exited_at:
            parts.append(f"exited {hms(proc.exited_at)}")
        return ", ".join(parts)

    def link_figures(self) -> dict[str, Any]:
        """The failover, partition and slow-link figures: when each failover's steps came
        and how soon the fleet carried on after its promotion (first claim, each worker's
        first claim, by the database's clock), what asynchronous failovers lost; each
        partition's jobs reclaimed and its worker's first claim after the heal."""
        run, links = self.run, self.run.links
        claims: dict[str, list[float]] = defaultdict(list)
        for job in self.jobs.values():
            for e in job["executions"]:
                if (t := parse_ts(e["started_at"])) is not None:
                    claims[e["worker_id"]].append(t)
        for times in claims.values():
            times.sort()

        def first_after(worker_id: str | None, t: float) -> float | None:
            later = [x for x in claims.get(worker_id or "", []) if x >= t]
            return round(later[0] - t, 3) if later else None

        failovers = []
        for r in links.failovers:
            if r.promoted_at is None or r.stopped_at is None:
                continue
            alive = [p for p in run.procs if p.id and p.started_at < r.stopped_at
                     and (p.exited_at or math.inf) > r.promoted_at]  # fmt: skip
            each = [x for p in alive if (x := first_after(p.id, r.promoted_at)) is not None]
            failovers.append({
                "number": r.number,
                "cut_s": None if r.cut_at is None else round(r.stopped_at - r.cut_at, 3),
                "outage_s": round(r.promoted_at - r.stopped_at, 3),
                "rejoin_s": None if r.rejoined_at is None
                else round(r.rejoined_at - r.promoted_at, 3),
                "first_claim_s": min(each, default=None),
                "every_worker_first_claim_s": rounded(latency_summary(each)),
                "workers_without_a_claim": len(alive) - len(each),
            })  # fmt: skip
        partitions = []
        last_claim = max((t for times in claims.values() for t in times), default=0.0)
        for _slot, state in sorted(links.links.items()):
            for span in state.cuts:
                proc = next((p for p in run.procs if p.number == span.worker), None)
                if proc is None:
                    continue
                partitions.append({
                    "worker": span.worker,
                    "seconds": None if span.end == math.inf else round(span.end - span.start, 3),
                    "first_claim_after_heal_s": first_after(proc.id, span.end),
                    # healed near the end, when no job was left to claim: nothing to tell
                    "late": span.end > last_claim - LATE_HEAL,
                })  # fmt: skip
        out: dict[str, Any] = {"fault_families": list(links.families)}
        if links.pair is not None:
            out["replication"] = "sync" if links.pair.synchronous else "async"
            out["failovers"] = failovers
            out["failover_carry_on_s"] = {
                "first_claim": rounded(latency_summary(
                    [f["first_claim_s"] for f in failovers if f["first_claim_s"] is not None])),
                "outage": rounded(latency_summary([f["outage_s"] for f in failovers])),
            }  # fmt: skip
            out["failover_losses"] = dict(self.losses)
            if run.not_enqueued:
                out["failover_losses"]["dependents_not_enqueued"] = len(run.not_enqueued)
            out["failover_crashes"] = len(self.failover_crashes)
            out["failover_crashes_sample"] = self.failover_crashes[:10]
        if links.proxied:
            heal = [p["first_claim_after_heal_s"] for p in partitions]
            out["partitions"] = {
                "n": len(partitions),
                "seconds": rounded(latency_summary([p["seconds"] for p in partitions
                                                    if p["seconds"] is not None])),
                "first_claim_after_heal_s": rounded(latency_summary(
                    [x for x in heal if x is not None])),
                "workers_without_a_claim_after_heal": sum(
                    1 for p in partitions
                    if p["first_claim_after_heal_s"] is None and not p["late"]
                ),
                "healed_too_late_to_tell": sum(
                    1 for p in partitions
                    if p["first_claim_after_heal_s"] is None and p["late"]
                ),
            }  # fmt: skip
            out["slow_links"] = {
                "slots_slow_all_run": sorted(links.slow_slots),
                "spells": sum(len(s.slow) for s in links.links.values()) - len(links.slow_slots),
                "ms_each_way": run.config.slow_ms,
            }
        return out

    def overlaps(self) -> int:
        """Attempts of one job whose runs overlapped in time (a fenced-out attempt still
        running when the next began: allowed, as long as its result never landed)."""
        by_job: dict[str, list[tuple[float, float]]] = defaultdict(list)
        side = self.run.side
        for key, start in side.starts.items():
            end = side.ends.get(key)
            by_job[key[0]].append((start["t"], end["t"] if end else start["t"]))
        count = 0
        for spans in by_job.values():
            spans.sort()
            for (_, end1), (start2, _) in itertools.pairwise(spans):
                if start2 < end1:
                    count += 1
        return count


def within(at: float | None, windows: list[tuple[float, float]]) -> bool:
    """True if `at` falls inside one of `windows` (start, end)."""
    return at is not None and any(lo <= at <= hi for lo, hi in windows)


def rounded(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items()}


def format_report(fig: dict[str, Any]) -> str:
    lat = fig["detection_latency_s"]
    led = fig["ledger"]
    lines = [
        f"heartq chaos run: backend {fig['backend']}, seed {fig['seed']}",
        f"  duration      {fig['duration_s']}",
        f"  jobs          {fig['jobs']} -> {fig['statuses']}",
        f"  executions    {fig['executions']} -> {fig['outcomes']}",
        f"  faults        {fig['faults']} (skipped: {fig['faults_skipped'] or 'none'}; "
        f"SIGSTOPs inside a transaction: {fig['sigstops_inside_a_transaction']})",
        f"  workers       {fig['workers_started']} processes started",
        *(
            [f"  PostgreSQL down (stop to accepting again), seconds: {fig['pg_outages_s']}"]
            if fig["pg_outages_s"]["n"]
            else []
        ),
        f"  reclaims      {fig['reclaims_by_detected_by']}",
        *link_report(fig),
        *hostile_report(fig),
        f"  ledger        {led['rows']} rows, {led['jobs_with_effect']} jobs with an effect of "
        f"{led['succeeded_jobs_of_ledger_kinds']} succeeded that write one, duplicates "
        f"{led['duplicates']}; results lost after the commit {led['results_lost_after_commit']}",
        f"  crash hooks   told of {fig['crash_hooks']['told']} of "
        f"{fig['crash_hooks']['crashed_executions']} crashed executions "
        f"(untold: {fig['crash_hooks']['untold']}; none twice, each a crashed one)",
        f"  pipelines     {fig['pipelines']}",
        f"  rate limited  {fig['rate_limited']} (starts in any {RATE_PERIOD:g} s, by the "
        "database's clock)",
        "  detection latency (detected_at - fault time), seconds:",
    ]
    for cause, s in lat.items():
        lines.append(f"    {cause:16} n={s['n']:<4} p50={s['p50']} p95={s['p95']} max={s['max']}")
    lines += [
        f"  crashes without an injected cause: {fig['crashes_without_injected_cause']}",
        f"  I2 timestamp inversions within {CLOCK_TOLERANCE} s (PostgreSQL's now()): "
        f"{fig['i2_timestamp_inversions']['n']}, max {fig['i2_timestamp_inversions']['max_s']} s",
        f"  checkpoint resumes {fig['checkpoint_resumes']}, fenced-out returns "
        f"{fig['fenced_out_returns']}, overlapping attempts {fig['overlapping_attempts']}",
        f"  worker events {fig['worker_events']}",
        f"  throughput    {fig['throughput_jobs_per_s']} jobs/s, "
        f"{fig['throughput_executions_per_s']} executions/s",
    ]
    if fig["anomalies"]:
        lines.append(
            f"  ANOMALIES (protocol, not I1-I6; {fig['false_positive_reclaims']} jobs taken "
            "from live workers):"
        )
        lines += [f"    - {a}" for a in fig["anomalies"][:20]]
    if fig["ok"]:
        lines.append("  INVARIANTS I1-I6 and effects exactly once: all held")
    else:
        lines.append(f"  INVARIANT VIOLATIONS ({len(fig['violations'])}):")
        lines += [f"    - {v}" for v in fig["violations"]]
    return "\n".join(lines)


def link_report(fig: dict[str, Any]) -> list[str]:
    """The lines of the failover, partition and slow-link figures (none without them)."""
    lines = []
    if "failovers" in fig:
        lines.append(
            f"  failovers     {len(fig['failovers'])} ({fig['replication']} replication); "
            f"from the promotion, seconds: {fig['failover_carry_on_s']}; losses counted "
            f"(asynchronous only): {fig['failover_losses'] or 'none'}; attempts counted "
            f"(crashed) for a failover: {fig['failover_crashes']}"
        )
        for f in fig["failovers"][:40]:
            lines.append(f"    {f}")
    if "partitions" in fig:
        lines.append(f"  partitions    {fig['partitions']}")
        lines.append(f"  slow links    {fig['slow_links']}")
    return lines


def run_chaos(config: ChaosConfig) -> dict[str, Any]:
    """One chaos run; returns the figures (with `violations` and `ok`)."""
    if config.workdir:
        workdir = Path(config.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        cleanup = False
    else:
        workdir = Path(tempfile.mkdtemp(prefix=f"heartq-chaos-{config.backend}-"))
        cleanup = not config.keep
    try:
        with contextlib.ExitStack() as stack:
            cluster = pair = None
            families = parse_families(config.faults)
            if families != ("process",) and config.backend != "postgres":
                raise SystemExit("--faults failover, partition and slow-link need PostgreSQL")
            if "failover" in families:
                from tests.pg_replication import StreamingPair

                if config.replication not in ("sync", "async"):
                    raise SystemExit("--replication: sync or async")
                pair = StreamingPair(config.replication == "sync", SERVER_SETTINGS)
                stack.callback(pair.close)
                schema = f"heartq_chaos_{config.seed}"
                url = pair.url(schema=schema)
            else:
                if config.backend == "postgres" and config.private_pg:
                    from tests.pg_harness import PrivateCluster

                    cluster = PrivateCluster(SERVER_SETTINGS)
                    stack.callback(cluster.close)
                url, schema = stack.enter_context(fresh_queue(config, workdir, cluster))
            run = ChaosRun(config, workdir, url, schema, cluster, pair)
            try:
                figures = run.run()
            finally:
                run.close()
        figures["workdir"] = str(workdir) if not cleanup else None
        return figures
    finally:
        if cleanup:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak.chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = ChaosConfig()
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--duration", type=float, default=defaults.duration)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument(
        "--prefetch", type=int, default=defaults.prefetch, help="jobs claimed ahead per worker"
    )
    parser.add_argument("--fault-interval", type=float, default=defaults.fault_interval)
    parser.add_argument("--heartbeat", type=float, default=defaults.heartbeat)
    parser.add_argument("--lease", type=float, default=defaults.lease)
    parser.add_argument("--reap", type=float, default=defaults.reap)
    parser.add_argument("--liveness", type=float, default=defaults.liveness)
    parser.add_argument(
        "--pipelines",
        type=float,
        default=defaults.pipelines,
        help="share of the plan's draws that make a group or a chain (0: none)",
    )
    parser.add_argument(
        "--faults",
        default=defaults.faults,
        help="fault families, joined by commas: process (worker signals, sessions, server "
        "restarts, cancels), failover, partition, slow-link (PostgreSQL)",
    )
    parser.add_argument(
        "--replication",
        choices=["sync", "async"],
        default=defaults.replication,
        help="failover: the standby's replication",
    )
    parser.add_argument("--failover-outage", type=float, default=defaults.failover_outage)
    parser.add_argument("--failover-cut", type=float, default=defaults.failover_cut)
    parser.add_argument("--failover-gap", type=float, default=defaults.failover_gap)
    parser.add_argument("--partition-max", type=float, default=defaults.partition_max)
    parser.add_argument("--slow-ms", type=float, default=defaults.slow_ms)
    parser.add_argument("--slow-share", type=float, default=defaults.slow_share)
    parser.add_argument(
        "--hostile", type=float, default=0.0, help="share of jobs that are hostile task code"
    )
    parser.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout)
    parser.add_argument("--slack", type=float, default=defaults.slack)
    parser.add_argument("--pg-url", default=None, help="PostgreSQL server for the schema")
    parser.add_argument(
        "--private-pg",
        action="store_true",
        help="PostgreSQL: a private cluster for the run, restarted by pg_restart faults",
    )
    parser.add_argument("--workdir", default=None, help="keep logs and the side file here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--json-out", default=None, help="write the figures here as JSON")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--strict", action="store_true", help="exit 1 on protocol anomalies too")
    args = parser.parse_args(argv)
    config = ChaosConfig(
        backend=args.backend,
        duration=args.duration,
        workers=args.workers,
        jobs=args.jobs,
        seed=args.seed,
        concurrency=args.concurrency,
        prefetch=args.prefetch,
        fault_interval=args.fault_interval,
        heartbeat=args.heartbeat,
        lease=args.lease,
        reap=args.reap,
        liveness=args.liveness,
        drain_timeout=args.drain_timeout,
        pipelines=args.pipelines,
        hostile=args.hostile,
        faults=args.faults,
        replication=args.replication,
        failover_outage=args.failover_outage,
        failover_cut=args.failover_cut,
        failover_gap=args.failover_gap,
        partition_max=args.partition_max,
        slow_ms=args.slow_ms,
        slow_share=args.slow_share,
        slack=args.slack,
        pg_url=args.pg_url,
        private_pg=args.private_pg,
        workdir=args.workdir,
        keep=args.keep,
        verbose=not args.quiet,
    )
    figures = run_chaos(config)
    print(format_report(figures))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    if not figures["ok"] or (args.strict and figures["anomalies"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
