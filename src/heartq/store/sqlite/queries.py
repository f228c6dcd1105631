"""Every SQL statement of the SQLite backend, by name: the same names, in the same order,
as the PostgreSQL backend's `queries.py`, so the two dialects can be diffed. Parameters
are always bound. A tuple is several statements run in order in one transaction, the
last one's rows being the answer (`store/sql/`): SQLite has no data-modifying CTE, so
where PostgreSQL ends a job and writes its execution in one statement, SQLite takes two.

Batches travel as one JSON parameter read with `json_each`, so a statement's text (and its
prepared form in the statement cache) is the same whatever the batch size. Statements that
update jobs from a batch name the primary-key index (`INDEXED BY
sqlite_autoindex_heartq_jobs_1`, the index SQLite makes for `id TEXT PRIMARY KEY`): left
to itself the planner walks every running job and re-reads the whole batch for each,
which costs running jobs x batch size instead of one key lookup per batch element.
"""

from __future__ import annotations

NOW = "SELECT (julianday('now') - 2440587.5) * 86400.0"

# One job, bound by value (the store uses it for a batch of one).
INSERT_JOB = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         concurrency_key, concurrency_limit, rate_key, rate_limit,
                         rate_period, meta)
VALUES (:id, :task, :queue, :args, :priority, 'queued', :now + :delay, :max_retries,
        :retry_backoff, :retry_backoff_max, :chosen, :now, :now, :concurrency_key,
        :concurrency_limit, :rate_key, :rate_limit, :rate_period, :meta)
"""

# Each job: {id, task, queue, args, priority, delay, max_retries, retry_backoff,
# retry_backoff_max, chosen, concurrency_key, concurrency_limit, rate_key, rate_limit,
# rate_period, meta} (store/documents.py)
INSERT_JOBS = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         concurrency_key, concurrency_limit, rate_key, rate_limit,
                         rate_period, meta)
SELECT json_extract(x.value, '$.id'), json_extract(x.value, '$.task'),
       json_extract(x.value, '$.queue'), json_extract(x.value, '$.args'),
       json_extract(x.value, '$.priority'), 'queued', :now + json_extract(x.value, '$.delay'),
       json_extract(x.value, '$.max_retries'), json_extract(x.value, '$.retry_backoff'),
       json_extract(x.value, '$.retry_backoff_max'), json_extract(x.value, '$.chosen'),
       :now, :now, json_extract(x.value, '$.concurrency_key'),
       json_extract(x.value, '$.concurrency_limit'), json_extract(x.value, '$.rate_key'),
       json_extract(x.value, '$.rate_limit'), json_extract(x.value, '$.rate_period'),
       json_extract(x.value, '$.meta')
FROM json_each(:jobs) AS x
"""

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

# Each edge: {job_id, depends_on, position}.
INSERT_DEPENDENCIES = """
INSERT INTO heartq_job_dependencies (job_id, depends_on, position)
SELECT json_extract(x.value, '$.job_id'), json_extract(x.value, '$.depends_on'),
       json_extract(x.value, '$.position')
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

# What a callback receives (a job with `dependency_results`): its dependencies in order,
# each one's result, and whether that result is still to come (completed in its task's
# transaction, saved after: as JOB_END says).
DEPENDENCY_RESULTS = """
SELECT d.depends_on AS id, e.status, e.result,
       coalesce(e.result_pending, 0) AS pending
FROM heartq_job_dependencies AS d LEFT JOIN heartq_jobs AS e ON e.id = d.depends_on
WHERE d.job_id = :job_id
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

# A job with a unique key (store/sql/ `enqueue`), bound by value. SQLite has one writer
# at a time, so nothing can come between the look (a job holding the key: queued or
# running, or finished within `unique_for`) and the insert. The partial unique index is
# the backstop (a replayed dead job): a live duplicate is dropped. The last statement
# answers the job that holds the key: this one, or the one found.
INSERT_UNIQUE_JOB = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         unique_key, schedule, concurrency_key, concurrency_limit,
                         rate_key, rate_limit, rate_period, meta)
SELECT :id, :task, :queue, :args, :priority, 'queued', :now + :delay, :max_retries,
       :retry_backoff, :retry_backoff_max, :chosen, :now, :now, :unique_key, :schedule,
       :concurrency_key, :concurrency_limit, :rate_key, :rate_limit, :rate_period, :meta
WHERE NOT EXISTS (
    SELECT 1 FROM heartq_jobs
    WHERE unique_key = :unique_key
      AND (status IN ('queued', 'running') OR finished_at >= :now - :unique_for))
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
DO NOTHING
"""

UNIQUE_HOLDER = """
SELECT id, id = :id AS inserted FROM heartq_jobs
WHERE unique_key = :unique_key
  AND (id = :id OR status IN ('queued', 'running') OR finished_at >= :now - :unique_for)
ORDER BY id = :id DESC, status IN ('queued', 'running') DESC, created_at DESC
LIMIT 1
"""

ENQUEUE_UNIQUE = (INSERT_UNIQUE_JOB, UNIQUE_HOLDER)

# Periodic schedules (store/sql/ `tick_schedule`): the row is made if missing; the
# transaction holds SQLite's write lock, so the workers that find a tick due enqueue it one
# after the other, and the later ones find the last tick already moved on.
ENSURE_SCHEDULE = """
INSERT INTO heartq_schedules (name, task, spec, updated_at) VALUES (:name, :task, :spec, :now)
ON CONFLICT (name) DO NOTHING
"""

LOCK_SCHEDULE = "SELECT spec, last_tick FROM heartq_schedules WHERE name = :name"

UPDATE_SCHEDULE = """
UPDATE heartq_schedules
SET task = :task, spec = :spec, last_tick = :last_tick, next_tick = :next_tick,
    last_job_id = coalesce(:last_job_id, last_job_id), updated_at = :now, updated_by = :by
WHERE name = :name
"""

LIST_SCHEDULES = """
SELECT s.name, s.task, s.spec, s.last_tick, s.next_tick, s.last_job_id,
       j.status AS last_job_status, s.updated_at, s.updated_by
FROM heartq_schedules AS s LEFT JOIN heartq_jobs AS j ON j.id = s.last_job_id
ORDER BY s.name
"""

_CLAIM_SET = """
UPDATE heartq_jobs
SET status = 'running',
    worker_id = :worker_id,
    execution_id = execution_id + 1,
    attempts = attempts + 1,
    lease_expires_at = :now + :lease,
    heartbeat_at = :now,
    started_at = :now,
    updated_at = :now,
    claimed_ahead = :ahead,
    progress_value = NULL, progress_stage = NULL, progress_message = NULL
"""
_CLAIM_RETURNING = """
RETURNING id, task, queue, args, attempts, execution_id, max_retries, retry_backoff,
          retry_backoff_max, checkpoint, lease_expires_at, run_at, priority, chosen, meta,
          dependency_results
"""

# Jobs without a concurrency key or a rate key only: the claim index holds nothing else.
CLAIM = f"""{_CLAIM_SET}WHERE id IN (
    SELECT id FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND queue IN (SELECT value FROM json_each(:queues))
      AND run_at <= :now
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
){_CLAIM_RETURNING}"""

# CLAIM for a worker of one queue (the usual case): `queue = :queue` lets the claim index's
# order serve the ORDER BY, so the claim reads `limit` entries whatever the backlog. With
# the queues from `json_each`, SQLite reads and sorts every queued job of the queue (3 ms
# with 100,000 queued), and once ANALYZE has written statistics it skip-scans the index
# instead (59 ms): a claim whose cost grew with the backlog.
CLAIM_ONE_QUEUE = f"""{_CLAIM_SET}WHERE id IN (
    SELECT id FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND queue = :queue AND run_at <= :now
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
){_CLAIM_RETURNING}"""

# The jobs a transport's messages name (store/sql/ `claim_ids`): only those still queued,
# runnable and without a concurrency or a rate key (a keyed job is left to CLAIM_KEYED or
# CLAIM_RATED, which count its keys); a job running elsewhere, finished or unknown
# matches nothing.
CLAIM_IDS = f"""{_CLAIM_SET}WHERE id IN (SELECT value FROM json_each(:ids))
  AND status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL AND run_at <= :now
{_CLAIM_RETURNING}"""

# What a transport's sweeper (re)publishes (store/sql/ `due_for_publish`): queued,
# runnable, unkeyed jobs of its queues that fell due since its last pass (delayed and
# retried: `run_at` after `created_at`), were requeued since (reaped, released,
# replayed: `updated_at` after `created_at`), or have waited since `stale_before`.
DUE_FOR_PUBLISH = """
SELECT id, queue FROM heartq_jobs
WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
  AND queue IN (SELECT value FROM json_each(:queues))
  AND run_at <= :now
  AND ((run_at > :since AND run_at > created_at)
       OR (updated_at > :since AND updated_at > created_at)
       OR run_at <= :stale_before)
ORDER BY run_at, id
LIMIT :limit
"""

# Jobs with a concurrency key and no rate key (store/sql/ `claim`, only when CLAIM filled
# fewer than `limit`): each key's runnable jobs in claim order, the first
# `concurrency_limit - running` of them (each job's own limit; `running`: that key's
# running jobs, counted by the key's index); the best `limit` of those. SQLite has one
# writer: nothing is claimed or finished between the count and the update.
CLAIM_KEYED = f"""{_CLAIM_SET}WHERE id IN (
    SELECT id FROM (
        SELECT c.id, c.priority, c.run_at, c.concurrency_limit,
               row_number() OVER (PARTITION BY c.concurrency_key
                                  ORDER BY c.priority DESC, c.run_at, c.id) AS rank,
               (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_key_running_idx
                WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                  AND r.concurrency_key = c.concurrency_key) AS running
        FROM heartq_jobs AS c INDEXED BY heartq_jobs_keyed_claim_idx
        WHERE c.status = 'queued' AND c.concurrency_key IS NOT NULL AND c.rate_key IS NULL
          AND c.queue IN (SELECT value FROM json_each(:queues))
          AND c.run_at <= :now
    )
    WHERE rank <= concurrency_limit - running
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
){_CLAIM_RETURNING}"""

def _starts(source: str, key: str, since: str, columns: str) -> str:
    """The starts of rate-limited attempts after `since`, per row of `source` whose rate
    key is `key`, each carrying `columns` and `started_at`: the one place that reads
    them. An ended attempt's start is in its execution row (heartq_executions_rate_idx),
    a running one's in its job row (heartq_jobs_running_rate_idx): the claim writes no
    execution row (migration 0017), so both count, each through its own index."""
    return f"""SELECT {columns}, e.started_at FROM {source}
        JOIN heartq_ended_executions AS e INDEXED BY heartq_executions_rate_idx
          ON e.rate_key = {key} AND e.started_at > {since}
        UNION ALL
        SELECT {columns}, r.started_at FROM {source}
        JOIN heartq_jobs AS r INDEXED BY heartq_jobs_running_rate_idx
          ON r.status = 'running' AND r.rate_key IS NOT NULL AND r.rate_key = {key}
         AND r.started_at > {since}"""


def _starts_count(key: str, since: str) -> str:
    """How many attempts of rate key `key` started after `since` (as `_starts`)."""
    return f"""((SELECT count(*) FROM heartq_ended_executions AS e
                 INDEXED BY heartq_executions_rate_idx
                 WHERE e.rate_key = {key} AND e.started_at > {since})
              + (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_running_rate_idx
                 WHERE r.status = 'running' AND r.rate_key IS NOT NULL AND r.rate_key = {key}
                   AND r.started_at > {since}))"""


# The rate-limited jobs a claim looks at, as CTEs: `keys`, every rate key of a queued job,
# one probe each of heartq_jobs_rated_claim_idx (a skip scan: the index is ordered by key);
# `best`, each key's best runnable job of these queues (its limit is the key's, for the
# look), the key's walk stopping at the first; `open`, the best `limit` of the keys whose
# starts within the period (`used`: `_starts_count`, ended and running attempts) are
# below their limit. A claim's cost follows the number of keys, not their backlogs.
_RATE_KEYS = """keys(key) AS (
    SELECT (SELECT rate_key FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
            WHERE status = 'queued' AND rate_key IS NOT NULL ORDER BY rate_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.rate_key FROM heartq_jobs AS j INDEXED BY heartq_jobs_rated_claim_idx
            WHERE j.status = 'queued' AND j.rate_key IS NOT NULL AND j.rate_key > keys.key
            ORDER BY j.rate_key LIMIT 1)
    FROM keys WHERE keys.key IS NOT NULL
), best AS MATERIALIZED (
    SELECT keys.key, b.priority, b.run_at, b.rate_limit AS n, b.rate_period AS period
    FROM keys JOIN heartq_jobs AS b ON b.id = (
        SELECT j.id FROM heartq_jobs AS j INDEXED BY heartq_jobs_rated_claim_idx
        WHERE j.status = 'queued' AND j.rate_key IS NOT NULL AND j.rate_key = keys.key
          AND j.queue IN (SELECT value FROM json_each(:queues)) AND j.run_at <= :now
        ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1)
    WHERE keys.key IS NOT NULL
)"""
_OPEN_KEYS = f"""open AS MATERIALIZED (
    SELECT key FROM best
    WHERE n > {_starts_count("best.key", ":now - best.period")}
    ORDER BY priority DESC, run_at, key
    LIMIT :limit
)"""

# Jobs with a rate key (store/sql/ `claim`, only when the claims before filled fewer than
# `limit`): at most `rate_limit` of a key's attempts start in any `rate_period` seconds.
# The candidates: the first `limit` runnable jobs of each open key (its walk of the
# index). `used` per key and period, then: a job that also has a concurrency key takes a
# place among that key's free slots (`free`: its limit less the key's running jobs),
# among the candidates whose rate key has room, so a job waiting for its rate key's next
# start does not hold a concurrency slot another rate key could use. Then each rate key's
# jobs in claim order, the first `rate_limit - used` of them (each job's own limit); the
# best `limit` of those. SQLite has one writer: nothing starts between the count and the
# update.
CLAIM_RATED = f"""{_CLAIM_SET}WHERE id IN (
    WITH RECURSIVE {_RATE_KEYS}, {_OPEN_KEYS}, candidates AS MATERIALIZED (
        SELECT c.id, c.priority, c.run_at, c.rate_key, c.rate_limit, c.rate_period,
               c.concurrency_key, c.concurrency_limit
        FROM open JOIN heartq_jobs AS c ON c.id IN (
            SELECT j.id FROM heartq_jobs AS j INDEXED BY heartq_jobs_rated_claim_idx
            WHERE j.status = 'queued' AND j.rate_key IS NOT NULL AND j.rate_key = open.key
              AND j.queue IN (SELECT value FROM json_each(:queues)) AND j.run_at <= :now
            ORDER BY j.priority DESC, j.run_at, j.id LIMIT :limit)
    ), windows AS MATERIALIZED (
        SELECT g.rate_key AS key, g.rate_period AS period,
               {_starts_count("g.rate_key", ":now - g.rate_period")} AS used
        FROM (SELECT DISTINCT rate_key, rate_period FROM candidates) AS g
    ), slots AS MATERIALIZED (
        SELECT k.key, (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_key_running_idx
                       WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                         AND r.concurrency_key = k.key) AS running
        FROM (SELECT DISTINCT concurrency_key AS key FROM candidates
              WHERE concurrency_key IS NOT NULL) AS k
    ), fit AS (
        SELECT c.id, c.priority, c.run_at, c.rate_key, c.concurrency_key,
               c.rate_limit - w.used AS room, c.concurrency_limit - s.running AS free
        FROM candidates AS c
        JOIN windows AS w ON w.key = c.rate_key AND w.period = c.rate_period
        LEFT JOIN slots AS s ON s.key = c.concurrency_key
        WHERE c.rate_limit > w.used
    ), within_slots AS (
        SELECT *, row_number() OVER (PARTITION BY concurrency_key
                                     ORDER BY priority DESC, run_at, id) AS place
        FROM fit
    ), ranked AS (
        SELECT id, priority, run_at, room,
               row_number() OVER (PARTITION BY rate_key ORDER BY priority DESC, run_at, id) AS rank
        FROM within_slots WHERE concurrency_key IS NULL OR place <= free
    )
    SELECT id FROM ranked WHERE rank <= room
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
){_CLAIM_RETURNING}"""

# How long until a runnable rate-limited job of these queues may start, in seconds (None:
# none is held back by its rate key): per key (with its best job's limit), the start that
# leaves the window last among the `rate_limit` latest, plus the period. A key with room
# counts nothing here (what holds its jobs back, if anything, is a concurrency limit).
RATE_WAIT = f"""
WITH RECURSIVE {_RATE_KEYS}
SELECT min(started_at + period - :now) AS wait FROM (
    SELECT started_at, n, period,
           row_number() OVER (PARTITION BY key ORDER BY started_at DESC) AS latest
    FROM ({_starts("best", "best.key", ":now - best.period", "best.key, best.n, best.period")})
)
WHERE latest = n
"""

# The worker part of the fencing key, in every write of a lease holder (see the PostgreSQL
# dialect): only a job that worker claimed; NULL (a reclaimer), the execution alone.
_HELD_BY = "(:worker_id IS NULL OR j.worker_id = :worker_id)"

# A heartbeat that comes over half the worker's staleness threshold after its previous
# one ends a pause in its contact with the database: its unbroken contact starts again.
TOUCH_WORKER = """
UPDATE heartq_workers SET last_heartbeat_at = :now, status = 'active', stopped_at = NULL,
    contact_since = CASE WHEN last_heartbeat_at < :now - stale_after / 2
                         THEN :now ELSE coalesce(contact_since, started_at) END
WHERE id = :worker_id
"""

# `abandoned`: attempts whose end the worker decided while their code still runs (its
# pulse writes the count when it changed).
RECORD_ABANDONED = "UPDATE heartq_workers SET abandoned = :abandoned WHERE id = :worker_id"

# Each renewal: {id, eid, hp (has progress), pv, ps, pm} (store/documents.py)
RENEW = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET lease_expires_at = :now + :lease,
    heartbeat_at = :now,
    updated_at = :now,
    progress_value = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.pv') ELSE j.progress_value END,
    progress_stage = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.ps') ELSE j.progress_stage END,
    progress_message = CASE WHEN json_extract(r.value, '$.hp')
                            THEN json_extract(r.value, '$.pm') ELSE j.progress_message END
FROM json_each(:renewals) AS r
WHERE j.id = json_extract(r.value, '$.id')
  AND j.execution_id = json_extract(r.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
RETURNING id, execution_id, cancel_requested
"""

HEARTBEAT = (TOUCH_WORKER, RENEW)

# The start of jobs a worker claimed ahead, recorded before their code runs (see the
# PostgreSQL statement of the same name). Each lease: {id, eid}.
START_AHEAD = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET claimed_ahead = 0,
    started_at = :now,
    heartbeat_at = :now,
    lease_expires_at = :now + :lease,
    updated_at = :now
FROM json_each(:leases) AS s
WHERE j.id = json_extract(s.value, '$.id')
  AND j.execution_id = json_extract(s.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running' AND j.claimed_ahead AND NOT j.cancel_requested
RETURNING id, execution_id
"""

# The result of a job its task already completed inside `ctx.transaction()`.
SAVE_RESULT = f"""
UPDATE heartq_jobs AS j SET result = :result, result_pending = 0, lease_expires_at = NULL,
                       updated_at = :now
WHERE id = :job_id AND execution_id = :execution_id AND status = 'succeeded'
  AND result_pending AND {_HELD_BY}
RETURNING id, status, awaited
"""

SAVE_CHECKPOINT = f"""
UPDATE heartq_jobs AS j SET checkpoint = :checkpoint, heartbeat_at = :now, updated_at = :now
WHERE id = :job_id AND execution_id = :execution_id AND status = 'running' AND {_HELD_BY}
RETURNING cancel_requested
"""

# The pulse: what running tasks reported (progress, checkpoint) since the last pulse, for
# every attempt of a worker in one statement, fenced like a heartbeat; the lease is not
# renewed (that stays the heartbeat's), but a report is a sign of life: `heartbeat_at`
# moves, so a crash's timing runs to it (heartq/inspect/attempts.py), as does a saved
# checkpoint's. Each report: {id, eid, hp, pv, ps, pm, hc, cp}.
PULSE = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET progress_value = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.pv') ELSE j.progress_value END,
    progress_stage = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.ps') ELSE j.progress_stage END,
    progress_message = CASE WHEN json_extract(r.value, '$.hp')
                            THEN json_extract(r.value, '$.pm') ELSE j.progress_message END,
    checkpoint = CASE WHEN json_extract(r.value, '$.hc')
                      THEN json_extract(r.value, '$.cp') ELSE j.checkpoint END,
    heartbeat_at = :now,
    updated_at = :now
FROM json_each(:reports) AS r
WHERE j.id = json_extract(r.value, '$.id')
  AND j.execution_id = json_extract(r.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
RETURNING id, execution_id, cancel_requested
"""

# The running attempts of one worker whose cancel was requested (the partial index of
# running jobs by worker): what a pulse reads every tick, SQLite having no notifications.
RUNNING_CANCELS = """
SELECT id, execution_id FROM heartq_jobs
WHERE worker_id = :worker_id AND status = 'running' AND cancel_requested
"""

# The ended attempts' execution rows first, written once and complete from the job rows
# as they stand (the running attempt lives on its job's row: worker_id, started_at,
# rate_key; migration 0017), fenced like the jobs they belong to (only those still
# running under that execution): the jobs' statement then changes the same set, inside
# the same write transaction, and answers which leases landed.
CLOSE_EXECUTIONS = f"""
INSERT INTO heartq_ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                     outcome, error, crash, rate_key)
SELECT j.id, j.execution_id, j.worker_id, j.started_at, :now,
       json_extract(f.value, '$.outcome'), json_extract(f.value, '$.error'),
       json_extract(f.value, '$.crash'), j.rate_key
FROM json_each(:finishes) AS f
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(f.value, '$.id')
 AND j.execution_id = json_extract(f.value, '$.eid') AND {_HELD_BY}
 AND j.status = 'running'
"""

# Each finish: {id, eid, status, outcome, result, error, delay, keep, dead_reason, crash,
# pending}; what the task last reported goes by PULSE, just before, on the same connection;
# `keep`: a requeued job keeps its run_at, its place in line (a first crash).
# An attempt that would be retried (status 'queued') while a cancel was requested ends the
# job as 'cancelled' instead: the request is honoured, never lost to a retry. The
# execution keeps its own outcome (failed, timed_out, ...).
# An attempt ended `interrupted` (its worker lost the database) or `released` (its worker
# does not know its task: heartq.lifecycle.fate) is not counted as an attempt.
_REQUEUE = "(json_extract(f.value, '$.status') = 'queued' AND NOT j.cancel_requested)"

FINISH_JOBS = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET status = CASE WHEN json_extract(f.value, '$.status') = 'queued' AND j.cancel_requested
                  THEN 'cancelled' ELSE json_extract(f.value, '$.status') END,
    run_at = CASE WHEN {_REQUEUE} AND NOT json_extract(f.value, '$.keep')
                  THEN :now + json_extract(f.value, '$.delay') ELSE j.run_at END,
    attempts = CASE WHEN json_extract(f.value, '$.outcome') IN ('interrupted', 'released')
                    THEN max(j.attempts - 1, 0) ELSE j.attempts END,
    result = json_extract(f.value, '$.result'),
    error = coalesce(json_extract(f.value, '$.error'), j.error),
    dead_reason = json_extract(f.value, '$.dead_reason'),
    progress_value = CASE WHEN json_extract(f.value, '$.status') = 'succeeded'
                               AND j.progress_value IS NOT NULL
                          THEN 1.0 ELSE j.progress_value END,
    finished_at = CASE WHEN {_REQUEUE} THEN NULL ELSE :now END,
    worker_id = CASE WHEN {_REQUEUE} THEN NULL ELSE j.worker_id END,
    lease_expires_at = CASE WHEN json_extract(f.value, '$.pending') THEN j.lease_expires_at END,
    result_pending = coalesce(json_extract(f.value, '$.pending'), 0),
    cancel_requested = 0,
    updated_at = :now
FROM json_each(:finishes) AS f
WHERE j.id = json_extract(f.value, '$.id')
  AND j.execution_id = json_extract(f.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
RETURNING id, execution_id, status, awaited, has_dependents, 0 AS deferred
"""

FINISH = (CLOSE_EXECUTIONS, FINISH_JOBS)

# Released jobs go back to the queue, no attempt counted; one whose cancel was requested
# ends 'cancelled' instead (run_at and worker_id kept), so it never runs again. Each
# lease: {id, eid}. Executions first, written and fenced as in FINISH (a lease named
# twice writes one row).
CLOSE_RELEASED = f"""
INSERT INTO heartq_ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                     outcome, rate_key)
SELECT DISTINCT j.id, j.execution_id, j.worker_id, j.started_at, :now, 'released', j.rate_key
FROM json_each(:leases) AS l
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(l.value, '$.id')
 AND j.execution_id = json_extract(l.value, '$.eid') AND {_HELD_BY}
 AND j.status = 'running'
"""

RELEASE_JOBS = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
    attempts = max(j.attempts - 1, 0),
    worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
    lease_expires_at = NULL,
    run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE :now END,
    finished_at = CASE WHEN j.cancel_requested THEN :now END,
    cancel_requested = 0,
    updated_at = :now
FROM json_each(:leases) AS l
WHERE j.id = json_extract(l.value, '$.id')
  AND j.execution_id = json_extract(l.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
RETURNING id, execution_id, status, awaited, has_dependents
"""

RELEASE = (CLOSE_RELEASED, RELEASE_JOBS)

_RECLAIM_COLUMNS = """
SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, j.lease_expires_at, j.heartbeat_at,
       j.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, j.args, j.meta,
       (SELECT count(*) FROM heartq_ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed') AS crashes,
       (SELECT count(*) FROM heartq_ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'interrupted') AS interruptions,
       (SELECT t.retry_rules FROM heartq_tasks AS t WHERE t.name = j.task) AS retry_rules
"""
_RECLAIM_FROM = "FROM heartq_jobs AS j LEFT JOIN heartq_workers AS w ON w.id = j.worker_id"

# Results still to come whose committing attempt's lease ran out: given up (see the
# PostgreSQL dialect).
GIVE_UP_RESULTS = """
UPDATE heartq_jobs SET result_pending = 0, lease_expires_at = NULL, updated_at = :now
WHERE id IN (SELECT id FROM heartq_jobs INDEXED BY heartq_jobs_pending_result_idx
             WHERE result_pending AND lease_expires_at < :now
             ORDER BY lease_expires_at LIMIT :limit)
RETURNING id, status, awaited
"""

SELECT_EXPIRED = f"""{_RECLAIM_COLUMNS}
FROM heartq_jobs AS j INDEXED BY heartq_jobs_lease_idx
LEFT JOIN heartq_workers AS w ON w.id = j.worker_id
WHERE j.status = 'running' AND j.lease_expires_at < :now
ORDER BY j.lease_expires_at
LIMIT :limit
"""

SELECT_WORKER_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id = :worker_id
"""

# Startup reconciliation: the other workers of a name that may still matter (active, or
# holding running jobs), with whether each is silent past its own threshold. The store
# then tries each one's liveness lock and reclaims only those that are gone.
# `silent` as the monitor judges it: only by an observer (the starting worker) in unbroken
# contact with the database for the namesake's threshold, so an outage that silenced
# every worker, the new one included, is not taken for a death.
NAMESAKES = """
SELECT w.id, w.name, :now - w.last_heartbeat_at AS heartbeat_age,
       coalesce(w.last_heartbeat_at < :now - coalesce(w.stale_after, :stale_after)
                AND coalesce(w.stale_after, :stale_after) <= :contact, 0) AS silent
FROM heartq_workers AS w
WHERE w.name = :name AND w.id != :except_id
  AND (w.status = 'active'
       OR EXISTS (SELECT 1 FROM heartq_jobs AS j
                  WHERE j.worker_id = w.id AND j.status = 'running'))
ORDER BY w.id
"""

SELECT_NAME_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id IN (SELECT value FROM json_each(:ids))
"""

SELECT_ONE_RUNNING = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.id = :job_id AND j.execution_id = :execution_id
  AND {_HELD_BY}
"""

REGISTER_WORKER = """
INSERT INTO heartq_workers (id, name, hostname, pid, queues, concurrency, status,
                            started_at, last_heartbeat_at, stale_after, contact_since)
VALUES (:id, :name, :hostname, :pid, :queues, :concurrency, 'active', :now, :now, :stale_after,
        :now)
ON CONFLICT (id) DO UPDATE SET status = 'active', last_heartbeat_at = :now, stopped_at = NULL,
                               stale_after = excluded.stale_after, contact_since = :now
"""

STOP_WORKER = """
UPDATE heartq_workers SET status = 'stopped', stopped_at = :now WHERE id = :worker_id
"""

DEACTIVATE_WORKER = """
UPDATE heartq_workers SET status = 'inactive', stopped_at = :now
WHERE id = :worker_id AND status = 'active'
RETURNING id, name, :now - last_heartbeat_at AS heartbeat_age
"""

DEACTIVATE_NAMED = """
UPDATE heartq_workers SET status = 'inactive', stopped_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'active'
"""

# Each worker is judged by its own threshold; the observer's only for workers that did not
# record one (older versions); and only by an observer in unbroken contact with the
# database for at least that threshold (`contact`, from OBSERVER_CONTACT).
DEACTIVATE_STALE = """
UPDATE heartq_workers SET status = 'inactive', stopped_at = :now
WHERE status = 'active' AND last_heartbeat_at < :now - coalesce(stale_after, :stale_after)
  AND coalesce(stale_after, :stale_after) <= :contact
RETURNING id, name, :now - last_heartbeat_at AS heartbeat_age
"""

# How long the observing worker has been in unbroken contact with the database (0 while
# its own last heartbeat is over half its threshold old: it is cut off right now).
OBSERVER_CONTACT = """
SELECT CASE WHEN last_heartbeat_at < :now - stale_after / 2 THEN 0.0
            ELSE :now - coalesce(contact_since, started_at) END AS contact,
       stale_after
FROM heartq_workers WHERE id = :worker_id
"""

# A worker no longer active runs no code: its last `abandoned` count is not shown.
# `running`: the jobs it started; `claimed_ahead`: those it holds in its buffer (both
# `running` rows of its lease, told apart by the column `claimed_ahead`).
LIST_WORKERS = """
SELECT w.id, w.name, w.hostname, w.pid, w.status, w.queues, w.concurrency,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM heartq_jobs j
        WHERE j.worker_id = w.id AND j.status = 'running' AND NOT j.claimed_ahead) AS running,
       (SELECT count(*) FROM heartq_jobs j
        WHERE j.worker_id = w.id AND j.status = 'running' AND j.claimed_ahead) AS claimed_ahead,
       CASE WHEN w.status = 'active' THEN w.abandoned ELSE 0 END AS abandoned
FROM heartq_workers AS w
WHERE (:include_all OR w.status = 'active')
ORDER BY w.started_at DESC
"""

PRUNE_WORKERS = """
DELETE FROM heartq_workers
WHERE status IN ('inactive', 'stopped')
  AND coalesce(stopped_at, last_heartbeat_at) < :now - :retention
"""

SELECT_PRUNABLE_JOBS = """
SELECT id FROM heartq_jobs
WHERE status IN ('succeeded', 'cancelled') AND finished_at < :now - :retention
LIMIT :limit
"""

SELECT_PURGEABLE_DEAD = """
SELECT id FROM heartq_jobs
WHERE status = 'dead' AND (:older_than IS NULL OR finished_at < :now - :older_than)
"""

DELETE_EXECUTIONS_OF = """
DELETE FROM heartq_ended_executions WHERE job_id IN (SELECT value FROM json_each(:ids))
"""

# A deleted job's own edges (what it waited for); the edges of its dependents stay with
# them, and show the dependency gone.
DELETE_DEPENDENCIES_OF = """
DELETE FROM heartq_job_dependencies WHERE job_id IN (SELECT value FROM json_each(:ids))
"""

DELETE_JOBS = """
DELETE FROM heartq_jobs WHERE id IN (SELECT value FROM json_each(:ids))
"""

GET_JOB = "SELECT * FROM heartq_jobs WHERE id = :job_id"

GET_EXECUTIONS = """
SELECT * FROM heartq_executions WHERE job_id = :job_id ORDER BY execution_id
"""

# `:ahead` (true, false or null: either) tells running jobs claimed ahead from started ones.
LIST_JOBS = """
SELECT * FROM heartq_jobs
WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
  AND (:ahead IS NULL OR claimed_ahead = :ahead)
ORDER BY created_at DESC, id DESC
LIMIT :limit
"""

# The dashboard's job list, a keyset page of the primary key in two steps. The floor:
# the id :scan ids below :before (an index-only walk; none when fewer are left). The
# page: the jobs in [floor, before) that match the filters, newest first, read along
# the index and stopped at :limit, so a page reads at most :scan jobs. Two variants of
# each: the first page has no bound (a planner cannot use an index for
# `:before IS NULL OR id < :before`); no floor is bound as '' (below every id).
_FLOOR = "SELECT id FROM heartq_jobs {where} ORDER BY id DESC LIMIT 1 OFFSET :scan_offset"
_PAGE = """
SELECT * FROM heartq_jobs
WHERE {where} id >= :floor
  AND (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task) AND (:ahead IS NULL OR claimed_ahead = :ahead)
ORDER BY id DESC LIMIT :limit
"""
BROWSE_FLOOR = _FLOOR.format(where="")
BROWSE_FLOOR_BEFORE = _FLOOR.format(where="WHERE id < :before")
BROWSE_JOBS = _PAGE.format(where="")
BROWSE_JOBS_BEFORE = _PAGE.format(where="id < :before AND")

# Jobs that ended, per minute: a range of the finished index (status, finished_at).
FINISHED_PER_MINUTE = """
SELECT CAST(finished_at / 60 AS INTEGER) * 60 AS minute, status, count(*) AS n
FROM heartq_jobs
WHERE status IN ('succeeded', 'dead', 'cancelled') AND finished_at >= :since
GROUP BY minute, status ORDER BY minute, status
"""

# Queued jobs are in one of three indexes: without a concurrency or a rate key, with a
# concurrency key only, with a rate key.
_CLAIM_INDEXES = (
    ("heartq_jobs_claim_idx", "concurrency_key IS NULL AND rate_key IS NULL"),
    ("heartq_jobs_keyed_claim_idx", "concurrency_key IS NOT NULL AND rate_key IS NULL"),
    ("heartq_jobs_rated_claim_idx", "rate_key IS NOT NULL"),
)
_QUEUE_WAIT = """
SELECT queue,
       min(CASE WHEN run_at <= :now THEN run_at END) AS oldest_run_at,
       sum(CASE WHEN run_at > :now THEN 1 ELSE 0 END) AS scheduled
FROM heartq_jobs INDEXED BY {index}
WHERE status = 'queued' AND {test}
GROUP BY queue
"""
# Per concurrency key with live jobs (`heartq stats`): busiest first.
CONCURRENCY_USAGE = """
SELECT concurrency_key AS key,
       sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS running,
       sum(CASE WHEN status = 'queued' THEN 1 ELSE 0 END) AS queued,
       max(concurrency_limit) AS max_limit
FROM heartq_jobs
WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'running')
GROUP BY concurrency_key
ORDER BY running DESC, queued DESC, concurrency_key
LIMIT 1000
"""

# Per rate key and limit with live jobs (`heartq stats`, the dashboard): its jobs running,
# queued, and queued and due (`waiting`: what its limit may be holding back), its starts
# within the period (`started`) and, when that is the limit, when the next one frees up
# (`next_start_in`: the `n`-th latest start leaves the window). The live jobs through the
# rated claim index and the running jobs' index; the starts by `_starts`.
RATE_USAGE = f"""
WITH live AS (
    SELECT rate_key, rate_limit, rate_period, status, run_at
    FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
    WHERE status = 'queued' AND rate_key IS NOT NULL
    UNION ALL
    SELECT rate_key, rate_limit, rate_period, status, run_at
    FROM heartq_jobs INDEXED BY heartq_jobs_lease_idx
    WHERE status = 'running' AND rate_key IS NOT NULL
), groups AS MATERIALIZED (
    SELECT rate_key AS key, rate_limit AS n, rate_period AS period,
           sum(status = 'running') AS running, sum(status = 'queued') AS queued,
           sum(status = 'queued' AND run_at <= :now) AS waiting
    FROM live
    GROUP BY rate_key, rate_limit, rate_period
    ORDER BY waiting DESC, queued DESC, key
    LIMIT 1000
), starts AS (
    SELECT key, started_at,
           row_number() OVER (PARTITION BY key ORDER BY started_at DESC) AS latest
    FROM ({_starts("(SELECT DISTINCT key FROM groups) AS g", "g.key",
                   ":now - (SELECT max(period) FROM groups)", "g.key")})
)
SELECT g.key, g.n, g.period, g.running, g.queued, g.waiting, count(s.started_at) AS started,
       min(CASE WHEN s.latest = g.n THEN s.started_at + g.period - :now END) AS next_start_in
FROM groups AS g
LEFT JOIN starts AS s ON s.key = g.key AND s.started_at > :now - g.period
GROUP BY g.key, g.n, g.period, g.running, g.queued, g.waiting
ORDER BY g.waiting DESC, g.queued DESC, g.key
"""

QUEUE_WAITS = f"""
SELECT queue, min(oldest_run_at) AS oldest_run_at, sum(scheduled) AS scheduled FROM (
{"UNION ALL".join(_QUEUE_WAIT.format(index=i, test=t) for i, t in _CLAIM_INDEXES)}
)
GROUP BY queue
"""

# Running anywhere, runnable, or (with :retries) queued after an attempt: a retry waiting
# out its backoff; or waiting (heartq_jobs_waiting_idx) for a dependency, in any queue,
# that is one of those or waits itself. A waiting job whose dependencies are all in these
# queues adds nothing: its release commits with their ends, so one snapshot sees them
# pending or it queued.
HAS_PENDING = """
SELECT EXISTS (
    SELECT 1 FROM heartq_jobs
    WHERE queue IN (SELECT value FROM json_each(:queues))
      AND (status = 'running'
           OR (status = 'queued' AND (run_at <= :now OR (:retries AND attempts > 0))))
) OR EXISTS (
    SELECT 1 FROM heartq_jobs AS w INDEXED BY heartq_jobs_waiting_idx
    JOIN heartq_job_dependencies AS d ON d.job_id = w.id AND d.ended IS NULL
    JOIN heartq_jobs AS e ON e.id = d.depends_on
    WHERE w.status = 'waiting' AND w.queue IN (SELECT value FROM json_each(:queues))
      AND (e.status IN ('running', 'waiting')
           OR (e.status = 'queued' AND (e.run_at <= :now OR (:retries AND e.attempts > 0))))
) AS pending
"""

_OLDEST = """
SELECT id, run_at FROM heartq_jobs INDEXED BY {index}
WHERE status = 'queued' AND {test} AND queue = :queue AND run_at <= :run_at
"""
OLDEST_RUNNABLE = f"""
SELECT id FROM (
{"UNION ALL".join(_OLDEST.format(index=i, test=t) for i, t in _CLAIM_INDEXES)}
)
ORDER BY run_at, id
LIMIT 1
"""

# Jobs by queue and status, and of the running ones how many are claimed ahead (`ahead`),
# in one statement so the two agree. The count walks the status index; the running jobs
# claimed ahead are read apart (running rows are few), so the column needs no index.
COUNT_JOBS = """
SELECT c.queue, c.status, c.n, coalesce(a.n, 0) AS ahead
FROM (SELECT queue, status, count(*) AS n FROM heartq_jobs GROUP BY queue, status) AS c
LEFT JOIN (SELECT queue, count(*) AS n FROM heartq_jobs
           WHERE status = 'running' AND claimed_ahead GROUP BY queue) AS a
    ON c.status = 'running' AND a.queue = c.queue
ORDER BY c.queue, c.status
"""

CANCEL_QUEUED = """
UPDATE heartq_jobs SET status = 'cancelled', finished_at = :now, updated_at = :now,
                       error = 'cancelled before it ran', cancelled_by = :by
WHERE id = :job_id AND status IN ('queued', 'waiting')
RETURNING id, status, awaited, has_dependents
"""

# Someone waits for this job's end (`App.result`). SQLite announces nothing (waiters
# poll), but the flag says the same in both dialects.
MARK_AWAITED = "UPDATE heartq_jobs SET awaited = 1 WHERE id = :job_id AND NOT awaited"

# A result still to come: saved by the attempt that committed its job, or given up by a
# reaper once that attempt's lease ran out (GIVE_UP_RESULTS): either is final.
JOB_END = """
SELECT status, result, error, dead_reason, result_pending
FROM heartq_jobs WHERE id = :job_id
"""

REQUEST_CANCEL = """
UPDATE heartq_jobs SET cancel_requested = 1, updated_at = :now, cancelled_by = :by
WHERE id = :job_id AND status = 'running'
RETURNING worker_id
"""

JOB_STATUS = "SELECT status FROM heartq_jobs WHERE id = :job_id"

JOB_ID = "SELECT id FROM heartq_jobs WHERE id = :job_id"

# A prefix as a range of the primary key: `low <= id < high` reads only the ids that
# start with the prefix; the `substr` test keeps it exact whatever the collation.
JOBS_BY_PREFIX = """
SELECT id, task, status FROM heartq_jobs
WHERE id >= :low AND id < :high AND substr(id, 1, :n) = :low
ORDER BY id LIMIT :limit
"""

# A tail (ids made together share their start; their last characters are random): no
# index has them, so the inner query reads every id from the primary key's index (its
# covering scan, never the rows: about 0.2 s per million jobs), and only the matches are
# read whole. An index of tails would cost every enqueue a write at a random place:
# docs/DESIGN.md, "Shortened job ids".
JOBS_BY_SUFFIX = """
SELECT id, task, status FROM heartq_jobs
WHERE id IN (SELECT id FROM heartq_jobs WHERE substr(id, -:n) = :suffix LIMIT :limit)
"""

# A dead job whose unique key another live job holds stays dead (the key holds).
REPLAY_DEAD = """
UPDATE heartq_jobs
SET status = 'queued', attempts = 0, run_at = :now, dead_reason = NULL, finished_at = NULL,
    worker_id = NULL, cancel_requested = 0, updated_at = :now
WHERE status = 'dead' AND (:all OR id IN (SELECT value FROM json_each(:ids)))
  AND (unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM heartq_jobs AS live
      WHERE live.unique_key = heartq_jobs.unique_key AND live.status IN ('queued', 'running')))
RETURNING id, queue
"""

# Retries due now (heartq.testing's drain): only run_at moves; attempts, retry count and
# backoff stay. A job waiting out a retry is queued with an attempt counted (as HAS_PENDING).
RETRY_NOW = """
UPDATE heartq_jobs SET run_at = :now, updated_at = :now
WHERE status = 'queued' AND attempts > 0 AND run_at > :now
  AND queue IN (SELECT value FROM json_each(:queues))
RETURNING id, queue
"""

# Task declarations (heartq.policy). `tasks` is a JSON array of TaskPolicy fields.
TASK_POLICIES = """
SELECT name, queue, priority, max_retries, retry_backoff, retry_backoff_max, timeout,
       heartbeat_timeout, declared_at, declared_by, parameters, rate_limit, rate_key,
       retry_rules
FROM heartq_tasks WHERE :all OR name IN (SELECT value FROM json_each(:names))
ORDER BY name
"""

DECLARE_TASKS = """
INSERT INTO heartq_tasks (name, queue, priority, max_retries, retry_backoff,
                          retry_backoff_max, timeout, heartbeat_timeout, declared_at,
                          declared_by, parameters, rate_limit, rate_key, retry_rules)
SELECT json_extract(x.value, '$.name'), json_extract(x.value, '$.queue'),
       json_extract(x.value, '$.priority'), json_extract(x.value, '$.max_retries'),
       json_extract(x.value, '$.retry_backoff'), json_extract(x.value, '$.retry_backoff_max'),
       json_extract(x.value, '$.timeout'), json_extract(x.value, '$.heartbeat_timeout'),
       :now, :worker_id, json_extract(x.value, '$.parameters'),
       json_extract(x.value, '$.rate_limit'), json_extract(x.value, '$.rate_key'),
       json_extract(x.value, '$.retry_rules')
FROM json_each(:tasks) AS x WHERE true
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, max_retries = excluded.max_retries,
    retry_backoff = excluded.retry_backoff, retry_backoff_max = excluded.retry_backoff_max,
    timeout = excluded.timeout, heartbeat_timeout = excluded.heartbeat_timeout,
    declared_at = excluded.declared_at, declared_by = excluded.declared_by,
    parameters = excluded.parameters, rate_limit = excluded.rate_limit,
    rate_key = excluded.rate_key, retry_rules = excluded.retry_rules
"""

# Queued and waiting jobs of these tasks take the declaration for every option their caller
# did not choose (`chosen` bits, heartq.policy); rows already in line with it are left alone.
_DECLARED_QUEUE = "CASE WHEN j.chosen & :queue_bit = 0 THEN t.queue ELSE j.queue END"
_DECLARED_PRIORITY = "CASE WHEN j.chosen & :priority_bit = 0 THEN t.priority ELSE j.priority END"
_DECLARED_RETRIES = (
    "CASE WHEN j.chosen & :retries_bit = 0 THEN t.max_retries ELSE j.max_retries END"
)
_DECLARED_BACKOFF = (
    "CASE WHEN j.chosen & :backoff_bit = 0 THEN t.retry_backoff ELSE j.retry_backoff END"
)
_DECLARED_BACKOFF_MAX = (
    "CASE WHEN j.chosen & :backoff_bit = 0 THEN t.retry_backoff_max ELSE j.retry_backoff_max END"
)
REROUTE_JOBS = f"""
UPDATE heartq_jobs AS j
SET queue = {_DECLARED_QUEUE}, priority = {_DECLARED_PRIORITY},
    max_retries = {_DECLARED_RETRIES}, retry_backoff = {_DECLARED_BACKOFF},
    retry_backoff_max = {_DECLARED_BACKOFF_MAX}, updated_at = :now
FROM heartq_tasks AS t
WHERE t.name IN (SELECT value FROM json_each(:names)) AND j.task = t.name
  AND j.status IN ('queued', 'waiting') AND (:all OR j.id IN (SELECT value FROM json_each(:ids)))
  AND (j.queue, j.priority, j.max_retries, j.retry_backoff, j.retry_backoff_max)
      IS NOT ({_DECLARED_QUEUE}, {_DECLARED_PRIORITY}, {_DECLARED_RETRIES},
              {_DECLARED_BACKOFF}, {_DECLARED_BACKOFF_MAX})
RETURNING id, queue
"""

# The id migration 0009 made for this database (the NATS transport's names).
DEPLOYMENT_ID = "SELECT id FROM heartq_deployment"

# -- only SQLite ---------------------------------------------------------------------

ACTIVE_WORKERS_ON_HOST = """
SELECT id FROM heartq_workers WHERE status = 'active' AND hostname = :hostname
"""

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS heartq_schema_migrations
(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)
"""

APPLIED_VERSIONS = "SELECT version FROM heartq_schema_migrations"

MIGRATIONS_PRESENT = """
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'heartq_schema_migrations'
"""

RECORD_MIGRATION = "INSERT INTO heartq_schema_migrations VALUES (:version, :now)"
