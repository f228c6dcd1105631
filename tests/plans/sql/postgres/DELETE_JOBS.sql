DELETE FROM jobs WHERE id = ANY(%(ids)s::text[])
