"""Reclaiming (store/sql/reclaim.py): the running rows a reclaimer takes (expired
leases, a gone worker's jobs, a restarted name's, one crashed attempt) with the columns
its `plan` reads, results given up with their attempt's lease, and a
restarted worker's namesakes."""

from __future__ import annotations

from heartq.store.postgres.queries.common import (
    EFFECTIVE_BEAT,
    EFFECTIVE_LEASE,
    LOCK_NAMESPACE,
    PROBE_KEY,
    T,
)
from heartq.store.postgres.queries.fencing import _HELD_BY

# A running attempt is its lease (`j`: the effective lease and beat read its columns),
# with its job's document (`d`).
_RECLAIM_COLUMNS = f"""
SELECT j.job_id AS id, j.execution_id, j.worker_id, d.task, d.queue, j.attempts,
       d.max_retries, d.retry_backoff,
       d.retry_backoff_max, {EFFECTIVE_LEASE} AS lease_expires_at,
       {EFFECTIVE_BEAT} AS heartbeat_at,
       d.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, d.args::text AS args, d.meta::text AS meta,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.job_id AND e.outcome = 'crashed')::integer AS crashes,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.job_id AND e.outcome = 'interrupted')::integer AS interruptions,
       (SELECT t.retry_rules::text FROM tasks AS t WHERE t.name = d.task) AS retry_rules
"""

# Each lease's document and worker found by their keys, one probe a lease each (a
# subquery of its own: joined as a table, with statistics that called `workers` small,
# the planner read the whole index of workers for every job instead, and with leases and
# documents analyzed empty it merged the two primary keys, read whole:
# docs/design/claim.md, "Plans that cannot turn").
_RECLAIM_FROM = """FROM leases AS j CROSS JOIN LATERAL (
    SELECT d.task, d.queue, d.max_retries, d.retry_backoff, d.retry_backoff_max,
           d.cancel_requested, d.args, d.meta
    FROM job_documents AS d WHERE d.id = j.job_id LIMIT 1
) AS d LEFT JOIN LATERAL (
    SELECT w.lease_expires_at, w.last_heartbeat_at FROM workers AS w
    WHERE w.id = j.worker_id LIMIT 1
) AS w ON true"""

# Results still to come whose committing attempt's lease really ran out (its worker died,
# froze or lost the database between the commit and the save): given up, by a lease
# reclaimer in contact (store/sql/ `reclaim_expired`), so that "lost" (`result_lost`:
# `reason`) is final for every reader and a save that comes later is refused (SAVE_RESULT
# needs `result_pending`). That lease is the attempt's effective lease, read now, as every
# reader reads it (docs/design/leases.md, "Leases and heartbeats"): FINISH left the one it
# had at the commit on the row (`lease_expires_at`) and its `detached_until` if detached.
# An attached attempt's is its worker's as long as that worker's heartbeats renew it: the
# worker still holds the attempt until its completer saved the result, and a save held
# up longer than a lease (a completer waiting for a pooled connection) is no death. A
# detached attempt's is its own deadline, which nothing renews after the commit (no beat
# names a committed attempt). The value at the commit is a floor of the one now (a
# worker's lease only moves on, or is cleared once run out), so the partial index of
# pending results (`jobs_pending_result_idx`: only those few rows) finds the candidates
# past it, and only those look their worker up: one probe each by its key, a scalar
# subquery (a `NOT EXISTS` there was planned as a hash of every leased worker).
_RESULT_LAPSED = f"""(j.result_pending AND j.lease_expires_at < {T}
       AND coalesce(j.detached_until, greatest(j.lease_expires_at, (
               SELECT w.lease_expires_at FROM workers AS w WHERE w.id = j.worker_id LIMIT 1
           ))) < {T})"""

GIVE_UP_RESULTS = f"""
UPDATE job_documents AS j
SET result_pending = false, lease_expires_at = NULL, detached_until = NULL,
                     result_lost = %(reason)s, updated_at = {T}
WHERE j.id = ANY(ARRAY(SELECT j.id FROM job_documents AS j WHERE {_RESULT_LAPSED}
                       ORDER BY j.lease_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED))
  AND {_RESULT_LAPSED} IS TRUE
RETURNING j.id, j.status, j.awaited
"""

# The reclaim (store/sql/ `reclaim_expired`), by the worker's lease
# (docs/design/leases.md, "Leases and heartbeats"): the workers past their lease, each
# locked `FOR UPDATE` by this statement of its own (a claim reads the row `FOR KEY
# SHARE`, so none of that worker's claims commits between the walk of its attempts and
# the clear of its lease; a worker whose row a heartbeat is updating is alive: skipped) ...
EXPIRED_WORKERS = f"""
SELECT id FROM workers
WHERE lease_expires_at < {T}
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

# ... then, in a statement of its own (a snapshot taken after the lock), each one's
# attached attempts past their floor (its lease lapsed: their effective lease is the
# floor), through `leases_worker_idx` ...
SELECT_LAPSED = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.worker_id = %(worker_id)s AND j.detached_until IS NULL
  AND j.lease_expires_at < {T}
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
"""

# ... and the worker's lease cleared once nothing of it is left running attached (a row
# skipped because locked, or with its floor still ahead, keeps it set: walked again at
# the next reclaim), so a gone worker is walked once; a heartbeat sets it again.
CLEAR_WORKER_LEASE = f"""
UPDATE workers SET lease_expires_at = NULL
WHERE id = %(worker_id)s AND (lease_expires_at < {T}) IS TRUE
  AND NOT EXISTS (SELECT 1 FROM leases AS j
                  WHERE j.worker_id = %(worker_id)s AND j.detached_until IS NULL)
"""

# Detached attempts past their own deadline, through `leases_detached_idx`: only detached
# leases have an entry, so the scan meets no attached attempt's.
SELECT_DETACHED = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.detached_until IS NOT NULL AND j.detached_until < {T}
ORDER BY j.detached_until
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
"""

SELECT_WORKER_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.worker_id = %(worker_id)s
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
           OR EXISTS (SELECT 1 FROM leases AS j WHERE j.worker_id = w.id))
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
WHERE j.worker_id = ANY(%(ids)s::text[])
FOR UPDATE OF j SKIP LOCKED
"""

SELECT_ONE_RUNNING = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.job_id = %(job_id)s AND j.execution_id = %(execution_id)s
  AND {_HELD_BY}
FOR UPDATE OF j
"""
