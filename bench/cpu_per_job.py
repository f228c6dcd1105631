"""Where a processed job's CPU goes: the database server's and everything else's, and how
much of the machine the run keeps busy.

A contender's side script (`bench/contenders/*_side.py`) is run twice, with a small and
a large number of jobs. While its worker processes are alive (found by a substring of
their command line), the machine's busy CPU (`/proc/stat`) and the PostgreSQL server's
(every `postgres` process, with the CPU of the backends that already exited, which the
postmaster's children's counters keep) are sampled. What a worker spends to start and to
stop is the same in both runs, so the differences over the difference in jobs are what a
job costs, and the difference in CPU over the difference in time is how many cores the
processing itself keeps busy:

    .venv/bin/python -m bench.cpu_per_job --match 'heartq worker' -- \\
        .venv/bin/python bench/contenders/heartq_side.py --backend postgresql --dir /tmp/x
    .venv/bin/python -m bench.cpu_per_job --match 'pgqueuer_side.py --work' -- \\
        .bench-venv/bin/python bench/contenders/pgqueuer_side.py --dir /tmp/x

`--jobs SMALL,LARGE` is appended to the command as `--jobs N`, and `--out` in the
scratch directory if the command names none (the large run's processing rate is read
back from it); the scratch directory (`--dir`) is emptied before each run. Measured on
the shared server, so nothing else may run meanwhile. `--postmaster PID` counts only that
cluster's processes as the server (`python -m bench.cost` runs on a private one, which
other work on the machine leaves alone); `workers_us_per_job` is the CPU of the processes
the side script started and waited for (its workers), start to exit, which other work
on the machine cannot add to.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_EVERY = 0.02


@dataclass(frozen=True)
class Sample:
    at: float
    busy: float  # the machine's busy CPU seconds since boot
    server: float  # the PostgreSQL server's CPU seconds, exited backends included
    workers: int  # worker processes alive


def machine_busy() -> float:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICK  # all but idle and iowait


def sample(match: str, postmaster: int | None = None) -> Sample:
    """`postmaster`: count that cluster's processes as the server (itself and its
    children), else every process named `postgres`."""
    server, workers = 0.0, 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            command = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        cpu = sum(int(f) for f in fields[11:15]) / TICK  # utime, stime, and its children's
        if (
            name == "postgres"
            if postmaster is None
            else postmaster in (int(entry.name), int(fields[1]))
        ):
            server += cpu
        elif match in command and "cpu_per_job" not in command:
            workers += 1
    return Sample(time.monotonic(), machine_busy(), server, workers)


def while_workers_run(
    command: list[str], match: str, postmaster: int | None = None
) -> tuple[Sample, Sample, float]:
    """Run `command`; the first and last samples taken while a worker process lived,
    and the CPU of the processes `command` started and waited for (its workers: the
    side scripts start no other), read from its `/proc` entry once it has exited and
    before it is reaped. That one is exact, start to exit, whatever else runs."""
    samples: list[Sample] = []
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            samples.append(sample(match, postmaster))
            done.wait(SAMPLE_EVERY)

    thread = threading.Thread(target=sampler)
    thread.start()
    try:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = sum(int(f) for f in fields[13:15]) / TICK  # cutime, cstime
        if proc.wait() != 0:
            raise subprocess.CalledProcessError(proc.returncode, command)
    finally:
        done.set()
        thread.join()
    alive = [s for s in samples if s.workers]
    if len(alive) < 2:
        raise SystemExit(f"no worker process matching {match!r} was seen")
    return alive[0], alive[-1], children


def option(command: list[str], name: str) -> Path | None:
    return Path(command[command.index(name) + 1]) if name in command else None


def measure(
    command: list[str], match: str, small: int, large: int, postmaster: int | None = None
) -> dict[str, object]:
    """Run `command` (a side script's, naming `--dir`) with `--jobs small`, then `large`;
    what a job costs, from the differences."""
    scratch = option(command, "--dir")
    if scratch is None:
        raise SystemExit("the side script's command needs --dir")
    out = option(command, "--out") or scratch / "result.json"
    if "--out" not in command:
        command = [*command, "--out", str(out)]
    runs = []
    for jobs in (small, large):
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        first, last, own = while_workers_run([*command, "--jobs", str(jobs)], match, postmaster)
        runs.append((last.at - first.at, last.busy - first.busy, last.server - first.server, own))
    (t0, busy0, server0, own0), (t1, busy1, server1, own1) = runs
    jobs = large - small
    return {
        "command": " ".join(command),
        "jobs": [small, large],
        "seconds": [round(t0, 2), round(t1, 2)],
        "processing_jobs_per_s": round(json.loads(out.read_text())["process"]),
        "busy_cores_while_processing": round((busy1 - busy0) / (t1 - t0), 2),
        "cpu_us_per_job": round((busy1 - busy0) / jobs * 1e6, 1),
        "server_us_per_job": round((server1 - server0) / jobs * 1e6, 1),
        "rest_us_per_job": round(((busy1 - busy0) - (server1 - server0)) / jobs * 1e6, 1),
        "workers_us_per_job": round((own1 - own0) / jobs * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--match", required=True, help="a substring of the workers' command")
    parser.add_argument("--jobs", default="10000,100000", help="SMALL,LARGE")
    parser.add_argument("--postmaster", type=int, help="count only this cluster as the server")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"]
    small, large = (int(n) for n in args.jobs.split(","))
    print(json.dumps(measure(command, args.match, small, large, args.postmaster)))


if __name__ == "__main__":
    main()
