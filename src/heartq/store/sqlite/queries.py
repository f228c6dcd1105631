"""Every SQL statement of the SQLite backend, by name: the same names, in the same order,
as the PostgreSQL backend's `queries.py`, so the two dialects can be diffed. Parameters
are always bound. A tuple is several statements run in order in one transaction, the
last one's rows being the answer (`store/sql.py`): SQLite has no data-modifying CTE, so
where PostgreSQL writes jobs and their executions in one statement, SQLite takes two.

Batches travel as one JSON parameter read with `json_each`, so a statement's text (and its
prepared form in the statement cache) is the same whatever the batch size. Statements that
update jobs from a batch name the primary-key index (`INDEXED BY
sqlite_autoindex_heartq_jobs_1`, the index SQLite makes for `id TEXT PRIMARY KEY`): left
to itself the planner walks every running job and re-reads the whole batch for each,
which costs running jobs x batch size instead of one key lookup per batch element.
"""

from __future__ import annotations

NOW = "SELECT (julianday('now') - 2440587.5) * 86400.0"

# One job, bound by value (the store uses it for a batch of one).
INSERT_JOB = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, created_at, updated_at)
VALUES (:id, :task, :queue, :args, :priority, 'queued', :now + :delay, :max_retries,
        :retry_backoff, :retry_backoff_max, :now, :now)
"""

# Each job: {id, task, queue, args, priority, delay, max_retries, retry_backoff,
# retry_backoff_max} (store/documents.py)
INSERT_JOBS = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, created_at, updated_at)
SELECT json_extract(x.value, '$.id'), json_extract(x.value, '$.task'),
       json_extract(x.value, '$.queue'), json_extract(x.value, '$.args'),
       json_extract(x.value, '$.priority'), 'queued', :now + json_extract(x.value, '$.delay'),
       json_extract(x.value, '$.max_retries'), json_extract(x.value, '$.retry_backoff'),
       json_extract(x.value, '$.retry_backoff_max'), :now, :now
FROM json_each(:jobs) AS x
"""

CLAIM = """
UPDATE heartq_jobs
SET status = 'running',
    worker_id = :worker_id,
    execution_id = execution_id + 1,
    attempts = attempts + 1,
    lease_expires_at = :now + :lease,
    heartbeat_at = :now,
    started_at = :now,
    updated_at = :now,
    progress_value = NULL, progress_stage = NULL, progress_message = NULL
WHERE id IN (
    SELECT id FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
    WHERE status = 'queued'
      AND queue IN (SELECT value FROM json_each(:queues))
      AND run_at <= :now
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
)
RETURNING id, task, queue, args, attempts, execution_id, max_retries, retry_backoff,
          retry_backoff_max, checkpoint, lease_expires_at, run_at, priority
"""

# The claim's audit rows, written by the store once CLAIM has returned its rows (`leases`:
# [[id, execution_id], ...]): the one statement PostgreSQL's CLAIM does not need.
CLAIM_EXECUTIONS = """
INSERT INTO heartq_executions (job_id, execution_id, worker_id, started_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), :worker_id, :now
FROM json_each(:leases)
"""

TOUCH_WORKER = """
UPDATE heartq_workers SET last_heartbeat_at = :now, status = 'active', stopped_at = NULL
WHERE id = :worker_id
"""

# Each renewal: {id, eid, hp (has progress), pv, ps, pm} (store/documents.py)
RENEW = """
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET lease_expires_at = :now + :lease,
    heartbeat_at = :now,
    updated_at = :now,
    progress_value = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.pv') ELSE j.progress_value END,
    progress_stage = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.ps') ELSE j.progress_stage END,
    progress_message = CASE WHEN json_extract(r.value, '$.hp')
                            THEN json_extract(r.value, '$.pm') ELSE j.progress_message END
FROM json_each(:renewals) AS r
WHERE j.id = json_extract(r.value, '$.id')
  AND j.execution_id = json_extract(r.value, '$.eid')
  AND j.status = 'running'
RETURNING id, execution_id, cancel_requested
"""

HEARTBEAT = (TOUCH_WORKER, RENEW)

SAVE_CHECKPOINT = """
UPDATE heartq_jobs SET checkpoint = :checkpoint, updated_at = :now
WHERE id = :job_id AND execution_id = :execution_id AND status = 'running'
RETURNING cancel_requested
"""

# Executions first, fenced like the jobs they belong to (only those still running under
# that execution): the jobs' statement then changes the same set, inside the same write
# transaction, and answers which leases landed.
CLOSE_EXECUTIONS = """
UPDATE heartq_executions AS e
SET ended_at = :now,
    outcome = json_extract(f.value, '$.outcome'),
    error = json_extract(f.value, '$.error'),
    crash = json_extract(f.value, '$.crash')
FROM json_each(:finishes) AS f
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(f.value, '$.id')
 AND j.execution_id = json_extract(f.value, '$.eid')
 AND j.status = 'running'
WHERE e.job_id = json_extract(f.value, '$.id')
  AND e.execution_id = json_extract(f.value, '$.eid')
"""

# Each finish: {id, eid, status, outcome, result, error, delay, keep, dead_reason, crash};
# `keep`: a requeued job keeps its run_at, its place in line (a first crash).
# An attempt that would be retried (status 'queued') while a cancel was requested ends the
# job as 'cancelled' instead: the request is honoured, never lost to a retry. The
# execution keeps its own outcome (failed, timed_out, ...).
_REQUEUE = "(json_extract(f.value, '$.status') = 'queued' AND NOT j.cancel_requested)"

FINISH_JOBS = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET status = CASE WHEN json_extract(f.value, '$.status') = 'queued' AND j.cancel_requested
                  THEN 'cancelled' ELSE json_extract(f.value, '$.status') END,
    run_at = CASE WHEN {_REQUEUE} AND NOT json_extract(f.value, '$.keep')
                  THEN :now + json_extract(f.value, '$.delay') ELSE j.run_at END,
    result = json_extract(f.value, '$.result'),
    error = coalesce(json_extract(f.value, '$.error'), j.error),
    dead_reason = json_extract(f.value, '$.dead_reason'),
    progress_value = CASE WHEN json_extract(f.value, '$.status') = 'succeeded'
                               AND j.progress_value IS NOT NULL
                          THEN 1.0 ELSE j.progress_value END,
    finished_at = CASE WHEN {_REQUEUE} THEN NULL ELSE :now END,
    worker_id = CASE WHEN {_REQUEUE} THEN NULL ELSE j.worker_id END,
    lease_expires_at = NULL,
    cancel_requested = 0,
    updated_at = :now
FROM json_each(:finishes) AS f
WHERE j.id = json_extract(f.value, '$.id')
  AND j.execution_id = json_extract(f.value, '$.eid')
  AND j.status = 'running'
RETURNING id, execution_id
"""

FINISH = (CLOSE_EXECUTIONS, FINISH_JOBS)

# Released jobs go back to the queue, no attempt counted; one whose cancel was requested
# ends 'cancelled' instead (run_at and worker_id kept), so it never runs again. Each
# lease: {id, eid}. Executions first, fenced as in FINISH.
CLOSE_RELEASED = """
UPDATE heartq_executions AS e
SET ended_at = :now, outcome = 'released'
FROM json_each(:leases) AS l
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(l.value, '$.id')
 AND j.execution_id = json_extract(l.value, '$.eid')
 AND j.status = 'running'
WHERE e.job_id = json_extract(l.value, '$.id')
  AND e.execution_id = json_extract(l.value, '$.eid')
"""

RELEASE_JOBS = """
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
    attempts = max(j.attempts - 1, 0),
    worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
    lease_expires_at = NULL,
    run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE :now END,
    finished_at = CASE WHEN j.cancel_requested THEN :now END,
    cancel_requested = 0,
    updated_at = :now
FROM json_each(:leases) AS l
WHERE j.id = json_extract(l.value, '$.id')
  AND j.execution_id = json_extract(l.value, '$.eid')
  AND j.status = 'running'
RETURNING id, execution_id
"""

RELEASE = (CLOSE_RELEASED, RELEASE_JOBS)

_RECLAIM_COLUMNS = """
SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, j.lease_expires_at, j.heartbeat_at,
       j.cancel_requested, w.last_heartbeat_at AS worker_heartbeat_at,
       (SELECT count(*) FROM heartq_executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed') AS crashes
"""
_RECLAIM_FROM = "FROM heartq_jobs AS j LEFT JOIN heartq_workers AS w ON w.id = j.worker_id"

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
NAMESAKES = """
SELECT w.id, w.name, :now - w.last_heartbeat_at AS heartbeat_age,
       coalesce(w.last_heartbeat_at < :now - coalesce(w.stale_after, :stale_after), 0) AS silent
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
"""

REGISTER_WORKER = """
INSERT INTO heartq_workers (id, name, hostname, pid, queues, concurrency, status,
                            started_at, last_heartbeat_at, stale_after)
VALUES (:id, :name, :hostname, :pid, :queues, :concurrency, 'active', :now, :now, :stale_after)
ON CONFLICT (id) DO UPDATE SET status = 'active', last_heartbeat_at = :now, stopped_at = NULL,
                               stale_after = excluded.stale_after
"""

STOP_WORKER = """
UPDATE heartq_workers SET status = 'stopped', stopped_at = :now WHERE id = :worker_id
"""

DEACTIVATE_WORKER = """
UPDATE heartq_workers SET status = 'inactive', stopped_at = :now
WHERE id = :worker_id AND status = 'active'
RETURNING id, name, :now - last_heartbeat_at AS heartbeat_age
"""

DEACTIVATE_NAMED = """
UPDATE heartq_workers SET status = 'inactive', stopped_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'active'
"""

# Each worker is judged by its own threshold; the observer's only for workers that did not
# record one (older versions).
DEACTIVATE_STALE = """
UPDATE heartq_workers SET status = 'inactive', stopped_at = :now
WHERE status = 'active' AND last_heartbeat_at < :now - coalesce(stale_after, :stale_after)
RETURNING id, name, :now - last_heartbeat_at AS heartbeat_age
"""

LIST_WORKERS = """
SELECT w.*, (SELECT count(*) FROM heartq_jobs j
             WHERE j.worker_id = w.id AND j.status = 'running') AS running
FROM heartq_workers AS w
WHERE (:include_all OR w.status = 'active')
ORDER BY w.started_at DESC
"""

PRUNE_WORKERS = """
DELETE FROM heartq_workers
WHERE status IN ('inactive', 'stopped')
  AND coalesce(stopped_at, last_heartbeat_at) < :now - :retention
"""

SELECT_PRUNABLE_JOBS = """
SELECT id FROM heartq_jobs
WHERE status IN ('succeeded', 'cancelled') AND finished_at < :now - :retention
LIMIT :limit
"""

SELECT_PURGEABLE_DEAD = """
SELECT id FROM heartq_jobs
WHERE status = 'dead' AND (:older_than IS NULL OR finished_at < :now - :older_than)
"""

DELETE_EXECUTIONS_OF = """
DELETE FROM heartq_executions WHERE job_id IN (SELECT value FROM json_each(:ids))
"""

DELETE_JOBS = """
DELETE FROM heartq_jobs WHERE id IN (SELECT value FROM json_each(:ids))
"""

GET_JOB = "SELECT * FROM heartq_jobs WHERE id = :job_id"

GET_EXECUTIONS = """
SELECT * FROM heartq_executions WHERE job_id = :job_id ORDER BY execution_id
"""

LIST_JOBS = """
SELECT * FROM heartq_jobs
WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
ORDER BY created_at DESC, id DESC
LIMIT :limit
"""

QUEUE_WAITS = """
SELECT queue,
       min(CASE WHEN run_at <= :now THEN run_at END) AS oldest_run_at,
       sum(CASE WHEN run_at > :now THEN 1 ELSE 0 END) AS scheduled
FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
WHERE status = 'queued'
GROUP BY queue
"""

OLDEST_RUNNABLE = """
SELECT id FROM heartq_jobs
WHERE status = 'queued' AND queue = :queue AND run_at <= :run_at
ORDER BY run_at, id
LIMIT 1
"""

COUNT_JOBS = """
SELECT queue, status, count(*) AS n FROM heartq_jobs GROUP BY queue, status ORDER BY queue, status
"""

CANCEL_QUEUED = """
UPDATE heartq_jobs SET status = 'cancelled', finished_at = :now, updated_at = :now,
                       error = 'cancelled before it ran'
WHERE id = :job_id AND status = 'queued'
"""

REQUEST_CANCEL = """
UPDATE heartq_jobs SET cancel_requested = 1, updated_at = :now
WHERE id = :job_id AND status = 'running'
"""

JOB_STATUS = "SELECT status FROM heartq_jobs WHERE id = :job_id"

REPLAY_DEAD = """
UPDATE heartq_jobs
SET status = 'queued', attempts = 0, run_at = :now, dead_reason = NULL, finished_at = NULL,
    worker_id = NULL, cancel_requested = 0, updated_at = :now
WHERE status = 'dead' AND (:all OR id IN (SELECT value FROM json_each(:ids)))
RETURNING id, queue
"""

# -- only SQLite ---------------------------------------------------------------------

ACTIVE_WORKERS_ON_HOST = """
SELECT id FROM heartq_workers WHERE status = 'active' AND hostname = :hostname
"""

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS heartq_schema_migrations
(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)
"""

SCHEMA_VERSION = "SELECT coalesce(max(version), 0) FROM heartq_schema_migrations"

RECORD_MIGRATION = "INSERT INTO heartq_schema_migrations VALUES (:version, :now)"
