"""An operator's writes: cancel, replay, retry now, a later attempt first (a test's);
and what is pruned and purged (old workers, old jobs with their executions and edges)."""

from __future__ import annotations

from heartq.store.sqlite.queries.fair import left_line as _left_line

# A worker is kept while an attempt of it runs (see the PostgreSQL statement).
PRUNE_WORKERS = """
DELETE FROM heartq_workers
WHERE status IN ('inactive', 'stopped')
  AND coalesce(stopped_at, last_heartbeat_at) < :now - :retention
  AND NOT EXISTS (SELECT 1 FROM heartq_jobs AS j INDEXED BY heartq_jobs_worker_idx
                  WHERE j.worker_id = heartq_workers.id AND j.status = 'running')
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
DELETE FROM heartq_ended_executions WHERE job_id IN (SELECT value FROM json_each(:ids))
"""

# A deleted job's own edges (what it waited for); the edges of its dependents stay with
# them, and show the dependency gone.
DELETE_DEPENDENCIES_OF = """
DELETE FROM heartq_job_dependencies WHERE job_id IN (SELECT value FROM json_each(:ids))
"""

DELETE_JOBS = """
DELETE FROM heartq_jobs WHERE id IN (SELECT value FROM json_each(:ids))
"""

# The trace of pruned successes: as PostgreSQL's.
RECORD_PRUNED_SUCCESSES = """
INSERT OR IGNORE INTO heartq_pruned_successes (id)
SELECT id FROM heartq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'succeeded'
"""

FORGET_PRUNED_SUCCESSES = """
DELETE FROM heartq_pruned_successes
WHERE id IN (SELECT id FROM heartq_pruned_successes WHERE id < :before ORDER BY id
             LIMIT :limit)
"""

# A job cancelled in line is counted out of its fairness key's line first (`queries/fair.py`):
# its key's next job starts at the clock, not behind the jobs it no longer has.
CANCEL_QUEUED = (
    _left_line("heartq_jobs AS j", "j.id = :job_id"),
    """
UPDATE heartq_jobs SET status = 'cancelled', finished_at = :now, updated_at = :now,
                       error = 'cancelled before it ran', cancelled_by = :by
WHERE id = :job_id AND status IN ('queued', 'waiting', 'blocked')
RETURNING id, status, awaited, has_dependents
""",
)

REQUEST_CANCEL = """
UPDATE heartq_jobs SET cancel_requested = 1, updated_at = :now, cancelled_by = :by
WHERE id = :job_id AND status = 'running'
RETURNING worker_id
"""

JOB_STATUS = "SELECT status FROM heartq_jobs WHERE id = :job_id"

# A replayed job starts over: attempts and snoozes from 0 (its history kept). A dead job
# whose unique key another live job holds stays dead (the key holds). Those
# with dependents unblock the jobs they blocked (store/sql/dependencies.py `unblock`).
# A replay is an operator's ask to run the job now: its expiry (`expires=`) is dropped.
REPLAY_DEAD = """
UPDATE heartq_jobs
SET status = 'queued', attempts = 0, snoozes = 0, run_at = :now, dead_reason = NULL,
    finished_at = NULL, worker_id = NULL, cancel_requested = 0, expires_at = NULL,
    updated_at = :now
WHERE status = 'dead' AND (:all OR id IN (SELECT value FROM json_each(:ids)))
  AND (unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM heartq_jobs AS live
      WHERE live.unique_key = heartq_jobs.unique_key AND live.status IN ('queued', 'running')))
RETURNING id, queue, has_dependents
"""

# Retries and snoozes due now (heartq.testing's drain): only run_at moves; attempts,
# snoozes, retry count and backoff stay. A job waiting out a retry is queued with an attempt
# counted, one waiting out a snooze with a snooze counted (as HAS_PENDING).
RETRY_NOW = """
UPDATE heartq_jobs SET run_at = :now, updated_at = :now
WHERE status = 'queued' AND (attempts > 0 OR snoozes > 0) AND run_at > :now
  AND queue IN (SELECT value FROM json_each(:queues))
RETURNING id, queue
"""

# A later attempt first (heartq.testing.run_attempt): a queued job never claimed counts
# its earlier attempts and executions as made, so its next claim is attempt :attempt.
START_AT_ATTEMPT = """
UPDATE heartq_jobs SET attempts = :attempt - 1, execution_id = :attempt - 1, updated_at = :now
WHERE id = :id AND status = 'queued' AND execution_id = 0
RETURNING id
"""
