"""What the chaos tasks leave for the checker besides the queue: the side file (a line
per attempt start and end, per crash hook call, and per commit an attempt waits after
to be killed) and the ledger (a row per effect,
written in the transaction that completes a job: `chaos_tasks.effect`)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.soak.chaos_config import LEDGER_TABLE


class SideLog:
    """Reads the tasks' append-only side file incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.starts: dict[tuple[str, int], dict[str, Any]] = {}
        self.ends: dict[tuple[str, int], dict[str, Any]] = {}
        self.crashes: list[dict[str, Any]] = []
        """What the workers' crash hooks were told, a line each (duplicates kept)."""
        self.committed: dict[tuple[str, int], dict[str, Any]] = {}
        """Attempts given `kill` whose transaction committed (`chaos_commits`)."""
        self.bad_lines = 0

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            try:
                doc = json.loads(raw)
            except ValueError:
                self.bad_lines += 1
                continue
            if doc["e"] == "crash":
                self.crashes.append(doc)
                continue
            key = (doc["job"], int(doc["eid"]))
            if doc["e"] == "committed":
                self.committed[key] = doc
                continue
            (self.starts if doc["e"] == "start" else self.ends)[key] = doc

    def open_attempts(self, task: str) -> list[dict[str, Any]]:
        return [d for k, d in self.starts.items() if d.get("task") == task and k not in self.ends]


class Ledger:
    """The tasks' effects table, in the queue's database (PostgreSQL: in the run's schema,
    named in full and handed to the tasks in `HEARTQ_CHAOS_LEDGER`)."""

    def __init__(self, backend: str, url: str, schema: str | None) -> None:
        self.backend = backend
        self.url = url
        self.table = f"{schema}.{LEDGER_TABLE}" if schema else LEDGER_TABLE

    def plain_connection(self) -> Any:
        """A connection of the runner's own to the queue's database (not heartq's)."""
        if self.backend == "sqlite":
            return contextlib.closing(sqlite3.connect(self.url.removeprefix("sqlite:///")))
        import psycopg

        from heartq.store.postgres.connection import parse_url

        return psycopg.connect(parse_url(self.url)[0], autocommit=True)

    def create(self) -> None:
        """The tasks' effects table, in the queue's database (PostgreSQL: in the run's
        schema, named in full), without a unique constraint: a double effect shows."""
        with self.plain_connection() as conn:
            conn.execute(
                f"CREATE TABLE {self.table} (job_id text NOT NULL, "
                "execution_id bigint NOT NULL, worker_id text)"
            )
            if self.backend == "sqlite":
                conn.commit()

    def rows(self) -> list[tuple[str, int, str | None]]:
        with self.plain_connection() as conn:
            rows = conn.execute(
                f"SELECT job_id, execution_id, worker_id FROM {self.table}"
            ).fetchall()
        return [(str(r[0]), int(r[1]), r[2]) for r in rows]
