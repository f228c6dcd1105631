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

LOCK_SCHEDULE = "SELECT spec, last_tick FROM heartq_schedules WHERE name = :name"

UPDATE_SCHEDULE = """
UPDATE heartq_schedules
SET task = :task, spec = :spec, last_tick = :last_tick, next_tick = :next_tick,
    last_job_id = coalesce(:last_job_id, last_job_id), updated_at = :now, updated_by = :by
WHERE name = :name
"""

LIST_SCHEDULES = """
SELECT s.name, s.task, s.spec, s.last_tick, s.next_tick, s.last_job_id,
       j.status AS last_job_status, s.updated_at, s.updated_by
FROM heartq_schedules AS s LEFT JOIN heartq_jobs AS j ON j.id = s.last_job_id
ORDER BY s.name
"""
