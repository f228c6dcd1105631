SELECT pg_advisory_xact_lock_shared(18508,
                                    hashtext(current_schema() || '/' || l.queue || '/' || l.priority::text || CASE WHEN l.fair_key = '' THEN '' ELSE '/' || l.fair_key END))
FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
    AS l(queue, priority, fair_key)
