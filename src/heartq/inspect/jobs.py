"""One job as an operator reads it: the store's document plus what the store cannot say
alone (whether its worker's process is gone) and each attempt's timing."""

from __future__ import annotations

from typing import Any

from heartq.inspect.attempts import timed
from heartq.model import JobStatus
from heartq.store import Store
from heartq.store.interface import Registry


def with_worker_liveness(store: Registry, job: dict[str, Any]) -> dict[str, Any]:
    """The job plus `worker_gone`: for a running job, whether its worker's liveness lock
    is free (the process died; the job is running only until a reaper reclaims it);
    null for a job that is not running. Read only."""
    gone = None
    if job["status"] == JobStatus.RUNNING and job.get("worker_id"):
        gone = bool(store.liveness_free([job["worker_id"]]))
    return dict(job, worker_gone=gone)


def job_detail(store: Store, job_id: str) -> dict[str, Any]:
    """The job (a full id) as `heartq jobs show` reads it: `worker_gone`, and each
    execution with its `duration` and `detection_delay` (`heartq.inspect.attempts`)."""
    job = with_worker_liveness(store, store.get_job(job_id))
    job["executions"] = timed(job["executions"])
    return job
