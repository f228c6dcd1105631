"""Reclaiming, as in the PostgreSQL dialect's `queries/reclaim.py`: the running rows a
reclaimer takes, results given up with their attempt's lease, a restarted worker's
namesakes. SQLite has one writer: no row to lock or skip, and the store tries the
namesakes' lock files itself."""

from __future__ import annotations

from heartq.store.sqlite.queries.fencing import _HELD_BY

_RECLAIM_COLUMNS = """
SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, j.lease_expires_at, j.heartbeat_at,
       j.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, j.args, j.meta,
       (SELECT count(*) FROM heartq_ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed') AS crashes,
       (SELECT count(*) FROM heartq_ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'interrupted') AS interruptions,
       (SELECT t.retry_rules FROM heartq_tasks AS t WHERE t.name = j.task) AS retry_rules
"""

_RECLAIM_FROM = "FROM heartq_jobs AS j LEFT JOIN heartq_workers AS w ON w.id = j.worker_id"

# Results still to come whose committing attempt's lease ran out: given up (see the
# PostgreSQL dialect).
GIVE_UP_RESULTS = """
UPDATE heartq_jobs SET result_pending = 0, lease_expires_at = NULL, updated_at = :now
WHERE id IN (SELECT id FROM heartq_jobs INDEXED BY heartq_jobs_pending_result_idx
             WHERE result_pending AND lease_expires_at < :now
             ORDER BY lease_expires_at LIMIT :limit)
RETURNING id, status, awaited
"""

SELECT_EXPIRED = f"""{_RECLAIM_COLUMNS}
FROM heartq_jobs AS j INDEXED BY heartq_jobs_lease_idx
LEFT JOIN heartq_workers AS w ON w.id = j.worker_id
WHERE j.status = 'running' AND j.lease_expires_at < :now
ORDER BY j.lease_expires_at
LIMIT :limit
"""

SELECT_WORKER_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id = :worker_id
"""

# Startup reconciliation: the other workers of a name that may still matter (active, or
# holding running jobs), with whether each is silent past its own threshold. The store
# then tries each one's liveness lock and reclaims only those that are gone.
# `silent` as the monitor judges it: only by an observer (the starting worker) in unbroken
# contact with the database for the namesake's threshold, so an outage that silenced
# every worker, the new one included, is not taken for a death.
NAMESAKES = """
SELECT w.id, w.name, :now - w.last_heartbeat_at AS heartbeat_age,
       coalesce(w.last_heartbeat_at < :now - coalesce(w.stale_after, :stale_after)
                AND coalesce(w.stale_after, :stale_after) <= :contact, 0) AS silent
FROM heartq_workers AS w
WHERE w.name = :name AND w.id != :except_id
  AND (w.status = 'active'
       OR EXISTS (SELECT 1 FROM heartq_jobs AS j
                  WHERE j.worker_id = w.id AND j.status = 'running'))
ORDER BY w.id
"""

SELECT_NAME_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id IN (SELECT value FROM json_each(:ids))
"""

SELECT_ONE_RUNNING = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.id = :job_id AND j.execution_id = :execution_id
  AND {_HELD_BY}
"""
