"""Worker processes a benchmark starts and stops: `bench.fleet`'s fleets and
`bench.pressure`'s workers.

Each process's stderr goes to a log file of its own; stopping them (SIGTERM, then a
kill after 120 s) collects the error lines of those logs (three a worker at most), which
the benchmarks report as failures: a figure from a run whose workers logged errors is
not a figure of the code working.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from bench.contenders.common import FAIR_KEY

TASKS = f"""
import time
import heartq

app = heartq.App()

@app.task
def noop() -> None:
    return None

@app.task(fair_key={FAIR_KEY!r})
def fair_noop(key: int) -> None:
    return None

@app.task
def hold(seconds: float) -> list[float]:
    began = time.time()
    time.sleep(seconds)
    return [began, time.time()]
"""
"""The benchmarks' workers' tasks module (each writes it where its workers import it):
`noop`; `fair_noop`, the no-op with a fairness key (`bench.pressure --fair-keys`); and
`hold`, which sleeps and returns when it began and ended (`bench.fleet_io` reads where a
slot's time went from those)."""


class WorkerProcesses:
    """One process of `command` per log in `logs`, started now, with `env`."""

    def __init__(self, command: list[str], env: dict[str, str], logs: list[Path]) -> None:
        self.logs = logs
        self.procs = [
            subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"))
            for log in logs
        ]
        self.errors: list[str] = []
        """The logs' error lines, once stopped."""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def exited(self) -> list[int]:
        """Exit codes of the workers that stopped on their own."""
        return [code for proc in self.procs if (code := proc.poll()) is not None]

    def failed(self) -> bool:
        return bool(self.exited())

    def stop(self) -> list[str]:
        """SIGTERM each, wait; the error lines of their logs (also kept in `errors`)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in zip(self.procs, self.logs, strict=True):
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
                self.errors.append(f"{log.name}: killed, not stopped within 120 s of SIGTERM")
            self.errors += [
                f"{log.name}: {line}"
                for line in log.read_text().splitlines()
                if " error " in line or "Traceback" in line
            ][:3]
        return self.errors
