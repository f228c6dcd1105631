INSERT INTO lanes (queue, priority)
SELECT * FROM unnest(%(queues)s::text[], %(priorities)s::integer[])
ON CONFLICT DO NOTHING
