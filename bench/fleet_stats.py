"""What the fleet section reads from the server: statement statistics, sampled statement
durations, commits and CPU time.

PostgreSQL 15's `pg_stat_statements` keeps, per statement, the number of calls and the
mean, standard deviation, minimum and maximum of their execution times, never a
percentile. The p99 here comes from the server's own duration log instead: the private
cluster logs a uniform random sample of every statement's execute phase
(`log_min_duration_sample = 0`, `log_statement_sample_rate`) to a CSV log, and the
percentiles are those of the claim executions in that sample. The sample's mean is set
beside `pg_stat_statements`' mean over every call as a check that the sample is
representative. Only the execute phase is sampled into the figure (the parse and bind
phases, logged apart, are left out: heartq's claim is prepared once per connection after
a few runs, then only bound and executed).
"""

from __future__ import annotations

import csv
import functools
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg

csv.field_size_limit(1 << 24)

MARK = "/* heartq fleet bench */"
"""Marks the bench's own statements, left out of the figures."""

CLUSTER_SETTINGS = {
    "fsync": "on",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.max": "1000",
    "logging_collector": "on",
    "log_destination": "csvlog",
    "log_min_duration_sample": "0",
}
"""The private cluster's settings beside `max_connections` and the sample rate."""

_DURATION = re.compile(r"^duration: ([0-9.]+) ms\s+execute [^:]*:(.*)$", re.S)


def kind(query: str) -> str:
    """A statement's name: the name of heartq's statement it is (`CLAIM_ONE_QUEUE`,
    `FINISH`, ...: `heartq.store.postgres.queries`), matched on the whole normalized text,
    else on its first 80 characters (then every name that begins alike, joined by `/`),
    else its first words."""
    if "claimed AS (" in query:
        return "claim"
    whole, prefixes = _names()
    shape = _shape(query)
    found = whole.get(shape) or "/".join(prefixes.get(shape[:80], []))
    if found:
        return found
    return " ".join(query.split())[:60]


def _shape(query: str) -> str:
    """A statement with its parameters and constants as `?` and its spaces collapsed, the
    same for heartq's text and pg_stat_statements' normalized one."""
    text = re.sub(r"%\(\w+\)s|\$\d+|'[^']*'|\b\d+(?:\.\d+)?\b|\b0x[0-9A-Fa-f]+\b", "?", query)
    text = re.sub(r"extract\(\w+ from", "extract(? from", text)
    return " ".join(text.split())


@functools.cache
def _names() -> tuple[dict[str, str], dict[str, list[str]]]:
    from heartq.store.postgres import queries

    whole: dict[str, str] = {}
    prefixes: dict[str, list[str]] = {}
    for name, value in vars(queries).items():
        if name.startswith("_") or not name.isupper():
            continue
        parts = value if isinstance(value, tuple) else (value,)
        for i, part in enumerate(parts):
            if isinstance(part, str):
                label = name if len(parts) == 1 else f"{name}[{i}]"
                whole.setdefault(_shape(part), label)
                prefixes.setdefault(_shape(part)[:80], []).append(label)
    return whole, prefixes


def reset_statements(conn: psycopg.Connection[Any]) -> None:
    conn.execute(f"{MARK} SELECT pg_stat_statements_reset()")


def statements(conn: psycopg.Connection[Any], database: str) -> list[dict[str, Any]]:
    """Every statement of `database` since the last reset, the bench's own left out, most
    called first: calls, rows, mean/stddev/max of execution time (ms)."""
    rows = conn.execute(
        f"""{MARK} SELECT s.query, s.calls, s.rows, s.mean_exec_time, s.stddev_exec_time,
                  s.max_exec_time, s.total_exec_time
           FROM pg_stat_statements AS s JOIN pg_database AS d ON d.oid = s.dbid
           WHERE d.datname = %s AND s.query NOT LIKE %s
           ORDER BY s.calls DESC""",
        (database, MARK + "%"),
    ).fetchall()
    return [
        {
            "kind": kind(q),
            "calls": int(calls),
            "rows": int(n),
            "mean_ms": float(mean),
            "stddev_ms": float(stddev),
            "max_ms": float(high),
            "total_ms": float(total),
        }
        for q, calls, n, mean, stddev, high, total in rows
        if not q.lstrip().startswith(MARK)
    ]


def claim_summary(found: list[dict[str, Any]]) -> dict[str, Any]:
    """The claim statements together: calls, jobs per claim, mean and max (ms) over every
    call (the standard deviation of the busiest claim statement, which is nearly all)."""
    claims = [s for s in found if s["kind"] == "claim"]
    calls = sum(s["calls"] for s in claims)
    if not calls:
        return {"calls": 0}
    return {
        "calls": calls,
        "jobs_per_claim": sum(s["rows"] for s in claims) / calls,
        "mean_ms": sum(s["total_ms"] for s in claims) / calls,
        "stddev_ms": max(claims, key=lambda s: s["calls"])["stddev_ms"],
        "max_ms": max(s["max_ms"] for s in claims),
    }


def sampled_claims(data_dir: Path, database: str) -> list[float]:
    """Durations (ms) of the claim executions of `database` in the server's CSV log."""
    found: list[float] = []
    # A logged statement may be long: an enqueue of 100,000 jobs carries their arguments.
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
    for path in sorted((data_dir / "log").glob("*.csv")):
        with path.open(newline="", errors="replace") as file:
            for row in csv.reader(file):
                # csvlog columns: 3 database_name, 14 message
                if len(row) < 14 or row[2] != database:
                    continue
                match = _DURATION.match(row[13])
                if match and "claimed AS (" in match.group(2):
                    found.append(float(match.group(1)))
    return found


def percentiles(values: Iterable[float], points: Iterable[float]) -> dict[str, float]:
    """Nearest-rank percentiles ("p50": ...) of `values`; empty if there are none."""
    ordered = sorted(values)
    if not ordered:
        return {}
    out = {}
    for point in points:
        rank = max(1, min(len(ordered), math.ceil(point * len(ordered) / 100)))
        out[f"p{point:g}"] = ordered[rank - 1]
    return out


def commits(conn: psycopg.Connection[Any], database: str) -> int:
    """Transactions committed in `database` so far (`pg_stat_database.xact_commit`)."""
    conn.execute(f"{MARK} SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        f"{MARK} SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
    ).fetchone()
    return int(row[0]) if row else 0


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of these processes so far (gone ones count 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / tick


def server_pids(postmaster: int) -> list[int]:
    """The postmaster and its children (backends, background processes)."""
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == postmaster:
            pids.append(int(entry.name))
    return pids
