SELECT r.job_id FROM job_documents AS d
CROSS JOIN LATERAL (
    SELECT r.job_id FROM ready AS r WHERE r.queue = d.queue AND r.priority = d.priority
          AND r.fair_key = coalesce(d.fair_key, '')
          AND r.ready_xid = d.ready_xid AND r.job_id = d.id FOR KEY SHARE OF r
) AS r
WHERE d.id = ANY(%(ids)s::uuid[]) AND d.ready_xid IS NOT NULL
ORDER BY d.id;
SELECT job_id FROM leases WHERE job_id = ANY(%(ids)s::uuid[])
ORDER BY job_id
FOR KEY SHARE;
WITH locked AS (
    SELECT id, has_dependents FROM job_documents
    WHERE id = ANY(%(ids)s::uuid[])
    ORDER BY id
    FOR UPDATE
), marked AS (
    UPDATE job_documents SET has_dependents = true
    WHERE id IN (SELECT id FROM locked WHERE NOT has_dependents)
)
SELECT id FROM locked;
SELECT x.id, j.status FROM unnest(%(ids)s::uuid[]) AS x(id)
CROSS JOIN LATERAL (SELECT status FROM jobs WHERE id = x.id LIMIT 1) AS j
