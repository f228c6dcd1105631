"""Jobs as an operator reads them: the store's documents in their shown state
(`heartq.inspect.states`: `claimed` for a job claimed ahead), filtered by it, and one
job with what the store cannot say alone (whether its worker's process is gone) and
each attempt's timing."""

from __future__ import annotations

from typing import Any

from heartq.inspect.attempts import timed
from heartq.inspect.states import HELD, shown, stored_filter
from heartq.model import JobPage
from heartq.store import Store
from heartq.store.interface import Inspector, Registry


def with_worker_liveness(store: Registry, job: dict[str, Any]) -> dict[str, Any]:
    """The job (shown) plus `worker_gone`: for a job its worker holds (running or claimed
    ahead), whether that worker's liveness lock is free (the process died; the job is
    held only until a maintenance pass reclaims it); null for any other job. Read only."""
    gone = None
    if job["status"] in HELD and job.get("worker_id"):
        gone = bool(store.liveness_free([job["worker_id"]]))
    return dict(job, worker_gone=gone)


def job_detail(store: Store, job_id: str) -> dict[str, Any]:
    """The job (a full id) as `heartq jobs show` reads it: its shown state,
    `worker_gone`, and each execution with its `duration` and `detection_delay`
    (`heartq.inspect.attempts`; the open attempt of a job claimed ahead is marked
    `claimed_ahead`: it has not started)."""
    job = with_worker_liveness(store, shown(store.get_job(job_id)))
    job["executions"] = timed(job["executions"], bool(job.get("claimed_ahead")))
    return job


def list_jobs(
    store: Inspector, status: str | None, queue: str | None, limit: int
) -> list[dict[str, Any]]:
    """The newest jobs in a shown state (`heartq jobs list`), shown."""
    stored, ahead = stored_filter(status)
    found = store.list_jobs(status=stored, queue=queue, limit=limit, claimed_ahead=ahead)
    return [shown(job) for job in found]


def browse_jobs(
    store: Inspector,
    status: str | None,
    queue: str | None,
    task: str | None,
    before: str | None,
    limit: int,
) -> JobPage:
    """A page of the dashboard's job list (`Store.browse_jobs`) by shown state, shown."""
    stored, ahead = stored_filter(status)
    page = store.browse_jobs(
        status=stored, queue=queue, task=task, before=before, limit=limit, claimed_ahead=ahead
    )
    return JobPage([shown(job) for job in page.jobs], page.next_before)
