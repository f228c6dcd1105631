"""What one round measures: every contender and every raw limit, each in a fresh place.

A contender runs as a process of its own (`bench/contenders/<name>_side.py`) with its
library's interpreter, and answers with one JSON `Result`. The raw limits run here, in
heartq's environment (`bench/limits.py`). A run that fails is recorded with its error's
last line, never dropped: the report shows it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import limits, report

CONTENDERS = Path(__file__).parent / "contenders"


@dataclass(frozen=True)
class Contender:
    """One contender in one setting."""

    name: str
    backend: str
    workers: int
    peer: bool = True
    """Runs with the peers' interpreter (else heartq's)."""
    prefetch: int = 0
    """heartq: jobs each worker claims ahead of its free slots (`--prefetch`)."""
    short_jobs: bool = False
    """heartq: its setting for short jobs, the one that matches pgqueuer's (an `async def`
    no-op on the async pool, `SHORT_JOBS_CONCURRENCY` slots, so that a claim takes as
    many jobs as pgqueuer's batch); else a plain function on a thread pool of 50."""
    fair_keys: int = 0
    """heartq: its jobs spread over this many fairness keys, in turn (`fair_key`: the
    claim takes them in turns); 0: no key, as every other run."""
    key_args: int = 0
    """heartq: its jobs carry the arguments of a run over this many fairness keys
    (`{"key": n}`) but its task has no fairness key: the run a fairness run is compared
    with, so that the ratio is what taking turns costs, not what decoding an argument
    costs (the plain runs' jobs have none)."""
    claims_async: bool = False
    """heartq on PostgreSQL: its claims commit without waiting for their flush
    (`?claim_commit=async`, opt-in); compared with the same run without."""
    before: Path | None = None
    """heartq: the checkout of an earlier heartq whose `src` this run imports instead of
    the installed one (`--before`), so that a change is timed against its base in the
    same rounds, where the machine's load weighs on both alike."""

    @property
    def label(self) -> str:
        processes = "process" if self.workers == 1 else "processes"
        ahead = f", prefetch {self.prefetch}" if self.prefetch else ""
        short = f", async x {SHORT_JOBS_CONCURRENCY}" if self.short_jobs else ""
        before = " (before)" if self.before else ""
        fair = f", {self.fair_keys} fairness keys" if self.fair_keys else ""
        if self.key_args:
            fair = f", {self.key_args} keys' arguments, no fairness"
        lazy = ", claims async" if self.claims_async else ""
        return f"{self.name}{before}, {self.workers} {processes}{ahead}{short}{fair}{lazy}"


PREFETCH = 50
"""heartq's claim-ahead runs: a buffer as deep as the workers' concurrency (50)."""
FAIR_KEYS = 20
"""heartq's runs with fairness on: each job has one of this many keys, in turn, so every
claim takes its slots from several keys' lanes (PostgreSQL) or shares (SQLite)."""
SHORT_JOBS_CONCURRENCY = 100
"""heartq's short-job runs: as many slots as pgqueuer's batch_size (its best, 100): a
worker claims at most its free slots, pgqueuer at most its batch."""

LINEUP = [
    Contender("heartq", "postgresql", 1, peer=False),
    Contender("heartq", "postgresql", 2, peer=False),
    Contender("heartq", "postgresql", 1, peer=False, prefetch=PREFETCH),
    Contender("heartq", "postgresql", 2, peer=False, prefetch=PREFETCH),
    Contender("heartq", "postgresql", 1, peer=False, short_jobs=True),
    Contender("heartq", "postgresql", 2, peer=False, short_jobs=True),
    Contender("heartq", "postgresql", 2, peer=False, fair_keys=FAIR_KEYS),
    Contender("heartq", "postgresql", 2, peer=False, key_args=FAIR_KEYS),
    Contender("heartq", "postgresql", 2, peer=False, claims_async=True),
    Contender("heartq", "postgresql", 2, peer=False, short_jobs=True, claims_async=True),
    Contender("pgqueuer", "postgresql", 1),
    Contender("pgqueuer", "postgresql", 2),
    Contender("procrastinate", "postgresql", 2),
    Contender("heartq", "sqlite", 1, peer=False),
    Contender("heartq", "sqlite", 2, peer=False),
    Contender("heartq", "sqlite", 2, peer=False, prefetch=PREFETCH),
    Contender("heartq", "sqlite", 2, peer=False, short_jobs=True),
    Contender("heartq", "sqlite", 2, peer=False, fair_keys=FAIR_KEYS),
    Contender("heartq", "sqlite", 2, peer=False, key_args=FAIR_KEYS),
    Contender("huey", "sqlite", 2),
    Contender("rq", "redis", 2),
]


@dataclass(frozen=True)
class Sizes:
    jobs: int
    single: int
    limit_seconds: float
    ceiling_jobs: int


FULL = Sizes(jobs=20_000, single=1_000, limit_seconds=3.0, ceiling_jobs=20_000)
QUICK = Sizes(jobs=400, single=50, limit_seconds=1.0, ceiling_jobs=400)


def run_contender(
    contender: Contender, sizes: Sizes, python: Path, server: str, redis: str | None
) -> dict[str, Any]:
    """One contender's `Result` as a dict, or `{"error": ...}` if it failed twice: a peer
    run that fails once (a worker of the peer's own dying on a loaded machine) is run
    again, and the first failure is kept in its notes."""
    record: dict[str, Any] = {"label": contender.label, "backend": contender.backend}
    if contender.backend == "redis" and redis is None:
        return record | {"error": "no Redis answers and no redis-server to start one"}
    first = _run_contender_once(contender, sizes, python, server, redis)
    if "error" not in first:
        return record | first | _before(contender)
    again = _run_contender_once(contender, sizes, python, server, redis)
    if "error" in again:
        return record | {"error": f"{again['error']} (and before: {first['error']})"}
    notes = [*again.get("notes", []), f"run again after a failed run: {first['error']}"]
    return record | again | {"notes": notes} | _before(contender)


def _before(contender: Contender) -> dict[str, Any]:
    """A `--before` run is reported as a contender of its own, so that the report's
    ratios read "heartq now / heartq before" as they read "heartq / a peer"."""
    return {"contender": report.BEFORE} if contender.before else {}


def with_before(lineup: list[Contender], checkout: Path) -> list[Contender]:
    """The lineup with each heartq contender also run from `checkout`, right after it
    (but the runs of a choice an earlier heartq may not have: claims async)."""
    out: list[Contender] = []
    for contender in lineup:
        out.append(contender)
        if contender.name == "heartq" and not contender.claims_async:
            out.append(replace(contender, before=checkout))
    return out


def _run_contender_once(
    contender: Contender, sizes: Sizes, python: Path, server: str, redis: str | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"heartq-bench-{contender.name}-") as tmp:
        out = Path(tmp) / "result.json"
        command = [
            str(python), str(CONTENDERS / f"{contender.name}_side.py"),
            "--jobs", str(sizes.jobs), "--single", str(sizes.single),
            "--workers", str(contender.workers), "--backend", _side_backend(contender),
            "--server", server, "--redis", redis or "", "--dir", tmp, "--out", str(out),
        ]  # fmt: skip
        if contender.prefetch:
            command += ["--prefetch", str(contender.prefetch)]
        if contender.short_jobs:
            command += ["--concurrency", str(SHORT_JOBS_CONCURRENCY), "--pool", "async"]
        if contender.fair_keys:
            command += ["--fair-keys", str(contender.fair_keys)]
        if contender.key_args:
            command += ["--key-args", str(contender.key_args)]
        if contender.claims_async:
            command += ["--claim-commit", "async"]
        env = None
        if contender.before is not None:
            env = {**os.environ, "PYTHONPATH": str(contender.before / "src")}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0 or not out.exists():
            lines = [x.strip() for x in done.stderr.splitlines() if x.strip()]
            return {"error": " | ".join(lines[-4:]) or f"exit {done.returncode}"}
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def run_limits(sizes: Sizes, server: str, scratch: Path) -> list[dict[str, Any]]:
    """The raw limits and heartq's bare-statement ceiling, each as one record."""
    seconds = sizes.limit_seconds
    measures: list[tuple[str, str, str, Any]] = [
        ("pgbench UPDATE, 1 client", "postgresql", "transactions/s",
         lambda: limits.pgbench(server, 1, seconds, scratch)),
        ("pgbench UPDATE, 4 clients", "postgresql", "transactions/s",
         lambda: limits.pgbench(server, 4, seconds, scratch)),
        ("SQLite WAL commits, synchronous=NORMAL", "sqlite", "transactions/s",
         lambda: limits.sqlite_commits("NORMAL", seconds, scratch)),
        ("SQLite WAL commits, synchronous=FULL", "sqlite", "transactions/s",
         lambda: limits.sqlite_commits("FULL", seconds, scratch)),
    ]  # fmt: skip
    for batch in (10, 100):
        schema = f"bench_ceiling_{uuid.uuid4().hex[:8]}"
        measures += [
            (f"heartq statements, batch {batch}", "postgresql", "jobs/s",
             _ceiling(f"{_schema_url(server, schema)}", batch, sizes, server, schema)),
            (f"heartq statements, batch {batch}", "sqlite", "jobs/s",
             _ceiling(f"sqlite:///{scratch / f'ceiling-{batch}.db'}", batch, sizes)),
        ]  # fmt: skip
    records = []
    for label, backend, unit, measure in measures:
        record: dict[str, Any] = {"label": label, "backend": backend, "unit": unit}
        try:
            record["value"] = float(measure())
        except Exception as exc:  # noqa: BLE001 - recorded and reported, never dropped
            record["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        records.append(record)
    return records


def _ceiling(
    url: str, batch: int, sizes: Sizes, server: str | None = None, schema: str | None = None
) -> Any:
    def measure() -> float:
        try:
            return limits.ceiling(url, batch, sizes.ceiling_jobs)
        finally:
            if server and schema:
                limits.drop_schema(server, schema)

    return measure


def _schema_url(server: str, schema: str) -> str:
    return f"{server}{'&' if '?' in server else '?'}schema={schema}"


def _side_backend(contender: Contender) -> str:
    return contender.backend if contender.backend in ("sqlite", "postgresql") else "sqlite"


def interpreter(contender: Contender, peers: Path) -> Path:
    return peers if contender.peer else Path(sys.executable)
