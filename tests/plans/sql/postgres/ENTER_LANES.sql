SELECT pg_advisory_xact_lock_shared(18508, hashtext(current_schema() || '/' || l.queue || '/' || l.priority::text))
FROM unnest(%(queues)s::text[], %(priorities)s::integer[]) AS l(queue, priority)
