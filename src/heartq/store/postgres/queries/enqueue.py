"""Enqueue: new jobs inserted in one statement whatever the batch (waking their queues
with it), and a job with a unique key, inserted only if no job holds the key."""

from __future__ import annotations

from heartq.store.postgres.queries.batches import JOB_BATCH
from heartq.store.postgres.queries.common import LANE_NAMESPACE, UNIQUE_NAMESPACE, T, lane_key

# A job runnable now and without a concurrency or a rate key goes into the ready log
# (migration 0026): the id of the transaction that enqueues it orders it in its lane (its
# queue, its priority and its fairness key, '' for none: migration 0037). Its entry is a
# row of `ready` (migration 0040, `_ENTRIES`), and its document keeps the same
# `ready_xid`, the key of its entry.
# The enqueue holds each lane it enters under a shared transaction lock (`LANE_NAMESPACE`)
# until it commits, and then makes the lane if it is new: a lane is pruned, once empty,
# only under the same lock exclusive (`PRUNE_LANES`), so never from under an enqueue in
# flight, and an enqueue that waited for a prune makes the lane again.
_READY = "x.delay <= 0 AND x.concurrency_key IS NULL AND x.rate_key IS NULL"

_NEW_JOBS = f"""x AS MATERIALIZED (SELECT * FROM {JOB_BATCH.rows("b")}),
entered AS MATERIALIZED (
    SELECT e.queue, e.priority, e.fair_key,
           pg_advisory_xact_lock_shared({LANE_NAMESPACE},
                                        {lane_key("e.queue", "e.priority", "e.fair_key")})
    FROM (SELECT DISTINCT x.queue, x.priority, coalesce(x.fair_key, '') AS fair_key
          FROM x WHERE {_READY}) AS e
),
lane AS (
    INSERT INTO lanes (queue, priority, fair_key)
    SELECT queue, priority, fair_key FROM entered
    ON CONFLICT DO NOTHING
)"""

_ENTRIES = f"""entries AS (
    INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at, fair_weight)
    SELECT x.queue, x.priority, coalesce(x.fair_key, ''), pg_current_xact_id(), x.id,
           {T} + make_interval(secs => x.delay), x.fair_weight
    FROM x WHERE {_READY}
)"""

_INSERT_NEW_JOBS = f"""INSERT INTO job_documents (
    id, task, queue, args, priority, status, run_at, max_retries, retry_backoff,
    retry_backoff_max, chosen, created_at, updated_at, concurrency_key, concurrency_limit,
    rate_key, rate_limit, rate_period, fair_key, fair_weight, meta, expires_at, ready_xid)
SELECT x.id, x.task, x.queue, x.args::json, x.priority, 'queued',
       {T} + make_interval(secs => x.delay), x.max_retries, x.retry_backoff,
       x.retry_backoff_max, x.chosen, {T}, {T}, x.concurrency_key, x.concurrency_limit,
       x.rate_key, x.rate_limit, x.rate_period, x.fair_key, x.fair_weight, x.meta::jsonb,
       {T} + make_interval(secs => x.expires_in),
       CASE WHEN {_READY} THEN pg_current_xact_id() END
FROM x"""

INSERT_JOBS = f"""
WITH {_NEW_JOBS}, {_ENTRIES}
{_INSERT_NEW_JOBS}
"""

# An enqueue into a caller's transaction (store/sql/enqueue.py): first its lanes' shared
# locks, in the caller's transaction (`ENTER_LANES`); then the lanes made, committed at
# once on a connection of heartq's own (`OPEN_LANES`: a new lane made in the caller's
# transaction would hold its row, and every other enqueuer of the lane waiting on it,
# until the caller commits); then the jobs, which neither lock nor make a lane
# (`INSERT_ENTERED_JOBS`: a REPEATABLE READ transaction older than the lane cannot even
# see it, and its insert of the lane would fail to serialize).
ENTER_LANES = f"""
SELECT pg_advisory_xact_lock_shared({LANE_NAMESPACE},
                                    {lane_key("l.queue", "l.priority", "l.fair_key")})
FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
    AS l(queue, priority, fair_key)
"""

OPEN_LANES = """
INSERT INTO lanes (queue, priority, fair_key)
SELECT * FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
ON CONFLICT DO NOTHING
"""

INSERT_ENTERED_JOBS = f"""
WITH x AS MATERIALIZED (SELECT * FROM {JOB_BATCH.rows("b")}), {_ENTRIES}
{_INSERT_NEW_JOBS}
"""

# INSERT_JOBS and the wake-up of every queue it filled with jobs runnable now in one
# statement (store/sql/ `_insert_and_wake`): committed by itself, one round trip for an
# enqueue instead of four (BEGIN, insert, NOTIFY, COMMIT); and, for delayed jobs, one
# notification on the due channel saying in how many seconds the soonest falls due
# (`NOTIFY_DUE`). A notification is sent at commit, as NOTIFY's is.
INSERT_JOBS_WAKING = f"""
WITH {_NEW_JOBS}, {_ENTRIES}, inserted AS (
{_INSERT_NEW_JOBS}
    RETURNING queue, run_at > created_at AS later
)
SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM inserted WHERE NOT later)
    AS filled
UNION ALL
SELECT pg_notify(%(due_channel)s, min(x.delay)::text) FROM x WHERE x.delay > 0
HAVING count(*) > 0
"""

# A job with a unique key (store/sql/ `enqueue`), bound by value. Enqueuers of one key
# queue up on a transaction lock of its hash; each then looks with a fresh snapshot (READ
# COMMITTED: a statement sees every commit made before it started, the previous holder's
# included) for a job that holds the key: queued or running, or finished within
# `unique_for`. None: this job is inserted. The partial unique index is the backstop (a
# replayed dead job, a caller's REPEATABLE READ snapshot): a live duplicate is dropped.
# The last statement answers the job that holds the key: this one, or the one found.
LOCK_UNIQUE = f"SELECT pg_advisory_xact_lock({UNIQUE_NAMESPACE}, hashtext(%(unique_key)s))"

INSERT_UNIQUE_JOB = f"""
INSERT INTO job_documents (id, task, queue, args, priority, status, run_at, max_retries,
                  retry_backoff,
                  retry_backoff_max, chosen, created_at, updated_at, unique_key, schedule,
                  concurrency_key, concurrency_limit, rate_key, rate_limit, rate_period,
                  fair_key, fair_weight, meta, expires_at)
SELECT %(id)s, %(task)s, %(queue)s, %(args)s::json, %(priority)s, 'queued',
       {T} + make_interval(secs => %(delay)s::float8), %(max_retries)s, %(retry_backoff)s,
       %(retry_backoff_max)s, %(chosen)s, {T}, {T}, %(unique_key)s, %(schedule)s,
       %(concurrency_key)s, %(concurrency_limit)s::integer, %(rate_key)s,
       %(rate_limit)s::integer, %(rate_period)s::float8, %(fair_key)s,
       %(fair_weight)s::float8, %(meta)s::jsonb, {T} + make_interval(secs => %(expires_in)s::float8)
WHERE NOT EXISTS (
    SELECT 1 FROM jobs
    WHERE unique_key = %(unique_key)s
      AND (status IN ('queued', 'running')
           OR finished_at >= {T} - make_interval(secs => %(unique_for)s::float8)))
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
DO NOTHING
"""

UNIQUE_HOLDER = f"""
SELECT id, id = %(id)s AS inserted FROM jobs
WHERE unique_key = %(unique_key)s
  AND (id = %(id)s OR status IN ('queued', 'running')
       OR finished_at >= {T} - make_interval(secs => %(unique_for)s::float8))
ORDER BY id = %(id)s DESC, status IN ('queued', 'running') DESC, created_at DESC
LIMIT 1
"""

ENQUEUE_UNIQUE = (LOCK_UNIQUE, INSERT_UNIQUE_JOB, UNIQUE_HOLDER)
