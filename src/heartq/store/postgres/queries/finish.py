"""The end of an attempt: `FINISH` (the fate its worker decided, or a reclaimer's) and
`RELEASE` (given back, not counted), each writing the attempt's execution row in its
job's transaction.

Their `CASE` expressions restate two rules of `heartq.lifecycle.fate` (how a fate lands)
inside the fenced write: a retry after a cancel request ends the job cancelled, and
interrupted and released attempts are not counted. tests/conformance/test_landed.py holds
the two to agreement."""

from __future__ import annotations

from heartq.store.postgres.queries.common import T
from heartq.store.postgres.queries.fencing import _locked

# An attempt that would be retried (status 'queued') while a cancel was requested ends the
# job as 'cancelled' instead: the request is honoured, never lost to a retry. The
# execution keeps its own outcome (failed, timed_out, ...).
# An attempt ended `interrupted` (its worker lost the database) or `released` (its worker
# does not know its task: heartq.lifecycle.fate) is not counted as an attempt.
_REQUEUE = "(f.status = 'queued' AND NOT j.cancel_requested)"

FINISH = f"""
WITH f AS (
    SELECT * FROM json_to_recordset(%(finishes)s::json) AS f(
        id text, eid bigint, status text, outcome text, result text, error text,
        delay float8, keep boolean, dead_reason text, crash text, pending boolean)
), {_locked("f", "j.execution_id", "j.has_dependents", "j.worker_id")}, landed AS (
    UPDATE jobs AS j
    SET status = CASE WHEN f.status = 'queued' AND j.cancel_requested
                      THEN 'cancelled' ELSE f.status END,
        run_at = CASE WHEN {_REQUEUE} AND NOT f.keep
                      THEN {T} + make_interval(secs => f.delay) ELSE j.run_at END,
        attempts = CASE WHEN f.outcome IN ('interrupted', 'released')
                        THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        result = f.result::json,
        error = coalesce(f.error, j.error),
        dead_reason = f.dead_reason,
        progress_value = CASE WHEN f.status = 'succeeded' AND j.progress_value IS NOT NULL
                              THEN 1.0 ELSE j.progress_value END,
        finished_at = CASE WHEN {_REQUEUE} THEN NULL ELSE {T} END,
        worker_id = CASE WHEN {_REQUEUE} THEN NULL ELSE j.worker_id END,
        lease_expires_at = CASE WHEN f.pending THEN j.lease_expires_at END,
        result_pending = coalesce(f.pending, false),
        cancel_requested = false,
        updated_at = {T}
    FROM f JOIN locked ON locked.id = f.id
    WHERE j.id = f.id AND j.execution_id = f.eid AND locked.status = 'running'
      AND NOT (%(defer)s AND j.has_dependents)
    RETURNING j.id, j.execution_id, j.status, j.awaited, j.has_dependents,
              locked.worker_id AS ran_on, j.started_at, j.rate_key
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, error, crash, rate_key)
    SELECT landed.id, landed.execution_id, landed.ran_on, landed.started_at, {T},
           f.outcome, f.error, f.crash::json, landed.rate_key
    FROM f JOIN landed ON landed.id = f.id AND landed.execution_id = f.eid
)
SELECT id, execution_id, status, awaited, has_dependents, false AS deferred FROM landed
UNION ALL
SELECT id, execution_id, status, false, true, true FROM locked
WHERE %(defer)s AND has_dependents AND status = 'running'
"""

# Released jobs go back to the queue, no attempt counted; one whose cancel was requested
# ends 'cancelled' instead (run_at and worker_id kept), so it never runs again. The
# attempt's execution row is written here, as FINISH writes it.
RELEASE = f"""
WITH l AS (
    SELECT * FROM json_to_recordset(%(leases)s::json) AS l(id text, eid bigint)
), {_locked("l", "j.worker_id")}, landed AS (
    UPDATE jobs AS j
    SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        attempts = greatest(j.attempts - 1, 0),
        worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
        lease_expires_at = NULL,
        run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE {T} END,
        finished_at = CASE WHEN j.cancel_requested THEN {T} END,
        cancel_requested = false,
        updated_at = {T}
    FROM l JOIN locked ON locked.id = l.id
    WHERE j.id = l.id AND j.execution_id = l.eid AND locked.status = 'running'
    RETURNING j.id, j.execution_id, j.status, j.awaited, j.has_dependents,
              locked.worker_id AS ran_on, j.started_at, j.rate_key
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, rate_key)
    SELECT id, execution_id, ran_on, started_at, {T}, 'released', rate_key FROM landed
)
SELECT id, execution_id, status, awaited, has_dependents FROM landed
"""
