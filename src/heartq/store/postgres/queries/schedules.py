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
SELECT spec, extract(epoch from last_tick)::float8 AS last_tick,
       definition IS NOT NULL AS runtime, paused FROM schedules
WHERE name = %(name)s
FOR UPDATE
"""

UPDATE_SCHEDULE = f"""
UPDATE schedules
SET task = %(task)s, spec = %(spec)s, last_tick = to_timestamp(%(last_tick)s::float8),
    next_tick = to_timestamp(%(next_tick)s::float8),
    last_job_id = coalesce(%(last_job_id)s, last_job_id), updated_at = {T}, updated_by = %(by)s,
    definition = CASE WHEN %(runtime)s::boolean THEN definition END
WHERE name = %(name)s
"""

LIST_SCHEDULES = """
SELECT s.name, s.task, s.spec, extract(epoch from s.last_tick)::float8 AS last_tick,
       extract(epoch from s.next_tick)::float8 AS next_tick, s.last_job_id,
       j.status AS last_job_status, extract(epoch from s.updated_at)::float8 AS updated_at,
       s.updated_by, s.definition, s.paused,
       extract(epoch from s.changed_at)::float8 AS changed_at, s.changed_by
FROM schedules AS s LEFT JOIN jobs AS j ON j.id = s.last_job_id
ORDER BY s.name
"""

# The same without the last tick's job: what a worker's scheduler reads at each pass. It
# never touches `jobs`, so a lock on that table (a migration's, an operator's) holds no
# pooled connection of the worker's waiting behind it, where its claim needs one.
SCHEDULE_DEFINITIONS = """
SELECT s.name, s.task, s.spec, extract(epoch from s.last_tick)::float8 AS last_tick,
       extract(epoch from s.next_tick)::float8 AS next_tick, s.last_job_id,
       NULL::text AS last_job_status, extract(epoch from s.updated_at)::float8 AS updated_at,
       s.updated_by, s.definition, s.paused,
       extract(epoch from s.changed_at)::float8 AS changed_at, s.changed_by
FROM schedules AS s
ORDER BY s.name
"""

# Runtime schedules (heartq.runtime_schedules): an operator's add, change, pause, removal.
# The row is locked first, so an add and a code worker's first tick of one name, or two
# adds, go one after the other and the later one sees the earlier.
SCHEDULE_FOR_CHANGE = """
SELECT definition IS NOT NULL AS runtime FROM schedules WHERE name = %(name)s FOR UPDATE
"""

# `next_tick` NULL: every worker's next pass takes the write path and plans the ticks of
# the new definition from the last tick the fleet made (`heartq.periodic`).
INSERT_RUNTIME_SCHEDULE = f"""
INSERT INTO schedules (name, task, spec, definition, paused, updated_at, changed_at, changed_by)
VALUES (%(name)s, %(task)s, %(spec)s, %(definition)s::jsonb, %(paused)s, {T}, {T}, %(by)s)
ON CONFLICT (name) DO NOTHING
RETURNING name
"""

UPDATE_RUNTIME_SCHEDULE = f"""
UPDATE schedules
SET task = %(task)s, spec = %(spec)s, definition = %(definition)s::jsonb,
    paused = %(paused)s, next_tick = NULL, changed_at = {T}, changed_by = %(by)s
WHERE name = %(name)s AND definition IS NOT NULL
RETURNING name
"""

DELETE_RUNTIME_SCHEDULE = """
DELETE FROM schedules WHERE name = %(name)s AND definition IS NOT NULL RETURNING name
"""

PAUSE_SCHEDULE = f"""
UPDATE schedules
SET paused = %(paused)s, next_tick = NULL, changed_at = {T}, changed_by = %(by)s
WHERE name = %(name)s
RETURNING name
"""
