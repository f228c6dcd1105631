"""`python -m bench.nats_cluster_faults`: what a lost stream leader and a frozen node
cost heartq's NATS transport on a three-node JetStream cluster (docs/NATS.md, "Running
on a cluster").

A private cluster (`bench/servers/jetstream_cluster.py`), a SQLite queue, three workers
(`--concurrency 4 --poll-interval 1`, the transport URL listing the three nodes,
`replicas=3`) and one producer enqueuing at a steady pace (`--rate` single enqueues a
second, plus an `enqueue_many` of 10 every second). After `--warmup` seconds, a fault:

- `leader`: the stream leader's node SIGKILLed, restarted 15 s later;
- `freeze`: the node most workers are connected to SIGSTOPped for 10 s.

Figures, from the database's clock (`started_at - created_at` of each job) and the
producer's: the wait of jobs before the fault (p50, max) and of those enqueued from 2 s
before it to 20 s after (max, and how many waited over 2 s), the longest pause between
two job completions after the fault, and the longest `enqueue` and `enqueue_many` calls
after it (a blocked enqueue also pauses the producer: fewer jobs then).
`--no-nats` runs the same load without the transport, for comparison.

    .venv/bin/python -m bench.nats_cluster_faults --fault leader
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import heartq
from bench.servers import jetstream
from bench.servers.jetstream_cluster import Node, PrivateCluster
from heartq.store import open_store

TASKS = textwrap.dedent(
    """
    import time
    import heartq

    app = heartq.App()


    @app.task
    def work(ms: int = 20):
        time.sleep(ms / 1000)
    """
)


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def client_ports(pid: int) -> set[int]:
    """The remote ports of `pid`'s established TCP connections (Linux `/proc`): which
    node a worker's NATS client is connected to."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[9] in inodes and fields[3] == "01":  # ESTABLISHED
            ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def busiest(cluster: PrivateCluster, pids: list[int]) -> Node:
    """The node most of these processes are connected to."""
    counts = {node.name: 0 for node in cluster.nodes}
    for pid in pids:
        for node in cluster.nodes:
            if node.port in client_ports(pid):
                counts[node.name] += 1
    return cluster.node(max(counts, key=lambda name: counts[name]))


class Producer:
    """Enqueues at a steady pace on its own thread; keeps each enqueue_many's duration."""

    def __init__(self, app: heartq.App, rate: float) -> None:
        self.app = app
        self.rate = rate
        self.stop = threading.Event()
        self.many: list[tuple[float, float]] = []  # (began, seconds), monotonic
        self.one: list[tuple[float, float]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_many = time.monotonic()
        while not self.stop.is_set():
            began = time.monotonic()
            self.app.enqueue("work")
            self.one.append((began, time.monotonic() - began))
            if time.monotonic() >= next_many:
                began = time.monotonic()
                self.app.enqueue_many("work", [{"ms": 20}] * 10)
                self.many.append((began, time.monotonic() - began))
                next_many = began + 1.0
            self.stop.wait(1.0 / self.rate)


def run(
    fault: str, nats: bool, rate: float, warmup: float, after: float, keep: Path | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, PrivateCluster.running() as cluster:
        directory = Path(tmp)
        (directory / "tasks.py").write_text(TASKS)
        url = f"sqlite:///{directory / 'heartq.db'}"
        store = open_store(url)
        store.link.migrate()
        transport = f"{cluster.servers}?{jetstream.names()}&replicas=3" if nats else None
        argv = [sys.executable, "-m", "heartq", "worker", "tasks:app", "--url", url]
        argv += ["--concurrency", "4", "--poll-interval", "1", "--log-level", "debug"]
        argv += ["--log-format", "json"]
        if transport:
            argv += ["--transport", transport]
        workers = []
        for n in range(3):
            log = open(directory / f"worker-{n}.log", "wb")  # noqa: SIM115 - the worker keeps it
            workers.append(subprocess.Popen(argv, cwd=directory, stdout=log, stderr=log))
        app = heartq.App(url, transport=transport)
        producer = Producer(app, rate)
        try:
            deadline = time.monotonic() + 30
            while len(store.list_workers()) < 3:
                if time.monotonic() > deadline:
                    raise RuntimeError("the workers did not start")
                time.sleep(0.05)
            time.sleep(1.0)
            producer.thread.start()
            time.sleep(warmup)
            victim = (
                cluster.node(cluster.stream_leader(_stream(transport)) or "n1")
                if fault == "leader" and transport
                else busiest(cluster, [w.pid for w in workers])
            )
            fault_wall = time.time()
            fault_at = victim.kill() if fault == "leader" else victim.freeze()
            if fault == "leader":
                time.sleep(15)
                cluster.restart(victim)
                time.sleep(max(0.0, after - 15))
            else:
                time.sleep(10)
                victim.thaw()
                time.sleep(max(0.0, after - 10))
            producer.stop.set()
            producer.thread.join(30)
            deadline = time.monotonic() + 120
            while any(c for _q, s, c in store.count_jobs() if s != "succeeded"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jobs did not all succeed: {store.count_jobs()}")
                time.sleep(0.2)
            jobs = _jobs(directory / "heartq.db")
        finally:
            producer.stop.set()
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(30)
            app.close()
            store.link.close()
        logs = [(directory / f"worker-{n}.log").read_text() for n in range(3)]
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for n, log in enumerate(logs):
                (keep / f"worker-{n}.log").write_text(log)
            (keep / "fault.json").write_text(json.dumps({"at": fault_wall}))
    calls = {"enqueue": producer.one, "enqueue_many": producer.many}
    return _figures(jobs, fault_wall, fault_at, calls, victim.name, logs)


def _stream(transport: str | None) -> str:
    from heartq.transport.settings import NatsOptions

    assert transport is not None
    stream = NatsOptions.parse(transport).stream
    assert stream is not None
    return stream


def _jobs(db: Path) -> list[tuple[float, float, float, int]]:
    """(created, first started, finished, executions) of every job: the database's clock."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT j.created_at, min(e.started_at), j.finished_at, count(e.job_id) "
            "FROM heartq_jobs AS j JOIN heartq_executions AS e ON e.job_id = j.id "
            "GROUP BY j.id"
        ).fetchall()
    return [(float(c), float(s), float(f), int(n)) for c, s, f, n in rows]


def _figures(
    jobs: list[tuple[float, float, float, int]],
    fault_wall: float,
    fault_at: float,
    calls: dict[str, list[tuple[float, float]]],
    victim: str,
    logs: list[str],
) -> dict[str, Any]:
    before = [s - c for c, s, _f, _n in jobs if c < fault_wall - 2]
    around = [s - c for c, s, _f, _n in jobs if fault_wall - 2 <= c <= fault_wall + 20]
    finishes = sorted(f for _c, _s, f, _n in jobs if f >= fault_wall - 1)
    gaps = [b - a for a, b in itertools.pairwise(finishes) if a <= fault_wall + 25]
    slowest = {
        f"{name}_max": max((s for began, s in made if began >= fault_at - 1), default=0.0)
        for name, made in calls.items()
    }
    said: list[str] = []
    for n, log in enumerate(logs):
        for line in log.splitlines():
            if '"event": "transport_' not in line:
                continue
            event = json.loads(line)
            at = _ts(event["ts"]) - fault_wall
            what = event.get("reason") or event.get("error") or ""
            if "degraded_for" in event:
                what += f" after {event['degraded_for']:.2f} s"
            said.append(f"{at:+6.2f} w{n} {event['event'][10:]} {what}".rstrip())
    said.sort(key=lambda line: float(line.split()[0]))
    return {
        "victim": victim,
        "jobs": len(jobs),
        "run_twice": sum(1 for *_t, n in jobs if n != 1),
        "wait_before_p50": statistics.median(before),
        "wait_before_max": max(before),
        "wait_around_max": max(around),
        "waited_over_2s": sum(1 for w in around if w > 2),
        "completion_pause_max": max(gaps),
        **slowest,
        "events": said,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=["leader", "freeze"], default="leader")
    parser.add_argument("--no-nats", action="store_true", help="the same load, no transport")
    parser.add_argument("--rate", type=float, default=20.0, help="single enqueues a second")
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--after", type=float, default=25.0, help="seconds run after the fault")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="copy the workers' logs (debug) here")
    args = parser.parse_args()
    for n in range(args.runs):
        keep = args.keep / str(n) if args.keep else None
        found = run(args.fault, not args.no_nats, args.rate, args.warmup, args.after, keep)
        said = found.pop("events")
        print(json.dumps({"fault": args.fault, "nats": not args.no_nats, **found}), flush=True)
        for line in said:
            print("   ", line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
