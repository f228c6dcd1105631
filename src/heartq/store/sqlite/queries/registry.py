"""Workers' rows: registered, stopped, deactivated (one, named, stale), how long the
observing worker has been in contact, and the list."""

from __future__ import annotations

REGISTER_WORKER = """
INSERT INTO heartq_workers (id, name, hostname, pid, queues, concurrency, status,
                            started_at, last_heartbeat_at, stale_after, contact_since)
VALUES (:id, :name, :hostname, :pid, :queues, :concurrency, 'active', :now, :now, :stale_after,
        :now)
ON CONFLICT (id) DO UPDATE SET status = 'active', last_heartbeat_at = :now, stopped_at = NULL,
                               stale_after = excluded.stale_after, contact_since = :now
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
# record one (older versions); and only by an observer in unbroken contact with the
# database for at least that threshold (`contact`, from OBSERVER_CONTACT).
DEACTIVATE_STALE = """
UPDATE heartq_workers SET status = 'inactive', stopped_at = :now
WHERE status = 'active' AND last_heartbeat_at < :now - coalesce(stale_after, :stale_after)
  AND coalesce(stale_after, :stale_after) <= :contact
RETURNING id, name, :now - last_heartbeat_at AS heartbeat_age
"""

# How long the observing worker has been in unbroken contact with the database (0 while
# its own last heartbeat is over half its threshold old: it is cut off right now).
OBSERVER_CONTACT = """
SELECT CASE WHEN last_heartbeat_at < :now - stale_after / 2 THEN 0.0
            ELSE :now - coalesce(contact_since, started_at) END AS contact,
       stale_after
FROM heartq_workers WHERE id = :worker_id
"""

# A worker no longer active runs no code: its last `abandoned` count is not shown.
# `running`: the jobs it started; `claimed_ahead`: those it holds in its buffer (both
# `running` rows of its lease, told apart by the column `claimed_ahead`).
LIST_WORKERS = """
SELECT w.id, w.name, w.hostname, w.pid, w.status, w.queues, w.concurrency,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM heartq_jobs j
        WHERE j.worker_id = w.id AND j.status = 'running' AND NOT j.claimed_ahead) AS running,
       (SELECT count(*) FROM heartq_jobs j
        WHERE j.worker_id = w.id AND j.status = 'running' AND j.claimed_ahead) AS claimed_ahead,
       CASE WHEN w.status = 'active' THEN w.abandoned ELSE 0 END AS abandoned
FROM heartq_workers AS w
WHERE (:include_all OR w.status = 'active')
ORDER BY w.started_at DESC
"""
