"""The hot statements use the indexes they were written for.

A test on a small table cannot notice a quadratic plan, so this reads the plans: claim
walks the claim index, reap the lease index, and every batch update probes the primary
key once per batch element instead of scanning the running jobs for each one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heartq.store.sqlite import SQLiteStore
from heartq.store.sqlite import queries as q

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
