"""Reclaiming, as in the PostgreSQL dialect's `queries/reclaim.py`: the running rows a
reclaimer takes, results given up with their attempt's lease, a restarted worker's
namesakes. SQLite has one writer: no row to lock or skip, and the store tries the
namesakes' lock files itself."""

from __future__ import annotations

from heartq.store.sqlite.queries.common import EFFECTIVE_BEAT, EFFECTIVE_LEASE
from heartq.store.sqlite.queries.fencing import _HELD_BY

_RECLAIM_COLUMNS = f"""
SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, {EFFECTIVE_LEASE} AS lease_expires_at,
       {EFFECTIVE_BEAT} AS heartbeat_at,
       j.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, j.args, j.meta,
       (SELECT count(*) FROM heartq_ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed') AS crashes,
       (SELECT count(*) FROM heartq_ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'interrupted') AS interruptions,
       (SELECT t.retry_rules FROM heartq_tasks AS t WHERE t.name = j.task) AS retry_rules
"""

_RECLAIM_FROM = "FROM heartq_jobs AS j LEFT JOIN heartq_workers AS w ON w.id = j.worker_id"

# Results still to come whose committing attempt's lease really ran out (its effective
# lease read now: a detached attempt's own deadline, else its worker's lease, which its
# heartbeats renew until the save, past the value the row kept at the commit): given up,
# lost for `reason` (see the PostgreSQL dialect for the why). Candidates through the
# partial index of pending results; each one's worker by its key.
GIVE_UP_RESULTS = """
UPDATE heartq_jobs SET result_pending = 0, lease_expires_at = NULL, detached_until = NULL,
                       result_lost = :reason, updated_at = :now
WHERE id IN (SELECT j.id FROM heartq_jobs AS j INDEXED BY heartq_jobs_pending_result_idx
             WHERE j.result_pending AND j.lease_expires_at < :now
               AND coalesce(j.detached_until, max(j.lease_expires_at, coalesce(
                       (SELECT w.lease_expires_at FROM heartq_workers AS w
                        WHERE w.id = j.worker_id), j.lease_expires_at))) < :now
             ORDER BY j.lease_expires_at LIMIT :limit)
RETURNING id, status, awaited
"""

# The reclaim by the worker's lease, as in the PostgreSQL dialect (see it for the why;
# SQLite has one writer: nothing to lock, no claim can commit meanwhile): the workers past
# their lease, each one's attached attempts past their floor, its lease cleared once
# nothing of it is left running attached, and detached attempts past their deadline.
EXPIRED_WORKERS = """
SELECT id FROM heartq_workers INDEXED BY heartq_workers_lease_idx
WHERE lease_expires_at IS NOT NULL AND lease_expires_at < :now
ORDER BY lease_expires_at
LIMIT :limit
"""

SELECT_LAPSED = f"""{_RECLAIM_COLUMNS}
FROM heartq_jobs AS j INDEXED BY heartq_jobs_worker_idx
LEFT JOIN heartq_workers AS w ON w.id = j.worker_id
WHERE j.status = 'running' AND j.worker_id = :worker_id AND j.detached_until IS NULL
  AND j.lease_expires_at < :now
LIMIT :limit
"""

CLEAR_WORKER_LEASE = """
UPDATE heartq_workers SET lease_expires_at = NULL
WHERE id = :worker_id AND lease_expires_at < :now
  AND NOT EXISTS (SELECT 1 FROM heartq_jobs AS j INDEXED BY heartq_jobs_worker_idx
                  WHERE j.worker_id = :worker_id AND j.status = 'running'
                    AND j.detached_until IS NULL)
"""

SELECT_DETACHED = f"""{_RECLAIM_COLUMNS}
FROM heartq_jobs AS j INDEXED BY heartq_jobs_detached_idx
LEFT JOIN heartq_workers AS w ON w.id = j.worker_id
WHERE j.status = 'running' AND j.detached_until IS NOT NULL AND j.detached_until < :now
ORDER BY j.detached_until
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
