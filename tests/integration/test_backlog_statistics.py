"""A worker started after PostgreSQL analyzed a backlog drains it as fast as one started
before (docs/design/claim.md, "Plans that cannot turn").

The statistics of an analyzed backlog raise a generic plan's estimated cost (a LIMIT
given as a parameter is taken for a tenth of the rows): a worker of two queues, whose
claim's estimate went from 13,800 to 554,000 once 100,000 queued jobs were analyzed,
passed PostgreSQL's thresholds for JIT compilation, inlining and optimization, and
compiled its claim at every run (about a second here: the issue's 270 jobs a second
instead of 19,000). Two real workers run side by side, each on a queue of its own with
100,000 jobs, one analyzed and one not; what each finishes is counted over the same
stretch (the one on the fresh backlog finishing 20,000 more, once both finished 2,000),
so the machine's load weighs on both alike. The analyzed one must finish at least half
as many: the cliff was 0.014 of the fresh one's rate; two workers side by side on a
loaded machine came out 0.80 of each other at worst (a full suite beside it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from heartq.store.postgres import PostgresStore
from heartq.store.postgres.connection import parse_url
from tests import pg_harness, support
from tests.conftest import only_on
from tests.plans import census

pytestmark = only_on("postgres")

TASKS = """
import heartq

app = heartq.App()

@app.task(name="t")
def noop() -> None:
    pass
"""
BACKLOG = 100_000
WARM = 2000
STRETCH = 20_000


def _succeeded(url: str) -> int:
    with psycopg.connect(parse_url(url)[0]) as conn:
        schema = parse_url(url)[1]
        row = conn.execute(
            f"SELECT count(*) FROM {schema}.jobs WHERE status = 'succeeded'"  # type: ignore[arg-type]
        ).fetchone()
    return int(row[0]) if row else 0


def _worker(url: str, directory: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A real worker of two queues (its claim is `CLAIM`, of several), 50 slots."""
    argv = [sys.executable, "-m", "heartq", "worker", "backlog_tasks:app", "--url", url,
            "--queues", "default,other", "--concurrency", "50"]  # fmt: skip
    return subprocess.Popen(argv, env=env, cwd=directory, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


@pytest.fixture
def queues(pg_server_url: str) -> Iterator[tuple[str, str]]:
    """Two fresh queues of 100,000 jobs each; the first one analyzed."""
    with pg_harness.schema_url(pg_server_url) as analyzed, pg_harness.schema_url(
        pg_server_url
    ) as fresh:
        for url in (analyzed, fresh):
            store = PostgresStore(url)
            try:
                store.link.migrate()
                with store.link.pool.autocommit() as conn:
                    census.fill(conn, BACKLOG, queue="default")
                    if url == analyzed:
                        conn.execute("ANALYZE job_documents")
            finally:
                store.link.close()
        yield analyzed, fresh


def test_a_worker_drains_an_analyzed_backlog_as_fast(
    backend: str, queues: tuple[str, str], tmp_path: Path
) -> None:
    (tmp_path / "backlog_tasks.py").write_text(TASKS)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    workers = [_worker(url, tmp_path, env) for url in queues]
    try:
        support.wait_for(lambda: _succeeded(queues[1]) >= WARM, 60,
                         "the fresh backlog's worker running", interval=0.2)  # fmt: skip
        began = time.monotonic()  # the other one warmed up too, or a while later
        support.wait_for(lambda: _succeeded(queues[0]) >= WARM or time.monotonic() > began + 20,
                         30, "the analyzed backlog's worker running", interval=0.2)  # fmt: skip
        before = [_succeeded(url) for url in queues]
        support.wait_for(lambda: _succeeded(queues[1]) >= before[1] + STRETCH, 60,
                         "the fresh backlog's worker's stretch", interval=0.2)  # fmt: skip
        after = [_succeeded(url) for url in queues]
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait(30)
    analyzed, fresh = (a - b for a, b in zip(after, before, strict=True))
    print(f"finished in the same stretch: analyzed {analyzed}, fresh {fresh}")
    assert fresh > 0 and analyzed >= 0.5 * fresh, (analyzed, fresh)
