"""The hot statements use the indexes they were written for.

A test on a small table cannot notice a quadratic plan, so this reads the plans: claim
walks the claim index, reap the lease index, and every batch update probes the primary
key once per batch element instead of scanning the running jobs for each one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heartq.store.interface import NewJob
from heartq.store.postgres import PostgresStore
from heartq.store.postgres import queries as pg_q
from heartq.store.sqlite import SQLiteStore
from heartq.store.sqlite import queries as q
from tests import pg_harness

EXPECTED = {
    "CLAIM": "USING INDEX heartq_jobs_claim_idx",
    "RENEW": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    "FINISH_JOBS": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    "RELEASE_JOBS": "SEARCH j USING INDEX sqlite_autoindex_heartq_jobs_1 (id=?)",
    "CLOSE_EXECUTIONS": "SEARCH e USING PRIMARY KEY (job_id=? AND execution_id=?)",
    "CLOSE_RELEASED": "SEARCH e USING PRIMARY KEY (job_id=? AND execution_id=?)",
    "SELECT_EXPIRED": "SEARCH j USING INDEX heartq_jobs_lease_idx (lease_expires_at<?)",
    "SELECT_WORKER_JOBS": "SEARCH j USING INDEX heartq_jobs_worker_idx (worker_id=?)",
    "DEACTIVATE_STALE": "heartq_workers_status_idx",
    "QUEUE_WAITS": "heartq_jobs_claim_idx",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sqlite_statement_uses_its_index(tmp_path: Path, name: str) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'plans.db'}")
    store.migrate()
    sql = getattr(q, name)
    params = dict.fromkeys(re.findall(r":(\w+)", sql), "[]")
    plan = store.pool.get().execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    text = "; ".join(row[3] for row in plan)
    assert EXPECTED[name] in text, text
    if name in ("RENEW", "FINISH_JOBS", "RELEASE_JOBS"):
        assert text.startswith("SCAN"), f"the batch must be the outer loop: {text}"
    store.close()


def test_postgres_claim_walks_each_queue_in_order(pg_server_url: str) -> None:
    """With several queues, the claim walks each one's claim index in priority order and
    stops at `limit` (LATERAL per queue): `queue = ANY(...)` would read every queued row
    of those queues and sort them at each claim, so claims would slow down with the
    backlog."""
    with pg_harness.schema_url(pg_server_url) as url:
        pg = PostgresStore(url)
        try:
            pg.migrate()
            pg.enqueue([NewJob("t", "{}", queue=f"q{i % 3}") for i in range(3000)])
            with pg.pool.transaction() as conn:
                conn.execute("ANALYZE jobs")
                params = {"worker_id": "w", "queues": ["q0", "q1"], "limit": 10, "lease": 60}
                explain = "EXPLAIN (ANALYZE, COSTS OFF) " + pg_q.CLAIM
                rows = conn.execute(explain, dict(params, now=None)).fetchall()
                conn.rollback()
        finally:
            pg.close()
    plan = "\n".join(row["QUERY PLAN"] for row in rows)
    assert "Index Cond: ((queue = " in plan and "ANY" not in plan, plan
    scanned = [int(n) for n in re.findall(r"Index Scan using jobs_claim_idx .*rows=(\d+)", plan)]
    assert scanned and max(scanned) <= 10, plan
