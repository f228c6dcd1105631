"""Jobs that wait for jobs (store/sql/dependencies.py): the jobs and edges an enqueue
writes, the settling of a job's dependents in the transaction that ends it, and what a
job's dependencies and dependents are."""

from __future__ import annotations

# Jobs that take part in dependencies (store/sql/dependencies.py): those that wait for
# others (`status` 'waiting', `waiting_for` their number; 'blocked' with `holders`, the
# number of them blocked already) and those of the same batch that others wait for
# (`has_dependents`). Plain jobs keep INSERT_JOB(S): they pay nothing.
INSERT_LINKED_JOBS = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         concurrency_key, concurrency_limit, rate_key, rate_limit,
                         rate_period, fair_key, fair_weight, meta, has_dependents,
                         waiting_for, holders,
                         on_dependency_failure, dependency_results, expires_at)
SELECT json_extract(x.value, '$.id'), json_extract(x.value, '$.task'),
       json_extract(x.value, '$.queue'), json_extract(x.value, '$.args'),
       json_extract(x.value, '$.priority'), json_extract(x.value, '$.status'),
       :now + json_extract(x.value, '$.delay'),
       json_extract(x.value, '$.max_retries'), json_extract(x.value, '$.retry_backoff'),
       json_extract(x.value, '$.retry_backoff_max'), json_extract(x.value, '$.chosen'),
       :now, :now, json_extract(x.value, '$.concurrency_key'),
       json_extract(x.value, '$.concurrency_limit'), json_extract(x.value, '$.rate_key'),
       json_extract(x.value, '$.rate_limit'), json_extract(x.value, '$.rate_period'),
       json_extract(x.value, '$.fair_key'), json_extract(x.value, '$.fair_weight'),
       json_extract(x.value, '$.meta'), json_extract(x.value, '$.has_dependents'),
       json_extract(x.value, '$.waiting_for'), json_extract(x.value, '$.holders'),
       json_extract(x.value, '$.on_dependency_failure'),
       json_extract(x.value, '$.dependency_results'),
       :now + json_extract(x.value, '$.expires_in')
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

# Each edge: {job_id, depends_on, position, ended, result_as, holds}; `ended` is set for a
# dependency that succeeded and was pruned (counted at once), `result_as` for a job that
# takes results (how this dependency's result reaches it: store/documents.py), `holds`
# for a dependency blocked already.
INSERT_DEPENDENCIES = """
INSERT INTO heartq_job_dependencies (job_id, depends_on, position, ended, result_as, holds)
SELECT json_extract(x.value, '$.job_id'), json_extract(x.value, '$.depends_on'),
       json_extract(x.value, '$.position'), json_extract(x.value, '$.ended'),
       json_extract(x.value, '$.result_as'), json_extract(x.value, '$.holds')
FROM json_each(:edges) AS x
"""

# The waiting (or blocked) dependents of jobs that ended (`ids`), in the ending
# transaction. Each edge not yet counted whose dependency has ended counts once; a job
# whose last dependency ended, none holding it, is queued (run_at: now, or its own later
# eta). A dependency that ended dead blocks a job that blocks on failure
# (`on_dependency_failure` 'block': `holders` + 1, the edge marked `holds` by
# END_DEPENDENCY_EDGES) and cancels one that cancels; a cancelled one cancels both; a job
# that runs anyway counts either as satisfied. An edge that held the job (its dependency
# was blocked, and is now cancelled) holds it no more (`unheld`). END_DEPENDENCY_EDGES
# then marks the edges counted.
_BLOCKS = "j.on_dependency_failure = 'block'"

_WHY = f"CASE WHEN {_BLOCKS} THEN c.cancelled ELSE c.failed END"

_FAILED = f"{_WHY} IS NOT NULL AND j.on_dependency_failure IS NOT 'run'"

_HOLDERS = f"j.holders - c.unheld + CASE WHEN {_BLOCKS} THEN c.dead ELSE 0 END"

_SATISFIED = f"NOT ({_FAILED}) AND j.waiting_for - c.n <= 0 AND {_HOLDERS} <= 0"

SETTLE_DEPENDENTS = f"""
UPDATE heartq_jobs AS j
SET waiting_for = max(j.waiting_for - c.n, 0),
    holders = {_HOLDERS},
    status = CASE WHEN {_FAILED} THEN 'cancelled'
                  WHEN {_SATISFIED} THEN 'queued'
                  WHEN {_HOLDERS} > 0 THEN 'blocked' ELSE 'waiting' END,
    run_at = CASE WHEN {_SATISFIED} THEN max(j.run_at, :now) ELSE j.run_at END,
    finished_at = CASE WHEN {_FAILED} THEN :now END,
    error = CASE WHEN {_FAILED} THEN 'dependency_failed: job ' || {_WHY} ELSE j.error END,
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
"""

# An edge counted holds its job when its dependency ended dead and the job, blocking on
# failure, is blocked by it (SETTLE_DEPENDENTS counted it in `holders`).
END_DEPENDENCY_EDGES = """
UPDATE heartq_job_dependencies AS d
SET ended = e.status,
    holds = (e.status = 'dead' AND j.status = 'blocked' AND j.on_dependency_failure = 'block')
FROM heartq_jobs AS e, heartq_jobs AS j
WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND d.ended IS NULL
  AND e.id = d.depends_on AND e.status IN ('succeeded', 'dead', 'cancelled')
  AND j.id = d.job_id
"""

# The edges of not-ended dependencies (`ids`, whose status this transaction changed)
# made to say whether each holds its job: it does while the dependency is blocked. Each
# edge that changed, with its new `holds`: its job's `holders` move by one
# (SHIFT_HOLDERS).
SYNC_HOLDS = """
UPDATE heartq_job_dependencies AS d SET holds = (x.status = 'blocked')
FROM heartq_jobs AS x
WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND x.id = d.depends_on
  AND d.ended IS NULL AND d.holds <> (x.status = 'blocked')
RETURNING job_id, holds
"""

# Waiting and blocked jobs whose `holders` (and `waiting_for`) move: {id, holders,
# waiting}, each a difference. Blocked while any dependency holds it, else waiting.
SHIFT_HOLDERS = """
UPDATE heartq_jobs AS j
SET holders = j.holders + s.holders, waiting_for = j.waiting_for + s.waiting,
    status = CASE WHEN j.holders + s.holders > 0 THEN 'blocked' ELSE 'waiting' END,
    updated_at = :now
FROM (
    SELECT json_extract(x.value, '$.id') AS id, json_extract(x.value, '$.holders') AS holders,
           json_extract(x.value, '$.waiting') AS waiting
    FROM json_each(:shifts) AS x
) AS s
WHERE j.id = s.id AND j.status IN ('waiting', 'blocked')
RETURNING id, queue, status, awaited, has_dependents
"""

# A dead dependency replayed (`ids`, queued again): the edges by which it held its
# blocked dependents are not counted any more (it will end again); each such job waits
# for it once more (`waiting_for` + 1, `holders` - 1: SHIFT_HOLDERS).
REOPEN_HELD_EDGES = """
UPDATE heartq_job_dependencies AS d SET ended = NULL, holds = 0
FROM heartq_jobs AS j
WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND d.ended = 'dead' AND d.holds
  AND j.id = d.job_id AND j.status = 'blocked'
RETURNING job_id
"""

# The blocked jobs that dead jobs (`ids`: purged, or dead past the blocked retention) hold
# by their own edge, cancelled: they could only be unblocked by a replay that will not
# come. Their dependents are settled from them as from any cancel.
CANCEL_HELD = """
UPDATE heartq_jobs AS j
SET status = 'cancelled', finished_at = :now, updated_at = :now,
    error = 'dependency_failed: job ' || h.holder || ' ended dead and ' || :why
FROM (
    SELECT d.job_id, min(d.depends_on) AS holder FROM heartq_job_dependencies AS d
    WHERE d.depends_on IN (SELECT value FROM json_each(:ids)) AND d.ended = 'dead' AND d.holds
    GROUP BY d.job_id
) AS h
WHERE j.id = h.job_id AND j.status = 'blocked'
RETURNING id, status, awaited, has_dependents
"""

# The dead jobs that hold blocked jobs and died before the blocked retention.
EXPIRED_HOLDERS = """
SELECT id FROM heartq_jobs
WHERE status = 'dead' AND finished_at < :now - :retention AND has_dependents
  AND EXISTS (SELECT 1 FROM heartq_job_dependencies AS d WHERE d.depends_on = heartq_jobs.id
              AND d.ended = 'dead' AND d.holds)
LIMIT :limit
"""

# The dead job at the root of what blocks a job (`:job_id`, when it is blocked): up its
# edges that hold, to a dead job (the least id, when several hold it).
HOLDER = """
WITH RECURSIVE up(id) AS (
    SELECT id FROM heartq_jobs WHERE id = :job_id AND status = 'blocked'
    UNION
    SELECT d.depends_on FROM up JOIN heartq_job_dependencies AS d ON d.job_id = up.id
    WHERE d.holds
)
SELECT e.id, e.task, e.error, e.dead_reason
FROM up JOIN heartq_jobs AS e ON e.id = up.id
WHERE e.status = 'dead'
ORDER BY e.id
LIMIT 1
"""

# What a job with `dependency_results` receives: the dependencies whose results it takes
# (not those it only waits for, `result_as` 'none'; an edge written before v21 has none
# said: an item), in order, each one's result, whether it is passed as it is (`value`),
# whether it is still to come (completed in its task's transaction, saved after: as
# JOB_END says) or lost (`lost`: why; a job gone, pruned, whose edge `ended` a success
# lost it too: `records.dependency_end`).
DEPENDENCY_RESULTS = """
SELECT d.depends_on AS id, e.status, e.result,
       coalesce(e.result_pending, 0) AS pending, d.result_as IS 'value' AS as_value,
       e.result_lost AS lost, d.ended
FROM heartq_job_dependencies AS d LEFT JOIN heartq_jobs AS e ON e.id = d.depends_on
WHERE d.job_id = :job_id AND d.result_as IS NOT 'none'
ORDER BY d.position
"""

# A job's dependencies (in order) and its dependents, for `get_job`.
GET_DEPENDENCIES = """
SELECT d.depends_on AS id, e.task, e.status, d.ended, d.holds
FROM heartq_job_dependencies AS d LEFT JOIN heartq_jobs AS e ON e.id = d.depends_on
WHERE d.job_id = :job_id
ORDER BY d.position
"""

GET_DEPENDENTS = """
SELECT d.job_id AS id, e.task, e.status, d.ended, d.holds
FROM heartq_job_dependencies AS d LEFT JOIN heartq_jobs AS e ON e.id = d.job_id
WHERE d.depends_on = :job_id
ORDER BY d.job_id
LIMIT :limit
"""
