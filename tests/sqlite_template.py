"""Migrated SQLite databases made by copying one, for the fixtures' `migrated_urls`.

A test's database must be as a migration leaves a fresh one. Running the migrations for
each (0.1-0.2 s of a core, for each of the thousand-odd SQLite databases of a run) was a
tenth of the default suite's time spent in set-ups; a copy of one file the migrations
made, per test process, takes about a millisecond. A migrated database holds one thing of
its own, its deployment id (`DEPLOYMENT_MIGRATION`: the NATS transport names its stream
after it, so two tests on one NATS server must never share one): each copy makes its own
by running that migration again, its table dropped first. tests/harness/test_sqlite_copies.py
compares a copy with a migrated database (every object's SQL, every table's rows).
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

from heartq.store import open_store
from heartq.store.sql.base import migration_scripts
from tests.support import DEPLOYMENT_MIGRATION

FILE = "heartq.db"


class Template:
    """One migrated SQLite file (in `folder`), copied for each test that asks."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE
        made = open_store(f"sqlite:///{self.path}")
        made.link.migrate()
        made.link.close()
        # The last connection's close checkpoints its write-ahead log into the file and
        # removes it: the file alone is the database (a copy of it without the log would
        # lack what the log held).
        for beside in ("-wal", "-shm"):
            if Path(f"{self.path}{beside}").exists():
                raise AssertionError(f"{self.path}{beside} outlived its connections")
        self._deployment = dict(migration_scripts("heartq.store.sqlite"))[DEPLOYMENT_MIGRATION]

    def copy_to(self, target: Path) -> None:
        """`target` made a migrated database of its own (a file that must not exist)."""
        if target.exists():
            raise FileExistsError(target)
        shutil.copyfile(self.path, target)
        with contextlib.closing(sqlite3.connect(target, isolation_level=None)) as conn:
            conn.executescript(
                f"BEGIN IMMEDIATE; DROP TABLE heartq_deployment;\n{self._deployment}\nCOMMIT;"
            )
