UPDATE heartq_jobs AS j
SET waiting_for = max(j.waiting_for - c.n, 0),
    holders = j.holders - c.unheld + CASE WHEN j.on_dependency_failure = 'block' THEN c.dead ELSE 0 END,
    status = CASE WHEN CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS NOT 'run' THEN 'cancelled'
                  WHEN NOT (CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS NOT 'run') AND j.waiting_for - c.n <= 0 AND j.holders - c.unheld + CASE WHEN j.on_dependency_failure = 'block' THEN c.dead ELSE 0 END <= 0 THEN 'queued'
                  WHEN j.holders - c.unheld + CASE WHEN j.on_dependency_failure = 'block' THEN c.dead ELSE 0 END > 0 THEN 'blocked' ELSE 'waiting' END,
    run_at = CASE WHEN NOT (CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS NOT 'run') AND j.waiting_for - c.n <= 0 AND j.holders - c.unheld + CASE WHEN j.on_dependency_failure = 'block' THEN c.dead ELSE 0 END <= 0 THEN max(j.run_at, :now) ELSE j.run_at END,
    finished_at = CASE WHEN CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS NOT 'run' THEN :now END,
    error = CASE WHEN CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END IS NOT NULL AND j.on_dependency_failure IS NOT 'run' THEN 'dependency_failed: job ' || CASE WHEN j.on_dependency_failure = 'block' THEN c.cancelled ELSE c.failed END ELSE j.error END,
    updated_at = :now
FROM (
    SELECT d.job_id, count(*) AS n, sum(e.status = 'dead') AS dead, sum(d.holds) AS unheld,
           min(CASE WHEN e.status <> 'succeeded' THEN d.depends_on || ' ended ' || e.status END)
               AS failed,
           min(CASE WHEN e.status = 'cancelled' THEN d.depends_on || ' ended cancelled' END)
               AS cancelled
    FROM heartq_job_dependencies AS d JOIN heartq_jobs AS e ON e.id = d.depends_on
    WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND d.ended IS NULL
      AND e.status IN ('succeeded', 'dead', 'cancelled')
    GROUP BY d.job_id
) AS c
WHERE j.id = c.job_id AND j.status IN ('waiting', 'blocked')
RETURNING id, queue, status, awaited, has_dependents
