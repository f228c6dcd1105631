"""Queues an operator controls while workers run (`heartq.queue_controls`): the
operator's write, and the read every worker of a queue makes once a second."""

from __future__ import annotations

from heartq.store.postgres.queries.common import T

# One write per decision, whatever it changes: `paused` NULL keeps what is stored, and
# `concurrency` is written only when `scale` says so (NULL then means: no cap), so a
# pause and a scale made at once by two operators both land.
SET_QUEUE_CONTROL = f"""
INSERT INTO queue_controls AS c (queue, paused, concurrency, changed_at, changed_by)
VALUES (%(queue)s, coalesce(%(paused)s::boolean, false),
        CASE WHEN %(scale)s THEN %(concurrency)s::integer END, {T}, %(by)s)
ON CONFLICT (queue) DO UPDATE
SET paused = coalesce(%(paused)s::boolean, c.paused),
    concurrency = CASE WHEN %(scale)s THEN %(concurrency)s::integer ELSE c.concurrency END,
    changed_at = excluded.changed_at, changed_by = excluded.changed_by
RETURNING queue, paused, concurrency, extract(epoch FROM changed_at)::float8 AS changed_at,
          changed_by
"""

# The controls of `queues` (every queue's when it is NULL): a worker's read, by key.
QUEUE_CONTROLS = """
SELECT queue, paused, concurrency, extract(epoch FROM changed_at)::float8 AS changed_at,
       changed_by
FROM queue_controls
WHERE %(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])
ORDER BY queue
"""
