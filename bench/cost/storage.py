"""What a contender's schema keeps on disk once its jobs are done, per finished job.

Two shapes, each in a fresh database of the cost cluster (autovacuum off there, so what
the workers left is what is measured):

- **burst**: N jobs enqueued (the enqueue phase), then drained by the workers (the work
  phase), as in a counted round;
- **flow**: the workers up first, then jobs enqueued at a steady rate (`--flow-rate`, a
  rate both contenders keep up with) while they work, until every one has finished
  (the phase scripts' `flow`); the queue's depth is sampled meanwhile, to show it kept up.

After each, once the contender's backends have exited: every table of its schema (and
its indexes, TOAST and maps) measured by `bench.table_storage` as the drain left it,
then again after a plain VACUUM of each table (what autovacuum would give back: dead
versions become free space, an empty tail returns to the file system). A figure per job
is the growth from the schema as its setup made it, over the jobs finished. The setup's
schema is vacuumed before it is measured: a table's first VACUUM makes its free space
and visibility maps (32 KB even for a table of one page), which would otherwise count as
growth of the tables the jobs never wrote.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from bench import table_storage
from bench.cost.cluster import METER
from bench.cost.rounds import Contender, Rounds, fresh_database, run_quietly

Row = dict[str, Any]
SHAPES = ("burst", "flow")
SETTLE_TIMEOUT = 300.0


def measure(
    rounds: Rounds, contenders: list[Contender], jobs: int, flow_jobs: int, rate: float
) -> dict[str, dict[str, Row]]:
    """Each contender's burst of `jobs` and flow of `flow_jobs` at `rate` a second."""
    found: dict[str, dict[str, Row]] = {}
    for contender in contenders:
        found[contender.name] = {}
        for shape, count in (("burst", jobs), ("flow", flow_jobs)):
            print(f"cost: {contender.label}, storage: {shape} of {count:,}", flush=True)
            found[contender.name][shape] = shape_figures(rounds, contender, shape, count, rate)
    return found


def shape_figures(rounds: Rounds, contender: Contender, shape: str, jobs: int, rate: float) -> Row:
    """One shape's run, in a fresh database: the schema measured before it, as the
    drain left it and after a VACUUM."""
    cluster, subject = rounds.cluster, contender.subject
    database = f"cost_storage_{contender.name.replace('-', '_')}"
    with fresh_database(cluster, database) as scratch:
        url = cluster.url_for(database)
        run_quietly(rounds.command(contender, "setup", url, scratch, jobs))
        with psycopg.connect(cluster.url_for(database, user=METER), autocommit=True) as conn:
            names = table_storage.tables(conn, subject.schema)
            table_storage.vacuum(conn, subject.schema, names)  # its maps made: not the jobs'
            before = table_storage.measure(conn, subject.schema, names)
            started = time.monotonic()
            depth: list[int] = []
            if shape == "burst":
                for phase in ("enqueue", "work"):
                    run_quietly(rounds.command(contender, phase, url, scratch, jobs))
            else:
                flow = [*rounds.command(contender, "flow", url, scratch, jobs), "--rate", str(rate)]
                meter = cluster.url_for(database, user=METER)
                depth = _sampled(flow, meter, subject.depth, subject.schema)
            seconds = time.monotonic() - started
            _settle(conn)
            names = table_storage.tables(conn, subject.schema)
            row = conn.execute(subject.finished).fetchone()
            finished = int(row[0]) if row else 0
            drained = table_storage.measure(conn, subject.schema, names)
            table_storage.vacuum(conn, subject.schema, names)
            vacuumed = table_storage.measure(conn, subject.schema, names)
    figures: Row = {
        "jobs": jobs,
        "finished": finished,
        "seconds": seconds,
        "drained": table_storage.growth(before, drained, finished),
        "vacuumed": table_storage.growth(before, vacuumed, finished),
        "before": before,
    }
    if shape == "flow":
        figures |= {"rate": rate, "depth_max": max(depth, default=0),
                    "depth_mean": sum(depth) / len(depth) if depth else 0.0}  # fmt: skip
    return figures


def _sampled(command: list[str], url: str, depth: str, schema: str) -> list[int]:
    """Run the flow's phase (failing as `run_quietly` does) while sampling the queue's
    depth every 0.2 s from another connection, whose search path is the contender's
    `schema` (the depth's statement names its tables unqualified)."""
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        options = f"-c search_path={schema}"
        with psycopg.connect(url, autocommit=True, options=options) as conn:
            while not stop.wait(0.2):
                row = conn.execute(depth).fetchone()
                samples.append(int(row[0]) if row else 0)

    sampler = threading.Thread(target=sample, name="cost-depth", daemon=True)
    sampler.start()
    try:
        run_quietly(command)
    finally:
        stop.set()
        sampler.join(30)
    return samples


def _settle(conn: psycopg.Connection[Any]) -> None:
    """Wait until no other client session is left in this database: the VACUUM then
    removes every dead version, and the sizes are the drain's last."""
    others = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while (row := conn.execute(others).fetchone()) and row[0]:
        if time.monotonic() > deadline:
            raise TimeoutError("the contender's sessions did not end")
        time.sleep(0.1)
