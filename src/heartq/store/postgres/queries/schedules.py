"""Periodic schedules (store/sql/ `tick_schedule`): each schedule's row, its last and
next tick."""

from __future__ import annotations

from heartq.store.postgres.queries.common import T

# Periodic schedules (store/sql/ `tick_schedule`): the row is made if missing, then
# locked for the transaction, so the workers that find a tick due enqueue it one after the
# other, and the later ones find the last tick already moved on.
ENSURE_SCHEDULE = f"""
INSERT INTO schedules (name, task, spec, updated_at) VALUES (%(name)s, %(task)s, %(spec)s, {T})
ON CONFLICT (name) DO NOTHING
"""

LOCK_SCHEDULE = """
SELECT spec, extract(epoch from last_tick)::float8 AS last_tick FROM schedules
WHERE name = %(name)s
FOR UPDATE
"""

UPDATE_SCHEDULE = f"""
UPDATE schedules
SET task = %(task)s, spec = %(spec)s, last_tick = to_timestamp(%(last_tick)s::float8),
    next_tick = to_timestamp(%(next_tick)s::float8),
    last_job_id = coalesce(%(last_job_id)s, last_job_id), updated_at = {T}, updated_by = %(by)s
WHERE name = %(name)s
"""

LIST_SCHEDULES = """
SELECT s.name, s.task, s.spec, extract(epoch from s.last_tick)::float8 AS last_tick,
       extract(epoch from s.next_tick)::float8 AS next_tick, s.last_job_id,
       j.status AS last_job_status, extract(epoch from s.updated_at)::float8 AS updated_at,
       s.updated_by
FROM schedules AS s LEFT JOIN jobs AS j ON j.id = s.last_job_id
ORDER BY s.name
"""
