"""The parameters of heartq's PostgreSQL batch statements (finish, release, heartbeat,
pulse, start of buffered jobs), for the plan tests that run them by hand."""

from __future__ import annotations

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
