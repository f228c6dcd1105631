"""The `heartq worker` processes of a chaos run as the runner knows them (`WorkerProc`),
what they log, and what Linux's /proc tells of them (stopped threads, child processes)."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.soak.chaos_config import parse_ts


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
    up_at: float | None = None
    """When it logged `worker_started` (wall clock, read with its id): from then on its
    maintenance may reclaim the jobs of a worker that died. Launched is not up: on a
    loaded 2-core machine a worker took 7.8-8.9 s from its launch to that line."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def freezes(self) -> list[tuple[float, float]]:
        """Each SIGSTOP the runner sent it and the SIGCONT that ended it (inf: none)."""
        ends = sorted([*self.thawed_at, math.inf])
        return [(start, min(e for e in ends if e >= start)) for start in self.frozen_at]

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
                            doc = json.loads(line)
                            self.id = str(doc["worker_id"])
                            self.up_at = parse_ts(doc.get("ts")) or time.time()
                            break
        return self.id


def unwatched(procs: list[WorkerProc], dead: WorkerProc, since: float, now: float) -> float:
    """Seconds between `since` and `now` when no worker of `procs` but `dead` was up (its
    `worker_started` logged, not yet killed or exited) and running (not SIGSTOPped):
    added to the zombie bound, since no one can reclaim a job meanwhile. Under load
    the runner's kills can outrun the replacements' startups and leave a fleet of
    workers still importing (seed 72: the four replacements took 7.8-8.9 s to come
    up)."""
    watched: list[tuple[float, float]] = []
    for proc in procs:
        if proc is dead or proc.read_id() is None or proc.up_at is None:
            continue
        gone = proc.killed_at or proc.exited_at or (None if proc.alive() else now)
        lo, hi = max(proc.up_at, since), min(gone or now, now)
        for stop, thaw in proc.freezes():  # a frozen worker reclaims nothing
            if lo < stop < hi:
                watched.append((lo, stop))
            lo = max(lo, min(thaw, hi)) if stop <= hi else lo
        if hi > lo:
            watched.append((lo, hi))
    covered, reach = 0.0, since
    for lo, hi in sorted(watched):
        lo = max(lo, reach)
        if hi > lo:
            covered += hi - lo
            reach = hi
    return max(0.0, now - since - covered)


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
