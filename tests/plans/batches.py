"""The parameters of heartq's PostgreSQL batch statements (finish, release, heartbeat,
pulse, start of buffered jobs), for the plan tests that run them by hand."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from heartq.lifecycle.fate import succeeded
from heartq.model import ClaimedJob, PulseReport, Renewal, Report
from heartq.store import documents
from heartq.store.postgres import PostgresStore


def batch_params(pg: PostgresStore, jobs: Sequence[ClaimedJob]) -> dict[str, Any]:
    """Every batch statement's parameters, its batch the jobs `jobs` claimed by worker
    `w`, in their order (each a success, a release, a renewal, a report)."""
    leases = [j.lease for j in jobs]
    batch = pg.dialect.batch
    return {
        **batch("finishes", [documents.attempt_finish_doc(succeeded(j, None)) for j in jobs]),
        **batch("leases", [{"id": x.job_id, "eid": x.execution_id} for x in leases]),
        **batch("renewals", [documents.renewal_doc(Renewal(x)) for x in leases]),
        **batch("reports", [documents.pulse_doc(PulseReport(x, Report())) for x in leases]),
        "worker_id": "w", "lease": 60, "now": None, "defer": True,
    }  # fmt: skip


def assert_probes_the_keys(name: str, plan: str, size: int) -> None:
    """The plan (EXPLAIN ANALYZE) of batch statement `name` over `size` leases locks them
    with one probe of their key a batch row: a lock step (`locked`) that looks each one
    up (an index scan run once a row), or the finish's delete (`ended`), one scan of the
    key by the batch's ids (`= ANY`, which descends once an id). Those that read the
    document in their lock step (the heartbeat, the start of claimed-ahead jobs) probe
    its key too, and the finish reads each document by a probe of its key (writing none:
    no-op successes end on rows of their own). The batch
    itself is read once (a join that read it again for each lease was quadratic)."""
    assert not re.search(r"Function Scan on \w+ \(actual [^)]* loops=(?!1\))", plan), plan
    if name == "FINISH":
        deleting = _section(plan, "ended")
        probe = rf"Index Scan using leases_pkey on leases \w+ \(actual [^)]* rows={size} loops=1\)"
        assert re.search(probe, deleting), plan
        assert re.search(r"Index Cond: \((\w+\.)?job_id = ANY", deleting), plan
        # The batch's no-op successes end on rows of their own: their documents are
        # read (and share-locked) by one probe of their key each, and never probed
        # again by the update of the documents the other ends write.
        kept = _section(plan, "kept")
        probe = rf"Index Scan using jobs_pkey on job_documents \w+ \(actual [^)]* loops={size}\)"
        assert re.search(probe, kept), plan
        writing = _section(plan, "landed")
        assert re.search(r"Index Scan using jobs_pkey on job_documents \w+ \(never executed\)",
                         writing), plan  # fmt: skip
        # No two of its CTEs joined: a generic plan joins them by a nested loop that
        # compares every row of one with every row of the other (a batch squared).
        assert "Join Filter" not in plan, plan
        return
    locking = plan.split("CTE locked", 1)[1]
    joined = name in ("HEARTBEAT", "START_AHEAD")  # they read of the document in the lock
    for key in ("leases_pkey on leases", *(("jobs_pkey on job_documents",) if joined else ())):
        probe = rf"Index Scan using {key} \w+ \(actual [^)]* loops={size}\)"
        assert re.search(probe, locking), plan
    assert re.search(r"Index Cond: \((\w+\.)?job_id = ", locking), plan


def _section(plan: str, cte: str) -> str:
    """The lines of `plan` under its CTE `cte`, up to the next CTE's."""
    return re.split(r"\n\s*CTE \w+\n", plan.split(f"CTE {cte}\n", 1)[1], maxsplit=1)[0]
