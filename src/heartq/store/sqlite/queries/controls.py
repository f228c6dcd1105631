"""Queues an operator controls while workers run (`heartq.queue_controls`): the
operator's write, and the read every worker of a queue makes once a second."""

from __future__ import annotations

# See the PostgreSQL statement of the same name: NULL `paused` keeps what is stored,
# `concurrency` is written only when `scale` says so.
SET_QUEUE_CONTROL = """
INSERT INTO heartq_queue_controls AS c (queue, paused, concurrency, changed_at, changed_by)
VALUES (:queue, coalesce(:paused, 0), CASE WHEN :scale THEN :concurrency END, :now, :by)
ON CONFLICT (queue) DO UPDATE
SET paused = coalesce(:paused, c.paused),
    concurrency = CASE WHEN :scale THEN :concurrency ELSE c.concurrency END,
    changed_at = excluded.changed_at, changed_by = excluded.changed_by
RETURNING queue, paused, concurrency, changed_at, changed_by
"""

QUEUE_CONTROLS = """
SELECT queue, paused, concurrency, changed_at, changed_by
FROM heartq_queue_controls
WHERE :queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))
ORDER BY queue
"""
