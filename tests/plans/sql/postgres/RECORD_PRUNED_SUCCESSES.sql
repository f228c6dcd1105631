INSERT INTO pruned_successes (id)
SELECT id FROM jobs WHERE id = ANY(%(ids)s::text[]) AND status = 'succeeded'
ON CONFLICT DO NOTHING
