"""Periodic schedules (store/sql/ `tick_schedule`): each schedule's row, its last and
next tick."""

from __future__ import annotations

# Periodic schedules (store/sql/ `tick_schedule`): the row is made if missing; the
# transaction holds SQLite's write lock, so the workers that find a tick due enqueue it one
# after the other, and the later ones find the last tick already moved on.
ENSURE_SCHEDULE = """
INSERT INTO heartq_schedules (name, task, spec, updated_at) VALUES (:name, :task, :spec, :now)
ON CONFLICT (name) DO NOTHING
"""

LOCK_SCHEDULE = """
SELECT spec, last_tick, definition IS NOT NULL AS runtime, paused FROM heartq_schedules
WHERE name = :name
"""

UPDATE_SCHEDULE = """
UPDATE heartq_schedules
SET task = :task, spec = :spec, last_tick = :last_tick, next_tick = :next_tick,
    last_job_id = coalesce(:last_job_id, last_job_id), updated_at = :now, updated_by = :by,
    definition = CASE WHEN :runtime THEN definition END
WHERE name = :name
"""

LIST_SCHEDULES = """
SELECT s.name, s.task, s.spec, s.last_tick, s.next_tick, s.last_job_id,
       j.status AS last_job_status, s.updated_at, s.updated_by,
       s.definition, s.paused, s.changed_at, s.changed_by
FROM heartq_schedules AS s LEFT JOIN heartq_jobs AS j ON j.id = s.last_job_id
ORDER BY s.name
"""

# The same without the last tick's job: what a worker's scheduler reads at each pass.
SCHEDULE_DEFINITIONS = """
SELECT s.name, s.task, s.spec, s.last_tick, s.next_tick, s.last_job_id,
       NULL AS last_job_status, s.updated_at, s.updated_by,
       s.definition, s.paused, s.changed_at, s.changed_by
FROM heartq_schedules AS s
ORDER BY s.name
"""

# Runtime schedules (heartq.runtime_schedules): an operator's add, change, pause, removal,
# each in a write transaction (SQLite's write lock: one after the other).
SCHEDULE_FOR_CHANGE = """
SELECT definition IS NOT NULL AS runtime FROM heartq_schedules WHERE name = :name
"""

INSERT_RUNTIME_SCHEDULE = """
INSERT INTO heartq_schedules
    (name, task, spec, definition, paused, updated_at, changed_at, changed_by)
VALUES (:name, :task, :spec, :definition, :paused, :now, :now, :by)
ON CONFLICT (name) DO NOTHING
RETURNING name
"""

UPDATE_RUNTIME_SCHEDULE = """
UPDATE heartq_schedules
SET task = :task, spec = :spec, definition = :definition, paused = :paused,
    next_tick = NULL, changed_at = :now, changed_by = :by
WHERE name = :name AND definition IS NOT NULL
RETURNING name
"""

DELETE_RUNTIME_SCHEDULE = """
DELETE FROM heartq_schedules WHERE name = :name AND definition IS NOT NULL RETURNING name
"""

PAUSE_SCHEDULE = """
UPDATE heartq_schedules
SET paused = :paused, next_tick = NULL, changed_at = :now, changed_by = :by
WHERE name = :name
RETURNING name
"""
