(SELECT id FROM job_documents
 WHERE status IN ('succeeded', 'cancelled') AND finished_at < coalesce(to_timestamp(%(now)s::float8), now()) - make_interval(secs => %(retention)s::float8)
 LIMIT %(limit)s)
UNION ALL
(SELECT job_id FROM job_ends
 WHERE finished_at < coalesce(to_timestamp(%(now)s::float8), now()) - make_interval(secs => %(retention)s::float8) AND status IN ('succeeded', 'cancelled')
 LIMIT %(limit)s)
LIMIT %(limit)s
