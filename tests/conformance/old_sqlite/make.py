"""Make a fixture of this folder: a SQLite queue as a heartq of SQLite's old migration
numbering left it (before the one migration line: its 23 and 24 were PostgreSQL's 24
and 25), dumped as SQL text (`sqlite3`'s `iterdump`), so a review reads what it holds.

Run by that old heartq, its source first on the path (the commits are named in
test_migration_line.py, `OLD_QUEUES`); this script uses only the store calls every
one of them has:

    git archive COMMIT src | tar -x -C /tmp/old-COMMIT
    PYTHONPATH=/tmp/old-COMMIT/src .venv/bin/python tests/conformance/old_sqlite/make.py \
        tests/conformance/old_sqlite/vN.sql

What the queue holds: a worker, a job that succeeded with a result, one dead after a
failure, one running (claimed, never finished), one that waits for it, one queued for
later with a unique key, one queued now. Its ids are fixed (`IDS`: UUIDs, as a store
since schema v44 takes them; the dumps made earlier had ids like `job-dead`, replaced in
their text by these); its times are the clock's when it was made.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path

from heartq.lifecycle.fate import failed, succeeded
from heartq.model import NewJob, Outcome, WorkerInfo
from heartq.store import open_store

IDS = {
    "dead": "00000000-0000-7000-8000-000000000001",
    "later": "00000000-0000-7000-8000-000000000002",
    "queued": "00000000-0000-7000-8000-000000000003",
    "running": "00000000-0000-7000-8000-000000000004",
    "succeeded": "00000000-0000-7000-8000-000000000005",
    "waiting": "00000000-0000-7000-8000-000000000006",
}
"""Each job's id by what it is (in the order of the names the earlier dumps gave them,
`job-<what>`, so that the jobs sort as they did); test_migration_line.py names the same."""


def make(out: Path) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "heartq.db"
        store = open_store(f"sqlite:///{path}")
        try:
            version = store.migrate()
            t0 = store.clock()
            info = WorkerInfo(
                id="w1",
                hostname="old-host",
                pid=4242,
                queues=("default",),
                concurrency=4,
                name="old-worker",
            )
            store.register_worker(info, now=t0)
            store.enqueue(
                [
                    NewJob("succeeds", '{"n": 1}', id=IDS["succeeded"], priority=3),
                    NewJob("fails", '{"n": 2}', id=IDS["dead"], priority=2, max_retries=0),
                    NewJob("runs", '{"n": 3}', id=IDS["running"], priority=1),
                ],
                now=t0,
            )
            store.enqueue(
                [NewJob("waits", '{"n": 4}', id=IDS["waiting"], depends_on=(IDS["running"],))],
                now=t0,
            )
            later = 4102444800.0 - t0  # 2100: due in no test's lifetime, whenever it runs
            store.enqueue(
                [NewJob("later", '{"n": 5}', id=IDS["later"], delay=later, unique_key="once")],
                now=t0,
            )
            done, dead, running = store.claim("w1", ["default"], 3, 30.0, now=t0 + 1)
            assert [job.id for job in (done, dead, running)] == [
                IDS["succeeded"], IDS["dead"], IDS["running"]
            ]  # fmt: skip
            assert store.finish([succeeded(done, '"forty-two"')], now=t0 + 2) == []
            end = failed(dead, Outcome.FAILED, "ValueError: boom", permanent=True)
            assert store.finish([end], now=t0 + 2) == []
            store.enqueue([NewJob("now", '{"n": 6}', id=IDS["queued"])], now=t0 + 3)
        finally:
            store.close()
        with sqlite3.connect(path) as conn:
            dump = "\n".join(conn.iterdump())
        conn.close()
    header = f"-- A SQLite queue at schema v{version} of the old numbering (make.py).\n"
    out.write_text(header + dump + "\n", "utf-8")


if __name__ == "__main__":
    make(Path(sys.argv[1]))
