"""Reclaiming (store/sql/reclaim.py): the running rows a reclaimer takes (expired
leases, a dead worker's jobs, a restarted name's, one crashed attempt) with the columns
its `plan` reads, results given up with their attempt's lease, and a
restarted worker's namesakes."""

from __future__ import annotations

from heartq.store.postgres.queries.common import LOCK_NAMESPACE, PROBE_KEY, T
from heartq.store.postgres.queries.fencing import _HELD_BY

_RECLAIM_COLUMNS = """
SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, j.lease_expires_at, j.heartbeat_at,
       j.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, j.args::text AS args, j.meta::text AS meta,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed')::integer AS crashes,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'interrupted')::integer AS interruptions,
       (SELECT t.retry_rules::text FROM tasks AS t WHERE t.name = j.task) AS retry_rules
"""

_RECLAIM_FROM = "FROM jobs AS j LEFT JOIN workers AS w ON w.id = j.worker_id"

# Results still to come whose committing attempt's lease ran out (its worker died, froze or
# lost the database between the commit and the save): given up, by a reaper in contact
# (store/sql/ `reap_expired`), so that "no result" is final for every reader and a save
# that comes later is refused (SAVE_RESULT needs `result_pending`).
GIVE_UP_RESULTS = f"""
UPDATE jobs SET result_pending = false, lease_expires_at = NULL, updated_at = {T}
WHERE id IN (SELECT id FROM jobs WHERE result_pending AND lease_expires_at < {T}
             ORDER BY lease_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
  AND result_pending AND lease_expires_at < {T}
RETURNING id, status, awaited
"""

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
WAIT_FOR_PROBES = f"SELECT pg_advisory_xact_lock({PROBE_KEY})"

# Startup reconciliation: the other workers of a name that may still matter (active, or
# holding running jobs), each with whether it is silent past its own threshold (judged
# only by an observer in contact that long, as the monitor judges), since when its lock
# has been found free, and whether its liveness lock is free: tried here, in this
# transaction (a lock a live worker's session holds cannot be taken; the ones taken go
# when the transaction ends). The namesakes are fixed first, so no other worker's lock
# is ever tried.
_NAMESAKES = f"""
WITH namesakes AS MATERIALIZED (
    SELECT w.id, w.name, w.last_heartbeat_at, w.stale_after, w.lock_free_since,
           w.liveness_lock
    FROM workers AS w
    WHERE w.name = %(name)s AND w.id <> %(except_id)s
      AND (w.status = 'active'
           OR EXISTS (SELECT 1 FROM jobs AS j WHERE j.worker_id = w.id AND j.status = 'running'))
)
SELECT id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age,
       coalesce(last_heartbeat_at < {T} - make_interval(
                    secs => coalesce(stale_after, %(stale_after)s::float8))
                AND coalesce(stale_after, %(stale_after)s::float8) <= %(contact)s::float8,
                false) AS silent,
       liveness_lock AND pg_try_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(id)) AS lock_free,
       extract(epoch from {T} - lock_free_since)::float8 AS free_for
FROM namesakes
ORDER BY id
"""

NAMESAKES = (WAIT_FOR_PROBES, _NAMESAKES)

# What reconciliation found of its namesakes' locks, kept as the probes keep it: for
# those found free the grace starts now (unless a probe started it earlier); for those
# found held it is forgotten, so a later drop starts a grace of its own.
NOTE_NAMESAKE_LOCKS = f"""
UPDATE workers
SET lock_free_since = CASE WHEN id = ANY(%(free)s::text[])
                           THEN coalesce(lock_free_since, {T}) END
WHERE id = ANY(%(free)s::text[]) OR (id = ANY(%(held)s::text[]) AND lock_free_since IS NOT NULL)
"""

SELECT_NAME_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id = ANY(%(ids)s::text[])
FOR UPDATE OF j SKIP LOCKED
"""

SELECT_ONE_RUNNING = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.id = %(job_id)s AND j.execution_id = %(execution_id)s
  AND {_HELD_BY}
FOR UPDATE OF j
"""
