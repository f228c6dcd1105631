"""Jobs that wait for jobs (store/sql/dependencies.py): the jobs and edges an enqueue
writes, the release of a job's dependents in the transaction that ends it, and what a
job's dependencies and dependents are."""

from __future__ import annotations

# Jobs that take part in dependencies (store/sql/dependencies.py): those that wait for
# others (`status` 'waiting', `waiting_for` their number) and those of the same batch that
# others wait for (`has_dependents`). Plain jobs keep INSERT_JOB(S): they pay nothing.
INSERT_LINKED_JOBS = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         concurrency_key, concurrency_limit, rate_key, rate_limit,
                         rate_period, meta, has_dependents, waiting_for,
                         on_dependency_failure, dependency_results)
SELECT json_extract(x.value, '$.id'), json_extract(x.value, '$.task'),
       json_extract(x.value, '$.queue'), json_extract(x.value, '$.args'),
       json_extract(x.value, '$.priority'), json_extract(x.value, '$.status'),
       :now + json_extract(x.value, '$.delay'),
       json_extract(x.value, '$.max_retries'), json_extract(x.value, '$.retry_backoff'),
       json_extract(x.value, '$.retry_backoff_max'), json_extract(x.value, '$.chosen'),
       :now, :now, json_extract(x.value, '$.concurrency_key'),
       json_extract(x.value, '$.concurrency_limit'), json_extract(x.value, '$.rate_key'),
       json_extract(x.value, '$.rate_limit'), json_extract(x.value, '$.rate_period'),
       json_extract(x.value, '$.meta'), json_extract(x.value, '$.has_dependents'),
       json_extract(x.value, '$.waiting_for'), json_extract(x.value, '$.on_dependency_failure'),
       json_extract(x.value, '$.dependency_results')
FROM json_each(:jobs) AS x
"""

# The dependencies an enqueue names, marked `has_dependents`, each with its status. SQLite
# has one writer: no finish can come between this read and the enqueue's commit. A job
# not found is missing from the answer.
LOCK_DEPENDENCIES = (
    """
UPDATE heartq_jobs SET has_dependents = 1
WHERE id IN (SELECT value FROM json_each(:ids)) AND NOT has_dependents
""",
    "SELECT id, status FROM heartq_jobs WHERE id IN (SELECT value FROM json_each(:ids))",
)

# The dependencies an enqueue names that are not jobs: those in the trace of pruned
# successes count as succeeded; the others are not found.
PRUNED_SUCCESSES = """
SELECT id FROM heartq_pruned_successes WHERE id IN (SELECT value FROM json_each(:ids))
"""

# Each edge: {job_id, depends_on, position, ended, result_as}; `ended` is set for a
# dependency that succeeded and was pruned (counted at once), `result_as` for a job that
# takes results (how this dependency's result reaches it: store/documents.py).
INSERT_DEPENDENCIES = """
INSERT INTO heartq_job_dependencies (job_id, depends_on, position, ended, result_as)
SELECT json_extract(x.value, '$.job_id'), json_extract(x.value, '$.depends_on'),
       json_extract(x.value, '$.position'), json_extract(x.value, '$.ended'),
       json_extract(x.value, '$.result_as')
FROM json_each(:edges) AS x
"""

# The waiting dependents of jobs that ended (`ids`), in the ending transaction. Each edge
# not yet counted whose dependency has ended counts once; a job whose last dependency
# ended is queued (run_at: now, or its own later eta); one whose dependency ended dead or
# cancelled is cancelled, unless it runs anyway (`on_dependency_failure` 'run').
# END_DEPENDENCY_EDGES then marks the edges counted.
_FAILED = "c.failed IS NOT NULL AND j.on_dependency_failure IS NOT 'run'"

_RELEASED = f"NOT ({_FAILED}) AND j.waiting_for - c.n <= 0"

RELEASE_DEPENDENTS = f"""
UPDATE heartq_jobs AS j
SET waiting_for = max(j.waiting_for - c.n, 0),
    status = CASE WHEN {_FAILED} THEN 'cancelled'
                  WHEN {_RELEASED} THEN 'queued' ELSE 'waiting' END,
    run_at = CASE WHEN {_RELEASED} THEN max(j.run_at, :now) ELSE j.run_at END,
    finished_at = CASE WHEN {_FAILED} THEN :now END,
    error = CASE WHEN {_FAILED} THEN 'dependency_failed: job ' || c.failed ELSE j.error END,
    updated_at = :now
FROM (
    SELECT d.job_id, count(*) AS n,
           min(CASE WHEN e.status <> 'succeeded' THEN d.depends_on || ' ended ' || e.status END)
               AS failed
    FROM heartq_job_dependencies AS d JOIN heartq_jobs AS e ON e.id = d.depends_on
    WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND d.ended IS NULL
      AND e.status IN ('succeeded', 'dead', 'cancelled')
    GROUP BY d.job_id
) AS c
WHERE j.id = c.job_id AND j.status = 'waiting'
RETURNING id, queue, status, awaited, has_dependents
"""

END_DEPENDENCY_EDGES = """
UPDATE heartq_job_dependencies AS d
SET ended = (SELECT e.status FROM heartq_jobs AS e WHERE e.id = d.depends_on)
WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND d.ended IS NULL
  AND (SELECT e.status FROM heartq_jobs AS e WHERE e.id = d.depends_on)
      IN ('succeeded', 'dead', 'cancelled')
"""

# What a job with `dependency_results` receives: the dependencies whose results it takes
# (not those it only waits for, `result_as` 'none'; an edge written before v21 has none
# said: an item), in order, each one's result, whether it is passed as it is (`value`)
# and whether it is still to come (completed in its task's transaction, saved after: as
# JOB_END says).
DEPENDENCY_RESULTS = """
SELECT d.depends_on AS id, e.status, e.result,
       coalesce(e.result_pending, 0) AS pending, d.result_as IS 'value' AS as_value
FROM heartq_job_dependencies AS d LEFT JOIN heartq_jobs AS e ON e.id = d.depends_on
WHERE d.job_id = :job_id AND d.result_as IS NOT 'none'
ORDER BY d.position
"""

# A job's dependencies (in order) and its dependents, for `get_job`.
GET_DEPENDENCIES = """
SELECT d.depends_on AS id, e.task, e.status, d.ended
FROM heartq_job_dependencies AS d LEFT JOIN heartq_jobs AS e ON e.id = d.depends_on
WHERE d.job_id = :job_id
ORDER BY d.position
"""

GET_DEPENDENTS = """
SELECT d.job_id AS id, e.task, e.status, d.ended
FROM heartq_job_dependencies AS d LEFT JOIN heartq_jobs AS e ON e.id = d.job_id
WHERE d.depends_on = :job_id
ORDER BY d.job_id
LIMIT :limit
"""
