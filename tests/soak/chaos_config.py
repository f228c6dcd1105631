"""The chaos runner's configuration, and the vocabulary its parts share: the fault
kinds and a fault's record, the job kinds that write an effect, how the database's
timestamps and the runner's own errors are read (`tests/soak/chaos.py` says what a run
does)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from heartq.errors import StoreUnavailable
from heartq.model import STORED_OUTCOMES, TERMINAL_STATUSES, DetectedBy

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
SETTLED = TERMINAL | {"blocked"}
"""Where a drained run leaves a job: ended, or blocked by a dead dependency (nothing moves
it but an operator's replay or cancel; the checker holds each to a dead root)."""
OUTCOMES = {str(o) for o in STORED_OUTCOMES}
DETECTORS = {str(d) for d in DetectedBy}
FAULT_KINDS = (
    "sigkill", "sigstop", "sigterm", "twin", "kill_child", "pg_terminate", "pg_restart",
    "horizon", "cancel", "pause", "failover", "partition", "slow_link", "nats_leader",
    "nats_freeze", "nats_partition",
)  # fmt: skip
"""Fault kinds, in the order the figures list them."""
PG_FAULTS = ("pg_terminate", "pg_restart", "horizon", "failover")
LEDGER_KINDS = frozenset(
    {"chaos_short", "chaos_long", "chaos_proc_long", "chaos_flaky", "chaos_silent",
     "chaos_async", "chaos_child_crash", "chaos_fan_in", "chaos_rated", "chaos_add",
     "chaos_fixable", "chaos_snoozy", "chaos_limited"}
)  # fmt: skip
"""The kinds that can succeed: each writes its effect (one ledger row) in the transaction
that completes its job (`chaos_tasks.effect`)."""
LEDGER_TABLE = "chaos_ledger"
CLOCK_TOLERANCE = 0.25
"""Seconds a detection time may precede the fault it detects: PostgreSQL's `now()` is
the start of the transaction, which may begin just before the fault it then sees."""
START_SLACK = 10.0
"""Seconds an attempt's code may take to begin once its start was decided (a process-pool
child on a loaded machine: the worker's first one waits for its forkserver to start and
import the app)."""
POOLS = ("process", "thread", "async")
"""Slot i runs POOLS[i % 3]; process-pool slots also serve the `proc` queue."""


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
    reclaim: float = 0.5
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
            "horizon": 1.0,
            "cancel": 1.5,
            "twin": 1.0,
            "pause": 0.7,
        }
    )
    faults: str = "process"
    """The fault families (`chaos_links.FAMILIES`, joined by commas): `process` (the kinds
    of `fault_weights`: worker signals, sessions, server restarts, held horizons,
    cancels, queues paused), `failover`, `partition`, `slow-link` (PostgreSQL only; see
    tests/soak/chaos_links.py)."""
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
    """The share of the plan's draws that make a pipeline (a group with its callback, a
    chain, a result-passing chain, a blocked-and-replayed one) instead of one job; 0 for
    none."""
    hostile: float = 0.0
    """The share of standalone jobs replaced by hostile ones (tests/soak/chaos_hostile.py)."""
    fair: float = 0.3
    """The share of standalone jobs given a fairness key, most of them one flooding key
    (tests/soak/chaos_fair.py)."""
    drain_timeout: float = 60.0
    slack: float = 5.0
    """Scheduling slack on top of lease + reclaim interval before a gone worker's job is a
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
        return self.lease + self.reclaim + self.slack


@dataclass
class Fault:
    kind: str
    at: float  # wall clock (time.time()), comparable with the database's timestamps
    worker: int | None = None  # WorkerProc.number
    worker_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def parse_ts(text: str | None) -> float | None:
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def within(at: float | None, windows: list[tuple[float, float]]) -> bool:
    """True if `at` falls inside one of `windows` (start, end)."""
    return at is not None and any(lo <= at <= hi for lo, hi in windows)


def first_line(exc: object) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def stderr_line(exc: subprocess.CalledProcessError) -> str:
    """The first line of what a failed command said (its error if it said nothing)."""
    err = exc.stderr
    text = err.decode(errors="replace") if isinstance(err, bytes) else str(err or "")
    return first_line(text or exc)
