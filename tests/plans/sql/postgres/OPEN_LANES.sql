INSERT INTO lanes (queue, priority, fair_key)
SELECT * FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
ON CONFLICT DO NOTHING
