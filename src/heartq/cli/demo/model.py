"""What the demo works with: its timings, its workers, the kill and the jobs it held."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from heartq.errors import HeartqError

APP_REF = "heartq.demo_tasks:app"
TICK = 0.125
"""Seconds between two looks at the database (and two frames of the live view)."""
KILL_AFTER = 1.0
"""The victim is killed once jobs have been running for at least this long."""
KILL_WAIT_MAX = 10.0
"""If no worker holds several jobs by then, the busiest one is killed anyway."""
START_TIMEOUT = 20.0
"""Seconds the workers get to start and register."""
MIN_RUN_TIMEOUT = 50.0
"""Seconds, from the start of the demo, for every job to finish (more for big --jobs)."""
STOP_TIMEOUT = 8.0
"""Seconds the survivors get to stop on SIGTERM before they are killed."""
JOB_SECONDS = (2.0, 5.0)
"""Each demo job works for a random duration in this range."""

DETECTED_BY_LABELS = {
    "liveness_lock": "liveness lock",
    "lease_expired": "lease expiry (lease reclaimer)",
    "stale_worker": "stale heartbeat (worker monitor)",
    "reconciliation": "restart reconciliation",
    "child_exit": "child exit",
}


@dataclass(frozen=True)
class DemoSettings:
    """The timings of the demo's workers: the whole protocol in a few seconds."""

    heartbeat_interval: float = 0.5
    lease: float = 1.5
    reclaim_interval: float = 0.5
    liveness_interval: float = 0.25
    poll_interval: float = 0.1
    concurrency: int = 4
    shutdown_timeout: float = 5.0

    def worker_args(self) -> list[str]:
        options = {
            "--concurrency": str(self.concurrency),
            "--heartbeat-interval": f"{self.heartbeat_interval:g}",
            "--lease": f"{self.lease:g}",
            "--reclaim-interval": f"{self.reclaim_interval:g}",
            "--liveness-interval": f"{self.liveness_interval:g}",
            "--poll-interval": f"{self.poll_interval:g}",
            "--shutdown-timeout": f"{self.shutdown_timeout:g}",
            "--log-format": "json",
        }
        return [part for option in options.items() for part in option]


class DemoFailed(HeartqError):
    """The demo could not show a recovery; the message is the one-line reason."""


@dataclass
class DemoWorker:
    index: int
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    worker_id: str | None = None
    killed: bool = False

    @property
    def short(self) -> str:
        return f"w{self.index}"


@dataclass
class HeldJob:
    """A job the killed worker held: what it was doing, and how it was found."""

    job_id: str
    progress: float | None = None
    stage: str | None = None
    crash: dict[str, Any] | None = None
    finished_first: bool = False  # it finished in the instant before the kill
    rerun_by: str | None = None
    succeeded: bool = False


@dataclass
class Event:
    at: float
    text: str
    style: str = ""


@dataclass
class Kill:
    worker: DemoWorker
    at: float  # on the demo's monotonic clock
    db_time: float  # on the database's clock, to compare with crash contexts
    held: dict[str, HeldJob] = field(default_factory=dict)
    inactive_seen: bool = False
    scanned: bool = False


def short_id(job_id: str) -> str:
    """The random tail of a time-ordered id: jobs enqueued together differ there."""
    return job_id.replace("-", "")[-8:]


