"""What a test run leaves behind if it is killed, and how the next run removes it.

A run is one pytest session: its controller (the `pytest` process; with xdist, the
process that drives the workers) and every process started under it. The controller
names the run after itself (`RunId`: its pid and start time, unique on a machine) and
exports the name in `HQTEST_RUN`, which every process started under it inherits: the
xdist workers, the heartq workers the tests start in sessions of their own, private
PostgreSQL and NATS servers (daemons, no longer children of anyone), the browser. What
the run writes outside pytest's `tmp_path` (private servers' data) goes under its
scratch directory, named after the run too; its PostgreSQL database and schemas carry
the run's token (`tests/pg_harness.py`).

At its end the controller stops every process of its own run that is still there and
removes its scratch directory, database and schemas (after a Ctrl-C, whatever the interrupted
teardowns missed). At its start it does the same for every run whose controller is gone
(SIGKILL, a power loss): a run is judged by its controller alone, so what a concurrent
run still uses is never touched, and nothing unmarked (a server of the machine's own, a
run of an older checkout) is either.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MARK = "HQTEST_RUN"
"""The environment variable naming the run a process belongs to (not `HEARTQ_*`: tests
hand their subprocesses an environment without heartq's own settings, and this must
survive that)."""

SCRATCH_PREFIX = "heartq-run-"
STOP_GRACE = 3.0
"""Seconds a leftover process has to exit after SIGTERM before it is killed."""

_RUN_ID = re.compile(r"^(\d+)-(\d+)$")


@dataclass(frozen=True)
class RunId:
    """A run, named after its controller: its pid and start time (in hundredths of a
    second, the kernel's resolution), which together never name two processes."""

    pid: int
    started: int

    def __str__(self) -> str:
        return f"{self.pid}-{self.started}"

    @classmethod
    def parse(cls, text: str) -> RunId | None:
        match = _RUN_ID.match(text)
        return cls(int(match[1]), int(match[2])) if match else None

    @classmethod
    def of(cls, pid: int) -> RunId:
        """The run `pid` would name (psutil.NoSuchProcess if there is no such process)."""
        return cls(pid, round(psutil.Process(pid).create_time() * 100))

    def alive(self) -> bool:
        """Whether the controller still runs (a pid reused since has another start)."""
        try:
            return abs(RunId.of(self.pid).started - self.started) <= 1
        except psutil.NoSuchProcess:
            return False


def this_run() -> RunId:
    """The run this process belongs to: its controller's, else its own (a process outside
    any run, such as a benchmark using the harness, is a run of its own)."""
    return RunId.parse(os.environ.get(MARK, "")) or RunId.of(os.getpid())


def start_run() -> RunId:
    """Make this process a run's controller: every process started from now on inherits
    the run's name (an inherited one, of a run this one is nested in, is replaced)."""
    run = RunId.of(os.getpid())
    os.environ[MARK] = str(run)
    return run


def scratch_dir() -> Path:
    """This run's scratch directory (made on first use): for what the run writes outside
    `tmp_path`, such as a private server's data, so that it goes when the run goes. It is
    open to all (0755): a private server may run as another user."""
    path = Path(tempfile.gettempdir()) / f"{SCRATCH_PREFIX}{this_run()}"
    if not path.is_dir():
        path.mkdir(exist_ok=True)
        path.chmod(0o755)
    return path


@dataclass
class Removed:
    """What a sweep removed, to be told to the person who ran the tests."""

    processes: list[str] = field(default_factory=list)
    directories: list[Path] = field(default_factory=list)
    schemas: list[str] = field(default_factory=list)
    databases: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.directories or self.schemas or self.databases)

    def summary(self) -> str:
        shown = ", ".join(self.processes[:5]) + (", ..." if len(self.processes) > 5 else "")
        parts = [
            f"processes: {len(self.processes)} ({shown})" if self.processes else "",
            f"PostgreSQL databases: {len(self.databases)}" if self.databases else "",
            f"PostgreSQL schemas: {len(self.schemas)}" if self.schemas else "",
            f"scratch directories: {len(self.directories)}" if self.directories else "",
        ]
        return "; ".join(p for p in parts if p)


def marked_processes() -> dict[RunId, list[psutil.Process]]:
    """Every process this user may see that belongs to a run, by run; never this process
    nor its ancestors (a nested run's controller still carries its parent's name)."""
    spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found: dict[RunId, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        if proc.pid in spared:
            continue
        try:
            run = RunId.parse(proc.environ().get(MARK, ""))
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if run is not None:
            found.setdefault(run, []).append(proc)
    return found


def stop(processes: Iterable[psutil.Process], grace: float = STOP_GRACE) -> list[str]:
    """SIGTERM, then SIGKILL what is left after `grace` seconds; returns `name[pid]` of
    each process stopped."""
    signalled: list[psutil.Process] = []
    names: list[str] = []
    for proc in processes:
        with contextlib.suppress(psutil.Error):  # gone already, or not ours to stop
            name = f"{proc.name()}[{proc.pid}]"
            proc.resume()  # a SIGSTOPped test worker must hear SIGTERM too
            proc.terminate()
            signalled.append(proc)
            names.append(name)
    _, alive = psutil.wait_procs(signalled, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)
    return names


def _scratch_dirs() -> dict[RunId, Path]:
    found = {}
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        run = RunId.parse(path.name.removeprefix(SCRATCH_PREFIX))
        if run is not None:
            found[run] = path
    return found


def _remove(path: Path) -> bool:
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


def sweep_dead_runs() -> Removed:
    """Remove what every run whose controller is gone left: its processes, its scratch
    directory, its database and schemas on this run's PostgreSQL server. Live runs are
    left alone."""
    from tests import pg_harness

    removed = Removed()
    for run, processes in marked_processes().items():
        if not run.alive():
            removed.processes += stop(processes)
    for run, path in _scratch_dirs().items():
        if not run.alive() and _remove(path):
            removed.directories.append(path)
    removed.databases = pg_harness.sweep_databases()
    removed.schemas = pg_harness.sweep_schemas()
    return removed


def finish_run(run: RunId) -> Removed:
    """At the end of `run` (in its controller): stop its processes still there, drop its
    database and schemas, remove its scratch directory. After a normal run only the
    database is left to drop (every process of the run makes its schemas there); after a
    Ctrl-C, also what the interrupted teardowns did not get to."""
    from tests import pg_harness

    removed = Removed()
    removed.processes = stop(marked_processes().get(run, []))
    pg_harness.drop_run_database(run)  # the run's own, used or not: not worth a word
    removed.schemas = pg_harness.drop_run_schemas(run)
    path = _scratch_dirs().get(run)
    if path is not None:
        _remove(path)  # the run's own, used or not: not worth a word
    return removed
