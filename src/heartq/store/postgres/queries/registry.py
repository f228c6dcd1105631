"""Workers' rows: registered, stopped, deactivated (one, named, stale), how long the
observing worker has been in contact, and the list."""

from __future__ import annotations

from heartq.store.postgres.queries.common import T

# `liveness_lock`: whether the worker holds a liveness lock (behind a transaction-mode
# pooler without a direct URL it holds none: no probe may try it).
REGISTER_WORKER = f"""
INSERT INTO workers (id, name, hostname, pid, queues, concurrency, status, started_at,
                     last_heartbeat_at, stale_after, contact_since, liveness_lock)
VALUES (%(id)s, %(name)s, %(hostname)s, %(pid)s, %(queues)s::json, %(concurrency)s, 'active',
        {T}, {T}, %(stale_after)s::float8, {T}, %(liveness_lock)s)
ON CONFLICT (id) DO UPDATE SET status = 'active', last_heartbeat_at = {T}, stopped_at = NULL,
                               stale_after = EXCLUDED.stale_after, contact_since = {T},
                               liveness_lock = EXCLUDED.liveness_lock
"""

STOP_WORKER = f"""
UPDATE workers SET status = 'stopped', stopped_at = {T} WHERE id = %(worker_id)s
"""

DEACTIVATE_WORKER = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}, lock_free_since = NULL
WHERE id = (
    SELECT id FROM workers WHERE id = %(worker_id)s AND status = 'active'
    FOR UPDATE SKIP LOCKED
)
RETURNING id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age
"""

DEACTIVATE_NAMED = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}, lock_free_since = NULL
WHERE id = ANY(%(ids)s::text[]) AND status = 'active'
"""

# Each worker is judged by its own threshold; the observer's only for workers that did not
# record one (older versions); and only by an observer in unbroken contact with the
# database for at least that threshold (`contact`, from OBSERVER_CONTACT).
# SKIP LOCKED: a worker frozen in the middle of its own heartbeat transaction keeps its
# row locked; waiting for it would stall this whole maintenance pass (lease reclaimer and probe
# share its thread), so every other stale worker is handled and that one next time.
DEACTIVATE_STALE = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}, lock_free_since = NULL
WHERE id IN (
    SELECT id FROM workers
    WHERE status = 'active'
      AND last_heartbeat_at < {T} - make_interval(
          secs => coalesce(stale_after, %(stale_after)s::float8))
      AND coalesce(stale_after, %(stale_after)s::float8) <= %(contact)s::float8
    FOR UPDATE SKIP LOCKED
)
RETURNING id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age
"""

# One query tries every active worker's liveness lock; the transaction's end releases
# the locks it took. A lock it can take belongs to a worker whose session is gone.
# How long the observing worker has been in unbroken contact with the database (0 while
# its own last heartbeat is over half its threshold old: it is cut off right now).
OBSERVER_CONTACT = f"""
SELECT CASE WHEN last_heartbeat_at < {T} - make_interval(secs => stale_after / 2) THEN 0.0
            ELSE extract(epoch from {T} - coalesce(contact_since, started_at))::float8
       END AS contact,
       stale_after
FROM workers WHERE id = %(worker_id)s
"""

# A worker no longer active runs no code: its last `abandoned` count is not shown.
# `running`: the jobs it started; `claimed_ahead`: those it holds in its buffer.
LIST_WORKERS = """
SELECT w.id, w.name, w.hostname, w.pid, w.status, w.queues::text AS queues, w.concurrency,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM leases AS l
        WHERE l.worker_id = w.id AND NOT l.claimed_ahead)::integer AS running,
       (SELECT count(*) FROM leases AS l
        WHERE l.worker_id = w.id AND l.claimed_ahead)::integer AS claimed_ahead,
       CASE WHEN w.status = 'active' THEN w.abandoned ELSE 0 END AS abandoned
FROM workers AS w
WHERE (%(include_all)s OR w.status = 'active')
ORDER BY w.started_at DESC
"""
