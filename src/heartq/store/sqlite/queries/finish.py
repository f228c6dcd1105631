"""The end of an attempt: `FINISH` and `RELEASE`, as the PostgreSQL dialect's
`queries/finish.py` describes them (what their `CASE` expressions restate of
`heartq.lifecycle.fate`, and the test that holds them to it). Here each takes two
statements in its transaction: the attempt's execution row first, then its job."""

from __future__ import annotations

from heartq.store.sqlite.queries.fencing import _HELD_BY

# The ended attempts' execution rows first, written once and complete from the job rows
# as they stand (the running attempt lives on its job's row: worker_id, started_at,
# rate_key; migration 0017), fenced like the jobs they belong to (only those still
# running under that execution): the jobs' statement then changes the same set, inside
# the same write transaction, and answers which leases landed. The attempt that
# succeeds a job without a rate key writes none: the job's row records it (migration
# 0024; `queries/finish.py` of PostgreSQL says why).
CLOSE_EXECUTIONS = f"""
INSERT INTO heartq_ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                     outcome, error, crash, rate_key)
SELECT j.id, j.execution_id, j.worker_id, j.started_at, :now,
       json_extract(f.value, '$.outcome'), json_extract(f.value, '$.error'),
       json_extract(f.value, '$.crash'), j.rate_key
FROM json_each(:finishes) AS f
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(f.value, '$.id')
 AND j.execution_id = json_extract(f.value, '$.eid') AND {_HELD_BY}
 AND j.status = 'running'
WHERE NOT (json_extract(f.value, '$.status') = 'succeeded'
           AND json_extract(f.value, '$.outcome') = 'succeeded' AND j.rate_key IS NULL)
"""

# Each finish: {id, eid, status, outcome, result, error, delay, keep, dead_reason, crash,
# pending}; what the task last reported goes by PULSE, just before, on the same connection;
# `keep`: a job queued again keeps its run_at, its place in line (a first crash).
# An attempt that would be retried (status 'queued') while a cancel was requested ends the
# job as 'cancelled' instead: the request is honoured, never lost to a retry. The
# execution keeps its own outcome (failed, timed_out, ...).
# An attempt ended `interrupted` (its worker lost the database), `released` (its worker
# does not know its task: heartq.lifecycle.fate) or `snoozed` (its task said it is too
# early, within its bound) is not counted as an attempt; a snooze is counted in `snoozes`,
# and what the task said of it is its execution's, not the job's last error.
# The attempt's fair share tag, which its job kept while it ran, is cleared (here and in
# RELEASE_JOBS, the only two ends of a running attempt): whatever queues the job again (a
# retry, a snooze, a release, a reclaim) leaves it untagged, and the claim that finds it
# due tags it anew, behind its key's line (`heartq.store.sql.fair`).
_QUEUED_AGAIN = "(json_extract(f.value, '$.status') = 'queued' AND NOT j.cancel_requested)"

FINISH_JOBS = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET status = CASE WHEN json_extract(f.value, '$.status') = 'queued' AND j.cancel_requested
                  THEN 'cancelled' ELSE json_extract(f.value, '$.status') END,
    run_at = CASE WHEN {_QUEUED_AGAIN} AND NOT json_extract(f.value, '$.keep')
                  THEN :now + json_extract(f.value, '$.delay') ELSE j.run_at END,
    attempts = CASE WHEN json_extract(f.value, '$.outcome')
                         IN ('interrupted', 'released', 'snoozed')
                    THEN max(j.attempts - 1, 0) ELSE j.attempts END,
    snoozes = CASE WHEN json_extract(f.value, '$.outcome') = 'snoozed' THEN j.snoozes + 1
                   ELSE j.snoozes END,
    result = json_extract(f.value, '$.result'),
    error = CASE WHEN json_extract(f.value, '$.outcome') = 'snoozed' THEN j.error
                 ELSE coalesce(json_extract(f.value, '$.error'), j.error) END,
    dead_reason = json_extract(f.value, '$.dead_reason'),
    progress_value = CASE WHEN json_extract(f.value, '$.status') = 'succeeded'
                               AND j.progress_value IS NOT NULL
                          THEN 1.0 ELSE j.progress_value END,
    finished_at = CASE WHEN {_QUEUED_AGAIN} THEN NULL ELSE :now END,
    worker_id = CASE WHEN {_QUEUED_AGAIN} THEN NULL ELSE j.worker_id END,
    lease_expires_at = CASE WHEN json_extract(f.value, '$.pending') THEN coalesce(
        j.detached_until, max(j.lease_expires_at, coalesce(
            (SELECT w.lease_expires_at FROM heartq_workers AS w WHERE w.id = j.worker_id),
            j.lease_expires_at))) END,
    result_pending = coalesce(json_extract(f.value, '$.pending'), 0),
    detached_until = CASE WHEN json_extract(f.value, '$.pending') THEN j.detached_until END,
    cancel_requested = 0,
    fair_tag = NULL,
    updated_at = :now
FROM json_each(:finishes) AS f
WHERE j.id = json_extract(f.value, '$.id')
  AND j.execution_id = json_extract(f.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
RETURNING id, execution_id, status, awaited, has_dependents, 0 AS deferred
"""

FINISH = (CLOSE_EXECUTIONS, FINISH_JOBS)

# Released jobs go back to the queue, no attempt counted; one whose cancel was requested
# ends 'cancelled' instead (run_at and worker_id kept), so it never runs again. Each
# lease: {id, eid}. Executions first, written and fenced as in FINISH (a lease named
# twice writes one row).
CLOSE_RELEASED = f"""
INSERT INTO heartq_ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                     outcome, rate_key)
SELECT DISTINCT j.id, j.execution_id, j.worker_id, j.started_at, :now, 'released', j.rate_key
FROM json_each(:leases) AS l
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(l.value, '$.id')
 AND j.execution_id = json_extract(l.value, '$.eid') AND {_HELD_BY}
 AND j.status = 'running'
"""

RELEASE_JOBS = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
    attempts = max(j.attempts - 1, 0),
    worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
    lease_expires_at = NULL,
    detached_until = NULL,
    run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE :now END,
    finished_at = CASE WHEN j.cancel_requested THEN :now END,
    cancel_requested = 0,
    fair_tag = NULL,
    updated_at = :now
FROM json_each(:leases) AS l
WHERE j.id = json_extract(l.value, '$.id')
  AND j.execution_id = json_extract(l.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
RETURNING id, execution_id, status, awaited, has_dependents
"""

RELEASE = (CLOSE_RELEASED, RELEASE_JOBS)
