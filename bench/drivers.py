"""The PostgreSQL driver, chosen by figures: heartq's hot statements under each driver.

heartq's own statements (`store/postgres/queries/`: `CLAIM_ONE_QUEUE`, `FINISH`,
`HEARTBEAT`, `INSERT_JOBS_WAKING`), with the parameters heartq's store binds, in a
scratch schema holding a backlog of `--backlog` queued jobs (refilled, and the finished
rows removed and vacuumed, before each round), timed from the client under:

- `heartq pool`: psycopg 3 as heartq uses it today: a pooled connection of heartq's own
  `ConnectionPool` switched to autocommit for the call (`store/postgres/connection.py`),
  psycopg's defaults: a statement is prepared on the server after 5 uses of it on that
  connection (`prepare_threshold`), strings go as text, numbers in binary, results
  come back as text, rows as dicts;
- `psycopg`: the same on one plain connection (what the pool's checkout costs);
- `psycopg prepared+binary`: prepared from the first use (`prepare=True`), every
  parameter in binary (`%(name)b`) and binary results;
- `psycopg async prepared+binary`: the same on an `AsyncConnection`, awaited;
- `asyncpg`: its own protocol (statements prepared and cached, binary throughout),
  `$n` parameters, awaited. Installed into heartq's venv by hand, never a dependency.

Every variant keeps its connection for the round; the round measures, one after the
other: claim+finish cycles (`CLAIM_ONE_QUEUE` then `FINISH`) of batch 10 and of batch 100
(jobs/s, and each statement's latency), `HEARTBEAT` renewing 10 and 100 running jobs,
and single-job `INSERT_JOBS_WAKING` (an enqueue one at a time). Within each measure the
variants take turns block by block (`--blocks`, rotating order), so a shared machine
that slows down for a few seconds slows every variant alike; the table is reset
(finished rows deleted, vacuumed, the backlog refilled) before each round. Run:

    .venv/bin/pip install asyncpg    # optional: the variant is left out without it
    .venv/bin/python -m bench.drivers --rounds 5
    .venv/bin/python -m bench.drivers --quick   # one small round

Prints markdown tables: per statement, the median and p99 latency in ms over every
round's samples, and the median over rounds of each variant's throughput with the median
of its per-round ratio to `heartq pool` (the same round, so a machine that slows down
between rounds moves both). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from heartq.model import NewJob, WorkerInfo
from heartq.store import documents, open_store
from heartq.store.postgres import queries as q
from heartq.store.postgres.connection import ConnectionPool, _configure, parse_url

PARAMETER = re.compile(r"%\((\w+)\)s")
Rows = Sequence[Mapping[str, Any]]


class Driver:
    """One way of running a statement: `run(statement, params) -> rows`."""

    name = ""

    async def open(self, url: str) -> None:
        raise NotImplementedError

    async def run(self, statement: str, params: dict[str, Any]) -> Rows:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class HeartqPool(Driver):
    name = "heartq pool"

    async def open(self, url: str) -> None:
        self.pool = ConnectionPool(url, size=2)

    async def run(self, statement: str, params: dict[str, Any]) -> Rows:
        with self.pool.autocommit() as conn:
            return conn.execute(statement, params).fetchall()

    async def close(self) -> None:
        self.pool.close()


def _connect_kwargs(url: str) -> tuple[str, dict[str, Any]]:
    """heartq's conninfo and connection options (search_path, timeouts, dict rows)."""
    pool = ConnectionPool(url)
    return pool.conninfo, dict(pool.connect_kwargs)


class Psycopg(Driver):
    name = "psycopg"
    prepared = False

    async def open(self, url: str) -> None:
        conninfo, kwargs = _connect_kwargs(url)
        if self.prepared:  # `%(name)b` is psycopg's own: heartq's cursor binds `%(name)s`
            kwargs["cursor_factory"] = psycopg.Cursor
        self.conn = psycopg.connect(conninfo, autocommit=True, **kwargs)
        _configure(self.conn)
        self.texts: dict[str, str] = {}

    def _text(self, statement: str) -> str:
        text = self.texts.get(statement)
        if text is None:
            text = PARAMETER.sub(r"%(\1)b", statement) if self.prepared else statement
            self.texts[statement] = text
        return text

    async def run(self, statement: str, params: dict[str, Any]) -> Rows:
        if self.prepared:
            cursor = self.conn.execute(self._text(statement), params, prepare=True, binary=True)
            return cursor.fetchall()
        return self.conn.execute(statement, params).fetchall()

    async def close(self) -> None:
        self.conn.close()


class PsycopgPrepared(Psycopg):
    name = "psycopg prepared+binary"
    prepared = True


class PsycopgAsync(Driver):
    name = "psycopg async prepared+binary"

    async def open(self, url: str) -> None:
        conninfo, kwargs = _connect_kwargs(url)
        kwargs["cursor_factory"] = psycopg.AsyncCursor  # heartq's cursor is a sync one
        self.conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **kwargs)
        for name in ("json", "jsonb"):
            from psycopg.types.string import TextLoader

            self.conn.adapters.register_loader(name, TextLoader)
        self.texts: dict[str, str] = {}

    async def run(self, statement: str, params: dict[str, Any]) -> Rows:
        text = self.texts.get(statement)
        if text is None:
            text = self.texts[statement] = PARAMETER.sub(r"%(\1)b", statement)
        cursor = await self.conn.execute(text, params, prepare=True, binary=True)
        return await cursor.fetchall()

    async def close(self) -> None:
        await self.conn.close()


class Asyncpg(Driver):
    name = "asyncpg"

    async def open(self, url: str) -> None:
        import asyncpg  # type: ignore[import-not-found,import-untyped,unused-ignore]

        conninfo, schema = parse_url(url)
        self.conn = await asyncpg.connect(conninfo, server_settings={"search_path": schema})
        for name in ("json", "jsonb"):
            await self.conn.set_type_codec(
                name, encoder=str, decoder=str, schema="pg_catalog", format="text"
            )
        self.texts: dict[str, tuple[str, list[str]]] = {}

    def _text(self, statement: str) -> tuple[str, list[str]]:
        found = self.texts.get(statement)
        if found is None:
            names: list[str] = []

            def number(match: re.Match[str]) -> str:
                if match.group(1) not in names:
                    names.append(match.group(1))
                return f"${names.index(match.group(1)) + 1}"

            found = self.texts[statement] = (PARAMETER.sub(number, statement), names)
        return found

    async def run(self, statement: str, params: dict[str, Any]) -> Rows:
        text, names = self._text(statement)
        rows: Rows = await self.conn.fetch(text, *[params[n] for n in names])
        return rows

    async def close(self) -> None:
        await self.conn.close()


def drivers(only: Sequence[str]) -> list[Driver]:
    every: list[Driver] = [HeartqPool(), Psycopg(), PsycopgPrepared(), PsycopgAsync()]
    try:
        import asyncpg  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401

        every.append(Asyncpg())
    except ImportError:
        print("bench.drivers: asyncpg is not installed: its variant is left out", flush=True)
    return [d for d in every if not only or d.name in only]


class Scratch:
    """The scratch schema: heartq's tables, a worker, and a backlog kept at its size."""

    def __init__(self, server: str, backlog: int) -> None:
        self.server = server
        self.schema = f"bench_drivers_{uuid.uuid4().hex[:8]}"
        self.url = f"{server}{'&' if '?' in server else '?'}schema={self.schema}"
        self.backlog = backlog
        self.store = open_store(self.url)
        self.store.link.migrate()
        self.worker = WorkerInfo(id=f"drivers-{uuid.uuid4().hex[:8]}", hostname="bench",
                                 pid=0, queues=("default",), concurrency=100)  # fmt: skip
        self.store.register_worker(self.worker)
        print(f"bench.drivers: scratch schema {self.schema} (dropped at the end)", flush=True)
        self.admin = psycopg.connect(server, autocommit=True)
        self.admin.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(self.schema)))

    def reset(self) -> None:
        """Finished rows gone and vacuumed, the backlog back to its size: every turn
        starts from the same table."""
        self.admin.execute("DELETE FROM ended_executions")
        self.admin.execute("DELETE FROM job_documents AS d USING job_ends AS e"
                           " WHERE e.job_id = d.id")  # fmt: skip
        self.admin.execute("DELETE FROM job_ends")
        self.admin.execute("DELETE FROM job_documents WHERE status <> 'queued'")
        self.admin.execute("VACUUM (ANALYZE) job_documents, job_ends, ended_executions")
        row = self.admin.execute("SELECT count(*) FROM jobs").fetchone()
        missing = self.backlog - int(row[0] if row else 0)
        while missing > 0:
            count = min(missing, 10_000)
            self.store.enqueue([NewJob(task="noop", args_json="{}") for _ in range(count)])
            missing -= count

    def close(self) -> None:
        self.store.link.close()
        self.admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
            sql.Identifier(self.schema)))  # fmt: skip
        self.admin.close()


class Tally:
    """One variant's samples in one round: latencies by statement, time and count by
    throughput measure."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = {}
        self.spent: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.count: dict[str, int] = {}

    def add(self, measure: str, count: int, spent: float, cpu: float) -> None:
        self.spent[measure] = self.spent.get(measure, 0.0) + spent
        self.cpu[measure] = self.cpu.get(measure, 0.0) + cpu
        self.count[measure] = self.count.get(measure, 0) + count

    @property
    def rate(self) -> dict[str, float]:
        return {k: self.count[k] / self.spent[k] for k in self.spent}

    @property
    def cpu_per_job(self) -> dict[str, float]:
        """This process's CPU time per job, in microseconds: the driver's own cost on
        the client, apart from waiting for the server."""
        return {k: self.cpu[k] / self.count[k] * 1e6 for k in self.cpu}


class Round:
    """One round: every variant measured block by block, the variants taking turns
    within each measure (rotating order), so a machine that slows down for a few
    seconds slows every variant alike."""

    def __init__(self, chosen: list[Driver], scratch: Scratch, sizes: argparse.Namespace,
                 number: int) -> None:  # fmt: skip
        self.drivers = chosen
        self.scratch = scratch
        self.sizes = sizes
        self.number = number
        self.tally = {d.name: Tally() for d in chosen}

    def _order(self, block: int) -> list[Driver]:
        shift = (self.number + block) % len(self.drivers)
        return self.drivers[shift:] + self.drivers[:shift]

    async def timed(self, driver: Driver, label: str, statement: str,
                    params: dict[str, Any]) -> Rows:  # fmt: skip
        started = time.perf_counter()
        rows = await driver.run(statement, params)
        elapsed = time.perf_counter() - started
        self.tally[driver.name].latency.setdefault(label, []).append(elapsed * 1000)
        return rows

    def claim(self, limit: int) -> dict[str, Any]:
        return {"worker_id": self.scratch.worker.id, "queue": "default", "limit": limit,
                "lease": 30.0, "now": None, "ahead": False}  # fmt: skip

    def finish(self, rows: Rows) -> dict[str, Any]:
        docs = [documents.finish_doc(r["id"], r["execution_id"], status="succeeded",
                                     outcome="succeeded") for r in rows]  # fmt: skip
        # `defer`: as a worker finishes on its own (no job here has dependents); fenced on
        # the worker that claimed them, as a worker's finish is
        return {"worker_id": self.scratch.worker.id, **q.FINISH_BATCH.pack(docs),
                "now": None, "defer": True}  # fmt: skip

    def heartbeat(self, rows: Rows) -> dict[str, Any]:
        renewals = [{"id": r["id"], "eid": r["execution_id"], "hp": False, "pv": None,
                     "ps": None, "pm": None, "dt": False} for r in rows]  # fmt: skip
        return {"worker_id": self.scratch.worker.id, **q.RENEWAL_BATCH.pack(renewals),
                "lease": 30.0, "now": None, "abandoned": 0}  # fmt: skip

    async def cycles(self, driver: Driver, batch: int, count: int) -> None:
        """`count` claim+finish cycles of `batch` jobs, timed as a whole and each."""
        measure = f"claim+finish, batch {batch}"
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            rows = await self.timed(driver, f"claim {batch}", q.CLAIM_ONE_QUEUE, self.claim(batch))
            landed = await self.timed(driver, f"finish {batch}", q.FINISH, self.finish(rows))
            assert len(landed) == len(rows) == batch, (len(landed), len(rows))
        self.tally[driver.name].add(measure, batch * count, time.perf_counter() - started,
                                    time.process_time() - cpu)  # fmt: skip

    async def heartbeats(self, driver: Driver, batch: int, count: int) -> None:
        """`count` heartbeats renewing `batch` jobs claimed for them (fresh ones each
        block: the same rows renewed hundreds of times in a row would pile up row
        versions that one heartbeat every 30 s never does)."""
        rows = await driver.run(q.CLAIM_ONE_QUEUE, self.claim(batch))
        params = self.heartbeat(rows)
        for _ in range(count):
            renewed = await self.timed(driver, f"heartbeat {batch}", q.HEARTBEAT, params)
            assert len(renewed) == batch
        await driver.run(q.FINISH, self.finish(rows))

    async def enqueues(self, driver: Driver, count: int) -> None:
        channel = f"heartq_{self.scratch.schema}"
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            doc = documents.new_job_doc(NewJob(task="noop", args_json="{}"))
            params = {**q.JOB_BATCH.pack([doc]), "now": None, "channel": channel}
            await self.timed(driver, "enqueue 1", q.INSERT_JOBS_WAKING, params)
        self.tally[driver.name].add("enqueue one at a time", count,
                                    time.perf_counter() - started,
                                    time.process_time() - cpu)  # fmt: skip

    async def run(self) -> None:
        sizes = self.sizes
        for driver in self.drivers:  # every variant warms up alike (psycopg prepares at 5)
            for _ in range(10):
                rows = await driver.run(q.CLAIM_ONE_QUEUE, self.claim(1))
                await driver.run(q.FINISH, self.finish(rows))
        for block in range(sizes.blocks):
            for driver in self._order(block):
                await self.cycles(driver, 10, sizes.cycles_10)
        for block in range(sizes.blocks):
            for driver in self._order(block):
                await self.cycles(driver, 100, sizes.cycles_100)
        for batch in (10, 100):
            for block in range(sizes.blocks):
                for driver in self._order(block):
                    await self.heartbeats(driver, batch, sizes.heartbeats)
        for block in range(sizes.blocks):
            for driver in self._order(block):
                await self.enqueues(driver, sizes.enqueues)


async def measure(args: argparse.Namespace) -> list[Round]:
    chosen = drivers([x.strip() for x in args.only.split(",") if x.strip()])
    scratch = Scratch(args.server, args.backlog)
    rounds: list[Round] = []
    try:
        for number in range(args.rounds):
            scratch.reset()
            for driver in chosen:
                await driver.open(scratch.url)
            try:
                one = Round(chosen, scratch, args, number)
                await one.run()
            finally:
                for driver in chosen:
                    await driver.close()
            rounds.append(one)
            for driver in chosen:
                rates = one.tally[driver.name].rate
                figures = ", ".join(f"{k} {v:,.0f}/s" for k, v in rates.items())
                print(f"round {number + 1}: {driver.name}: {figures}", flush=True)
    finally:
        scratch.close()
    return rounds


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


def report(rounds: list[Round], args: argparse.Namespace) -> str:
    names = list(rounds[0].tally)
    base = names[0]
    lines = [
        f"{args.rounds} rounds, backlog {args.backlog:,} queued jobs; in each round the"
        f" variants take turns block by block ({args.blocks} blocks per measure).",
        "",
        "Latency per statement, client view, ms: median / p99 over every round's samples"
        f" (x: the median over {base}'s)",
        "",
        "| statement | " + " | ".join(names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for label in rounds[0].tally[base].latency:
        pooled = {n: [x for r in rounds for x in r.tally[n].latency[label]] for n in names}
        reference = statistics.median(pooled[base])
        cells = []
        for n in names:
            median = statistics.median(pooled[n])
            ratio = "" if n == base else f" (x{median / reference:.2f})"
            cells.append(f"{median:.3f} / {_p99(pooled[n]):.3f}{ratio}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Throughput, jobs/s: median over rounds (min-max), and the median of each round's"
        f" ratio to {base} in the same round",
        "",
        "| measure | " + " | ".join(names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for measure in rounds[0].tally[base].rate:
        cells = []
        for n in names:
            values = [r.tally[n].rate[measure] for r in rounds]
            paired = [r.tally[n].rate[measure] / r.tally[base].rate[measure] for r in rounds]
            ratio = "" if n == base else f", x{statistics.median(paired):.2f}"
            cells.append(f"{statistics.median(values):,.0f} ({min(values):,.0f}-"
                         f"{max(values):,.0f}){ratio}")  # fmt: skip
        lines.append(f"| {measure} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Client CPU per job, microseconds (this process's CPU time over the jobs; the rest"
        " of the time is waiting for the server): median over rounds",
        "",
        "| measure | " + " | ".join(names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for measure in rounds[0].tally[base].cpu_per_job:
        cells = [f"{statistics.median(r.tally[n].cpu_per_job[measure] for r in rounds):.0f}"
                 for n in names]  # fmt: skip
        lines.append(f"| {measure} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drivers",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--blocks", type=int, default=10, help="turns per measure and round")
    parser.add_argument("--cycles-10", type=int, default=20, help="cycles of 10 per block")
    parser.add_argument("--cycles-100", type=int, default=5, help="cycles of 100 per block")
    parser.add_argument("--heartbeats", type=int, default=10, help="per block")
    parser.add_argument("--enqueues", type=int, default=30, help="per block")
    parser.add_argument("--only", default="", help="comma-separated variant names")
    parser.add_argument("--quick", action="store_true", help="one small round")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.backlog, args.blocks = 1, 10_000, 2
    rounds = asyncio.run(measure(args))
    print()
    print(report(rounds, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

