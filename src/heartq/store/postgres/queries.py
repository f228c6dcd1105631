"""Every SQL statement of the PostgreSQL backend, by name: the same names, in the same
order, as the SQLite backend's `queries.py`, so the two dialects can be diffed; the
statements only PostgreSQL has (wake-ups, liveness locks, migrations) come last.
Parameters are always bound; the only values written into the text are the constants of
heartq's advisory lock keys below. A tuple is several statements run in order in one
transaction, the last one's rows being the answer (`store/sql.py`).

Time: `T` is the database clock (`now()`, stable within a transaction) unless the caller
passes `now` (seconds since the epoch), which tests use to drive the protocol.
Batches travel as one JSON parameter read with `json_to_recordset`, so claim, heartbeat
and finish are each ONE statement whatever the batch size.
"""

from __future__ import annotations

LOCK_NAMESPACE = 0x4851
"""First key of heartq's advisory locks (the second is a hash of the worker id, or one of
the keys below)."""
MIGRATION_LOCK = 0
"""Second key of the lock a migration holds for its transaction: one at a time."""
PROBE_LOCK = 1
"""Second key of the lock a liveness probe holds for its transaction: one probe at a time
per database, so two probers never take each other's try-locks for a worker's own."""

T = "coalesce(to_timestamp(%(now)s::float8), now())"


def _secs(name: str) -> str:
    return f"make_interval(secs => %({name})s::float8)"


NOW = f"SELECT extract(epoch from {T})::float8 AS now"

INSERT_JOBS = f"""
INSERT INTO jobs (id, task, queue, args, priority, status, run_at, max_retries, retry_backoff,
                  retry_backoff_max, created_at, updated_at)
SELECT x.id, x.task, x.queue, x.args::json, x.priority, 'queued',
       {T} + make_interval(secs => x.delay), x.max_retries, x.retry_backoff,
       x.retry_backoff_max, {T}, {T}
FROM json_to_recordset(%(jobs)s::json) AS x(
    id text, task text, queue text, args text, priority integer, delay float8,
    max_retries integer, retry_backoff float8, retry_backoff_max float8)
"""

# Each queue's best runnable jobs come from its own ordered walk of the claim index
# (`LATERAL`, one per queue): `queue = ANY(...)` with this ORDER BY would read and sort
# every queued row of those queues at each claim, so the claim would slow down with the
# backlog. Up to `limit` rows per queue are locked and the best `limit` of them taken;
# the others are unlocked when the claim commits, milliseconds later.
CLAIM = f"""
WITH picked AS (
    SELECT c.id FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM jobs
        WHERE status = 'queued' AND queue = q.name AND run_at <= {T}
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(limit)s
), claimed AS (
    UPDATE jobs AS j
    SET status = 'running',
        worker_id = %(worker_id)s,
        execution_id = j.execution_id + 1,
        attempts = j.attempts + 1,
        lease_expires_at = {T} + {_secs("lease")},
        heartbeat_at = {T},
        started_at = {T},
        updated_at = {T},
        progress_value = NULL, progress_stage = NULL, progress_message = NULL
    FROM picked WHERE j.id = picked.id
    RETURNING j.*
), audit AS (
    INSERT INTO executions (job_id, execution_id, worker_id, started_at)
    SELECT id, execution_id, worker_id, started_at FROM claimed
)
SELECT id, task, queue, args::text AS args, attempts, execution_id, max_retries,
       retry_backoff, retry_backoff_max, checkpoint::text AS checkpoint, priority,
       extract(epoch from lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from run_at)::float8 AS run_at
FROM claimed
"""

# Heartbeat, finish and release lock their job rows in id order (the `locked` CTE) before
# they update them, and update only through it: two statements of one worker that touch
# the same jobs (a heartbeat and a finish racing) then wait for each other instead of
# each holding a row the other needs ("deadlock detected"). Fencing stays as it was:
# only rows still running under the execution the batch names are changed. The lock step
# finds its rows by primary key alone (`j.id = ANY(ARRAY(SELECT id FROM ...))`, no status
# test), whatever the statistics say: with `status = 'running'` there, a table whose
# statistics lag (a burst of claims) was read through every running row (jobs_worker_idx)
# for each batch. A row of the batch's execution that is no longer running is locked too,
# in the same id order, and left unchanged.
HEARTBEAT = f"""
WITH touched AS (
    UPDATE workers SET last_heartbeat_at = {T}, status = 'active', stopped_at = NULL
    WHERE id = %(worker_id)s
), r AS (
    SELECT * FROM json_to_recordset(%(renewals)s::json)
        AS r(id text, eid bigint, hp boolean, pv float8, ps text, pm text)
), locked AS (
    SELECT j.id FROM jobs AS j JOIN r ON j.id = r.id AND j.execution_id = r.eid
    WHERE j.id = ANY(ARRAY(SELECT id FROM r))
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE jobs AS j
SET lease_expires_at = {T} + {_secs("lease")},
    heartbeat_at = {T},
    updated_at = {T},
    progress_value = CASE WHEN r.hp THEN r.pv ELSE j.progress_value END,
    progress_stage = CASE WHEN r.hp THEN r.ps ELSE j.progress_stage END,
    progress_message = CASE WHEN r.hp THEN r.pm ELSE j.progress_message END
FROM r JOIN locked ON locked.id = r.id
WHERE j.id = r.id AND j.execution_id = r.eid AND j.status = 'running'
RETURNING j.id, j.execution_id, j.cancel_requested
"""

SAVE_CHECKPOINT = f"""
UPDATE jobs SET checkpoint = %(checkpoint)s::json, updated_at = {T}
WHERE id = %(job_id)s AND execution_id = %(execution_id)s AND status = 'running'
RETURNING cancel_requested
"""

# An attempt that would be retried (status 'queued') while a cancel was requested ends the
# job as 'cancelled' instead: the request is honoured, never lost to a retry. The
# execution keeps its own outcome (failed, timed_out, ...).
_REQUEUE = "(f.status = 'queued' AND NOT j.cancel_requested)"

FINISH = f"""
WITH f AS (
    SELECT * FROM json_to_recordset(%(finishes)s::json) AS f(
        id text, eid bigint, status text, outcome text, result text, error text,
        delay float8, keep boolean, dead_reason text, crash text)
), locked AS (
    SELECT j.id FROM jobs AS j JOIN f ON j.id = f.id AND j.execution_id = f.eid
    WHERE j.id = ANY(ARRAY(SELECT id FROM f))
    ORDER BY j.id
    FOR UPDATE OF j
), landed AS (
    UPDATE jobs AS j
    SET status = CASE WHEN f.status = 'queued' AND j.cancel_requested
                      THEN 'cancelled' ELSE f.status END,
        run_at = CASE WHEN {_REQUEUE} AND NOT f.keep
                      THEN {T} + make_interval(secs => f.delay) ELSE j.run_at END,
        result = f.result::json,
        error = coalesce(f.error, j.error),
        dead_reason = f.dead_reason,
        progress_value = CASE WHEN f.status = 'succeeded' AND j.progress_value IS NOT NULL
                              THEN 1.0 ELSE j.progress_value END,
        finished_at = CASE WHEN {_REQUEUE} THEN NULL ELSE {T} END,
        worker_id = CASE WHEN {_REQUEUE} THEN NULL ELSE j.worker_id END,
        lease_expires_at = NULL,
        cancel_requested = false,
        updated_at = {T}
    FROM f JOIN locked ON locked.id = f.id
    WHERE j.id = f.id AND j.execution_id = f.eid AND j.status = 'running'
    RETURNING j.id, j.execution_id
), closed AS (
    UPDATE executions AS e
    SET ended_at = {T}, outcome = f.outcome, error = f.error, crash = f.crash::json
    FROM f JOIN landed ON landed.id = f.id AND landed.execution_id = f.eid
    WHERE e.job_id = f.id AND e.execution_id = f.eid
)
SELECT id, execution_id FROM landed
"""

# Released jobs go back to the queue, no attempt counted; one whose cancel was requested
# ends 'cancelled' instead (run_at and worker_id kept), so it never runs again.
RELEASE = f"""
WITH l AS (
    SELECT * FROM json_to_recordset(%(leases)s::json) AS l(id text, eid bigint)
), locked AS (
    SELECT j.id FROM jobs AS j JOIN l ON j.id = l.id AND j.execution_id = l.eid
    WHERE j.id = ANY(ARRAY(SELECT id FROM l))
    ORDER BY j.id
    FOR UPDATE OF j
), landed AS (
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
    WHERE j.id = l.id AND j.execution_id = l.eid AND j.status = 'running'
    RETURNING j.id, j.execution_id
), closed AS (
    UPDATE executions AS e SET ended_at = {T}, outcome = 'released'
    FROM landed WHERE e.job_id = landed.id AND e.execution_id = landed.execution_id
)
SELECT id, execution_id FROM landed
"""

_RECLAIM_COLUMNS = """
SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, j.lease_expires_at, j.heartbeat_at,
       j.cancel_requested, w.last_heartbeat_at AS worker_heartbeat_at,
       (SELECT count(*) FROM executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed')::integer AS crashes
"""
_RECLAIM_FROM = "FROM jobs AS j LEFT JOIN workers AS w ON w.id = j.worker_id"

SELECT_EXPIRED = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.lease_expires_at < {T}
ORDER BY j.lease_expires_at
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
"""

SELECT_WORKER_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id = %(worker_id)s
FOR UPDATE OF j SKIP LOCKED
"""

# Reconciliation tries liveness locks as a probe does: one at a time with the probes
# (their lock, for the transaction), so neither takes the other's try-lock for a live
# worker's own.
WAIT_FOR_PROBES = f"SELECT pg_advisory_xact_lock({LOCK_NAMESPACE}, {PROBE_LOCK})"

# Startup reconciliation: the other workers of a name that may still matter (active, or
# holding running jobs), each with whether it is silent past its own threshold and
# whether its liveness lock is free: tried here, in this transaction (a lock a live
# worker's session holds cannot be taken; the ones taken go when the transaction ends).
# The namesakes are fixed first, so no other worker's lock is ever tried.
_NAMESAKES = f"""
WITH namesakes AS MATERIALIZED (
    SELECT w.id, w.name, w.last_heartbeat_at, w.stale_after FROM workers AS w
    WHERE w.name = %(name)s AND w.id <> %(except_id)s
      AND (w.status = 'active'
           OR EXISTS (SELECT 1 FROM jobs AS j WHERE j.worker_id = w.id AND j.status = 'running'))
)
SELECT id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age,
       coalesce(last_heartbeat_at < {T} - make_interval(
           secs => coalesce(stale_after, %(stale_after)s::float8)), false) AS silent,
       pg_try_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(id)) AS lock_free
FROM namesakes
ORDER BY id
"""

NAMESAKES = (WAIT_FOR_PROBES, _NAMESAKES)

SELECT_NAME_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id = ANY(%(ids)s::text[])
FOR UPDATE OF j SKIP LOCKED
"""

SELECT_ONE_RUNNING = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.id = %(job_id)s AND j.execution_id = %(execution_id)s
FOR UPDATE OF j
"""

REGISTER_WORKER = f"""
INSERT INTO workers (id, name, hostname, pid, queues, concurrency, status, started_at,
                     last_heartbeat_at, stale_after)
VALUES (%(id)s, %(name)s, %(hostname)s, %(pid)s, %(queues)s::json, %(concurrency)s, 'active',
        {T}, {T}, %(stale_after)s::float8)
ON CONFLICT (id) DO UPDATE SET status = 'active', last_heartbeat_at = {T}, stopped_at = NULL,
                               stale_after = EXCLUDED.stale_after
"""

STOP_WORKER = f"""
UPDATE workers SET status = 'stopped', stopped_at = {T} WHERE id = %(worker_id)s
"""

DEACTIVATE_WORKER = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}
WHERE id = (
    SELECT id FROM workers WHERE id = %(worker_id)s AND status = 'active'
    FOR UPDATE SKIP LOCKED
)
RETURNING id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age
"""

DEACTIVATE_NAMED = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}
WHERE id = ANY(%(ids)s::text[]) AND status = 'active'
"""

# Each worker is judged by its own threshold; the observer's only for workers that did not
# record one (older versions).
# SKIP LOCKED: a worker frozen in the middle of its own heartbeat transaction keeps its
# row locked; waiting for it would stall this whole maintenance pass (reaper and probe
# share its thread), so every other stale worker is handled and that one next time.
DEACTIVATE_STALE = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}
WHERE id IN (
    SELECT id FROM workers
    WHERE status = 'active'
      AND last_heartbeat_at < {T} - make_interval(
          secs => coalesce(stale_after, %(stale_after)s::float8))
    FOR UPDATE SKIP LOCKED
)
RETURNING id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age
"""

# One query tries every active worker's liveness lock; the transaction's end releases
# the locks it took. A lock it can take belongs to a worker whose session is gone.
LIST_WORKERS = """
SELECT w.id, w.name, w.hostname, w.pid, w.status, w.queues::text AS queues, w.concurrency,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM jobs j
        WHERE j.worker_id = w.id AND j.status = 'running')::integer AS running
FROM workers AS w
WHERE (%(include_all)s OR w.status = 'active')
ORDER BY w.started_at DESC
"""

PRUNE_WORKERS = f"""
DELETE FROM workers
WHERE status IN ('inactive', 'stopped')
  AND coalesce(stopped_at, last_heartbeat_at) < {T} - {_secs("retention")}
"""

SELECT_PRUNABLE_JOBS = f"""
SELECT id FROM jobs
WHERE status IN ('succeeded', 'cancelled') AND finished_at < {T} - {_secs("retention")}
LIMIT %(limit)s
"""

SELECT_PURGEABLE_DEAD = f"""
SELECT id FROM jobs
WHERE status = 'dead'
  AND (%(older_than)s::float8 IS NULL OR finished_at < {T} - {_secs("older_than")})
"""

DELETE_EXECUTIONS_OF = "DELETE FROM executions WHERE job_id = ANY(%(ids)s::text[])"

DELETE_JOBS = "DELETE FROM jobs WHERE id = ANY(%(ids)s::text[])"

GET_JOB = "SELECT * FROM jobs WHERE id = %(job_id)s"

GET_EXECUTIONS = "SELECT * FROM executions WHERE job_id = %(job_id)s ORDER BY execution_id"

LIST_JOBS = """
SELECT * FROM jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s
"""

QUEUE_WAITS = f"""
SELECT queue,
       extract(epoch from min(run_at) FILTER (WHERE run_at <= {T}))::float8 AS oldest_run_at,
       count(*) FILTER (WHERE run_at > {T})::integer AS scheduled
FROM jobs
WHERE status = 'queued'
GROUP BY queue
"""

OLDEST_RUNNABLE = """
SELECT id FROM jobs
WHERE status = 'queued' AND queue = %(queue)s
  AND run_at <= to_timestamp(%(run_at)s::float8) + interval '1 millisecond'
ORDER BY run_at, id
LIMIT 1
"""

COUNT_JOBS = """
SELECT queue, status, count(*)::integer AS n FROM jobs GROUP BY queue, status
ORDER BY queue, status
"""

CANCEL_QUEUED = f"""
UPDATE jobs SET status = 'cancelled', finished_at = {T}, updated_at = {T},
                error = 'cancelled before it ran'
WHERE id = %(job_id)s AND status = 'queued'
"""

REQUEST_CANCEL = f"""
UPDATE jobs SET cancel_requested = true, updated_at = {T}
WHERE id = %(job_id)s AND status = 'running'
"""

JOB_STATUS = "SELECT status FROM jobs WHERE id = %(job_id)s FOR UPDATE"

REPLAY_DEAD = f"""
UPDATE jobs
SET status = 'queued', attempts = 0, run_at = {T}, dead_reason = NULL, finished_at = NULL,
    worker_id = NULL, cancel_requested = false, updated_at = {T}
WHERE status = 'dead' AND (%(all)s OR id = ANY(%(ids)s::text[]))
RETURNING id, queue
"""

# -- only PostgreSQL -------------------------------------------------------------------

NOTIFY = "SELECT pg_notify(%(channel)s, %(queue)s)"

# A liveness probe starts with the probe's time (T), the server's uptime (real clock: a
# restart frees every lock) and the probe lock, taken for the transaction.
PROBE_START = f"""
SELECT extract(epoch from {T})::float8 AS now,
       extract(epoch from now() - pg_postmaster_start_time())::float8 AS uptime,
       pg_try_advisory_xact_lock({LOCK_NAMESPACE}, {PROBE_LOCK}) AS alone
"""

# One query tries every active worker's liveness lock; the transaction's end releases
# the locks it took. A lock it can take belongs to a worker whose session is gone.
PROBE_LIVENESS = f"""
SELECT id FROM workers
WHERE status = 'active' AND pg_try_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(id))
"""

LIVENESS_LOCK = f"SELECT pg_try_advisory_lock({LOCK_NAMESPACE}, hashtext(%(worker_id)s)) AS locked"

PING = "SELECT 1"

MIGRATIONS_PRESENT = (
    "SELECT to_regclass(format('%%I.schema_migrations', %(schema)s::text)) IS NOT NULL AS present"
)

MIGRATION_START = f"SELECT pg_advisory_xact_lock({LOCK_NAMESPACE}, {MIGRATION_LOCK})"

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations
(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())
"""

SCHEMA_VERSION = "SELECT coalesce(max(version), 0) AS v FROM schema_migrations"

RECORD_MIGRATION = "INSERT INTO schema_migrations (version) VALUES (%(version)s)"
