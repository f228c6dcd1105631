"""How reclaimed jobs and stale or dead workers are logged, the same way by every finder:
the maintenance services, startup reconciliation, and the worker's own heartbeater and
completer when they hand an attempt back. One place, so an operator's alert on
`job_dead` or `worker_deactivated` sees the same fields whoever found it.

Events: `job_reenqueued`, `job_dead`, `worker_deactivated`, `orphaned_jobs_detected`,
each with `detected_by`.

A module of its own beside `events.py`, not inside `maintenance/`: the worker's threads
log their own hand-backs with it and need nothing else of maintenance; it depends only on
the event names and the model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from heartq import events
from heartq.model import JobStatus, Reclaimed, StaleWorker


def report_reclaimed(reclaimed: Sequence[Reclaimed], detected_by: str) -> None:
    for job in reclaimed:
        if job.status is JobStatus.DEAD:
            events.emit(
                events.JOB_DEAD,
                logging.WARNING,
                job_id=job.job_id,
                task=job.task,
                attempt=job.attempts,
                reason=job.dead_reason,
                detected_by=detected_by,
            )
        else:
            events.emit(
                events.JOB_REENQUEUED,
                job_id=job.job_id,
                task=job.task,
                attempt=job.attempts,
                retry_in=round(job.retry_delay, 3),
                previous_worker_id=job.worker_id,
                detected_by=detected_by,
            )


def report_stale_workers(workers: Sequence[StaleWorker], detected_by: str) -> None:
    for worker in workers:
        events.emit(
            events.WORKER_DEACTIVATED,
            logging.WARNING,
            worker_id=worker.id,
            name=worker.name,
            heartbeat_age=round(worker.heartbeat_age, 3),
            detected_by=detected_by,
            jobs=len(worker.reclaimed),
        )
        if worker.reclaimed:
            events.emit(
                events.ORPHANED_JOBS_DETECTED,
                logging.WARNING,
                worker_id=worker.id,
                count=len(worker.reclaimed),
                job_ids=[j.job_id for j in worker.reclaimed],
                detected_by=detected_by,
                heartbeat_age=round(worker.heartbeat_age, 3),
            )
        report_reclaimed(worker.reclaimed, detected_by)
