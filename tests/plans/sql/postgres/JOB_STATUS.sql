SELECT 1 FROM ready AS r JOIN job_documents AS d ON r.queue = d.queue AND r.priority = d.priority
          AND r.fair_key = coalesce(d.fair_key, '')
          AND r.ready_xid = d.ready_xid AND r.job_id = d.id
       WHERE d.id = %(job_id)s FOR UPDATE OF r;
SELECT 1 FROM leases WHERE job_id = %(job_id)s FOR UPDATE;
SELECT 1 FROM job_documents WHERE id = %(job_id)s FOR UPDATE;
SELECT status FROM jobs WHERE id = %(job_id)s
