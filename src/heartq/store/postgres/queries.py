"""Every SQL statement of the PostgreSQL backend, by name: the same names, in the same
order, as the SQLite backend's `queries.py`, so the two dialects can be diffed; the
statements only PostgreSQL has (wake-ups, liveness locks, migrations) come last.
Parameters are always bound; the only values written into the text are the constants of
heartq's advisory lock keys below. A tuple is several statements run in order in one
transaction, the last one's rows being the answer (`store/sql/`).

Time: `T` is the database clock (`now()`, stable within a transaction) unless the caller
passes `now` (seconds since the epoch), which tests use to drive the protocol.
Batches travel as one JSON parameter read with `json_to_recordset`, so claim, heartbeat
and finish are each ONE statement whatever the batch size.
"""

from __future__ import annotations

LOCK_NAMESPACE = 0x4851
"""First key of heartq's advisory locks (the second is a hash of the worker id, or one of
the keys below)."""
MIGRATION_LOCK = 0
"""Second key of the lock a migration holds for its transaction: one at a time."""
PROBE_NAMESPACE = 0x4850
"""First key of the lock a liveness probe holds for its transaction; the second is a hash
of the queue's schema (`PROBE_KEY`). One probe at a time per queue, so two probers never
take each other's try-locks for a worker's own; the queues of other schemas of the same
database have other workers, and probe on their own."""
PROBE_KEY = f"{PROBE_NAMESPACE}, hashtext(current_schema())"
UNIQUE_NAMESPACE = 0x4855
"""First key of the transaction locks an enqueue with a unique key takes (the second is
a hash of the key): a namespace of its own, so a key's hash can never wait on a worker's
liveness lock."""
CONCURRENCY_NAMESPACE = 0x484B
"""First key of the transaction locks a claim of jobs with a concurrency key takes (the
second is a hash of the key): its own namespace, apart from liveness and unique keys."""
RATE_NAMESPACE = 0x4852
"""First key of the transaction locks a claim of jobs with a rate key takes (the second
is a hash of the key): its own namespace, so a rate key never meets a concurrency key."""

T = "coalesce(to_timestamp(%(now)s::float8), now())"
T_STATEMENT = "coalesce(to_timestamp(%(now)s::float8), statement_timestamp())"
"""The claim's time: its own statement's, not its transaction's. psycopg sends BEGIN as a
round trip of its own, so a worker frozen between BEGIN and its claim (a SIGSTOP, a VM
pause) would otherwise date the new execution's start, and its lease, from before the
freeze: before the previous execution of the job had even ended (I2)."""


def _secs(name: str) -> str:
    return f"make_interval(secs => %({name})s::float8)"


NOW = f"SELECT extract(epoch from {T})::float8 AS now"

INSERT_JOBS = f"""
INSERT INTO jobs (id, task, queue, args, priority, status, run_at, max_retries, retry_backoff,
                  retry_backoff_max, chosen, created_at, updated_at, concurrency_key,
                  concurrency_limit, rate_key, rate_limit, rate_period, meta)
SELECT x.id, x.task, x.queue, x.args::json, x.priority, 'queued',
       {T} + make_interval(secs => x.delay), x.max_retries, x.retry_backoff,
       x.retry_backoff_max, x.chosen, {T}, {T}, x.concurrency_key, x.concurrency_limit,
       x.rate_key, x.rate_limit, x.rate_period, x.meta::jsonb
FROM json_to_recordset(%(jobs)s::json) AS x(
    id text, task text, queue text, args text, priority integer, delay float8,
    max_retries integer, retry_backoff float8, retry_backoff_max float8, chosen integer,
    concurrency_key text, concurrency_limit integer, rate_key text, rate_limit integer,
    rate_period float8, meta text)
"""

# INSERT_JOBS and the wake-up of every queue it filled in one statement (store/sql/
# `_insert_and_wake`): committed by itself, one round trip for an enqueue instead of four
# (BEGIN, insert, NOTIFY, COMMIT). A notification is sent at commit, as NOTIFY's is.
INSERT_JOBS_WAKING = f"""
WITH inserted AS ({INSERT_JOBS.strip()}
    RETURNING queue
)
SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM inserted) AS filled
"""

# Jobs that take part in dependencies (store/sql/dependencies.py): those that wait for
# others (`status` 'waiting', `waiting_for` their number) and those of the same batch that
# others wait for (`has_dependents`). Plain jobs keep INSERT_JOBS: they pay nothing.
INSERT_LINKED_JOBS = f"""
INSERT INTO jobs (id, task, queue, args, priority, status, run_at, max_retries, retry_backoff,
                  retry_backoff_max, chosen, created_at, updated_at, concurrency_key,
                  concurrency_limit, rate_key, rate_limit, rate_period, meta, has_dependents,
                  waiting_for, on_dependency_failure, dependency_results)
SELECT x.id, x.task, x.queue, x.args::json, x.priority, x.status,
       {T} + make_interval(secs => x.delay), x.max_retries, x.retry_backoff,
       x.retry_backoff_max, x.chosen, {T}, {T}, x.concurrency_key, x.concurrency_limit,
       x.rate_key, x.rate_limit, x.rate_period, x.meta::jsonb, x.has_dependents,
       x.waiting_for, x.on_dependency_failure, x.dependency_results
FROM json_to_recordset(%(jobs)s::json) AS x(
    id text, task text, queue text, args text, priority integer, delay float8,
    max_retries integer, retry_backoff float8, retry_backoff_max float8, chosen integer,
    concurrency_key text, concurrency_limit integer, rate_key text, rate_limit integer,
    rate_period float8, meta text, status text, has_dependents boolean, waiting_for integer,
    on_dependency_failure text, dependency_results boolean)
"""

# The dependencies an enqueue names, each locked (in id order, as FINISH locks its rows)
# and marked `has_dependents`, with its status as it stands under the lock: a FINISH of
# it waits for this transaction, or this waits for the FINISH and sees the job ended. A
# row already marked is only locked (no new row version). A job not found is missing
# from the answer.
LOCK_DEPENDENCIES = """
WITH locked AS (
    SELECT id, status, has_dependents FROM jobs
    WHERE id = ANY(%(ids)s::text[])
    ORDER BY id
    FOR UPDATE
), marked AS (
    UPDATE jobs SET has_dependents = true
    WHERE id IN (SELECT id FROM locked WHERE NOT has_dependents)
)
SELECT id, status FROM locked
"""

# Each edge: {job_id, depends_on, position}.
INSERT_DEPENDENCIES = """
INSERT INTO job_dependencies (job_id, depends_on, position)
SELECT x.job_id, x.depends_on, x.position
FROM json_to_recordset(%(edges)s::json) AS x(job_id text, depends_on text, position integer)
"""

# The waiting dependents of jobs that ended (`ids`), in the ending transaction, in a
# statement of its own: its snapshot is taken after the ended rows were locked, so it sees
# every edge committed before (LOCK_DEPENDENCIES waits for those locks). Each edge not yet
# counted whose dependency has ended counts once; a job whose last dependency ended is
# queued (run_at: now, or its own later eta); one whose dependency ended dead or
# cancelled is cancelled, unless it runs anyway (`on_dependency_failure` 'run'). The
# dependents are locked in id order first (as FINISH locks its rows), so two releases of
# jobs with common dependents wait for each other instead of deadlocking; a row another
# transaction is releasing is waited for, then re-read (READ COMMITTED): two dependencies
# ending at once each count once. END_DEPENDENCY_EDGES then marks the edges.
_FAILED = "c.failed IS NOT NULL AND j.on_dependency_failure IS DISTINCT FROM 'run'"
_RELEASED = f"NOT ({_FAILED}) AND j.waiting_for - c.n <= 0"
RELEASE_DEPENDENTS = f"""
WITH c AS (
    SELECT d.job_id, count(*)::integer AS n,
           min(CASE WHEN e.status <> 'succeeded' THEN d.depends_on || ' ended ' || e.status END)
               AS failed
    FROM job_dependencies AS d JOIN jobs AS e ON e.id = d.depends_on
    WHERE d.depends_on = ANY(ARRAY(SELECT unnest(%(ids)s::text[]))) AND d.ended IS NULL
      AND e.status IN ('succeeded', 'dead', 'cancelled')
    GROUP BY d.job_id
), locked AS (
    SELECT j.id FROM jobs AS j
    WHERE j.id = ANY(ARRAY(SELECT job_id FROM c))
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE jobs AS j
SET waiting_for = greatest(j.waiting_for - c.n, 0),
    status = CASE WHEN {_FAILED} THEN 'cancelled'
                  WHEN {_RELEASED} THEN 'queued' ELSE 'waiting' END,
    run_at = CASE WHEN {_RELEASED} THEN greatest(j.run_at, {T}) ELSE j.run_at END,
    finished_at = CASE WHEN {_FAILED} THEN {T} END,
    error = CASE WHEN {_FAILED} THEN 'dependency_failed: job ' || c.failed ELSE j.error END,
    updated_at = {T}
FROM c JOIN locked ON locked.id = c.job_id
WHERE j.id = c.job_id AND j.status = 'waiting'
RETURNING j.id, j.queue, j.status, j.awaited, j.has_dependents
"""

END_DEPENDENCY_EDGES = """
UPDATE job_dependencies AS d SET ended = e.status
FROM jobs AS e
WHERE d.depends_on = ANY(ARRAY(SELECT unnest(%(ids)s::text[]))) AND d.ended IS NULL
  AND e.id = d.depends_on AND e.status IN ('succeeded', 'dead', 'cancelled')
"""

# What a callback receives (a job with `dependency_results`): its dependencies in order,
# each one's result, and whether that result is still to come (completed in its task's
# transaction, saved after: as JOB_END says).
DEPENDENCY_RESULTS = """
SELECT d.depends_on AS id, e.status, e.result::text AS result,
       coalesce(e.result_pending, false) AS pending
FROM job_dependencies AS d LEFT JOIN jobs AS e ON e.id = d.depends_on
WHERE d.job_id = %(job_id)s
ORDER BY d.position
"""

# A job's dependencies (in order) and its dependents, for `get_job`.
GET_DEPENDENCIES = """
SELECT d.depends_on AS id, e.task, e.status, d.ended
FROM job_dependencies AS d LEFT JOIN jobs AS e ON e.id = d.depends_on
WHERE d.job_id = %(job_id)s
ORDER BY d.position
"""

GET_DEPENDENTS = """
SELECT d.job_id AS id, e.task, e.status, d.ended
FROM job_dependencies AS d LEFT JOIN jobs AS e ON e.id = d.job_id
WHERE d.depends_on = %(job_id)s
ORDER BY d.job_id
LIMIT %(limit)s
"""

# A job with a unique key (store/sql/ `enqueue`), bound by value. Enqueuers of one key
# queue up on a transaction lock of its hash; each then looks with a fresh snapshot (READ
# COMMITTED: a statement sees every commit made before it started, the previous holder's
# included) for a job that holds the key: queued or running, or finished within
# `unique_for`. None: this job is inserted. The partial unique index is the backstop (a
# replayed dead job, a caller's REPEATABLE READ snapshot): a live duplicate is dropped.
# The last statement answers the job that holds the key: this one, or the one found.
LOCK_UNIQUE = f"SELECT pg_advisory_xact_lock({UNIQUE_NAMESPACE}, hashtext(%(unique_key)s))"

INSERT_UNIQUE_JOB = f"""
INSERT INTO jobs (id, task, queue, args, priority, status, run_at, max_retries, retry_backoff,
                  retry_backoff_max, chosen, created_at, updated_at, unique_key, schedule,
                  concurrency_key, concurrency_limit, rate_key, rate_limit, rate_period, meta)
SELECT %(id)s, %(task)s, %(queue)s, %(args)s::json, %(priority)s, 'queued',
       {T} + make_interval(secs => %(delay)s::float8), %(max_retries)s, %(retry_backoff)s,
       %(retry_backoff_max)s, %(chosen)s, {T}, {T}, %(unique_key)s, %(schedule)s,
       %(concurrency_key)s, %(concurrency_limit)s::integer, %(rate_key)s,
       %(rate_limit)s::integer, %(rate_period)s::float8, %(meta)s::jsonb
WHERE NOT EXISTS (
    SELECT 1 FROM jobs
    WHERE unique_key = %(unique_key)s
      AND (status IN ('queued', 'running')
           OR finished_at >= {T} - make_interval(secs => %(unique_for)s::float8)))
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
DO NOTHING
"""

UNIQUE_HOLDER = f"""
SELECT id, id = %(id)s AS inserted FROM jobs
WHERE unique_key = %(unique_key)s
  AND (id = %(id)s OR status IN ('queued', 'running')
       OR finished_at >= {T} - make_interval(secs => %(unique_for)s::float8))
ORDER BY id = %(id)s DESC, status IN ('queued', 'running') DESC, created_at DESC
LIMIT 1
"""

ENQUEUE_UNIQUE = (LOCK_UNIQUE, INSERT_UNIQUE_JOB, UNIQUE_HOLDER)

# Periodic schedules (store/sql/ `tick_schedule`): the row is made if missing, then
# locked for the transaction, so the workers that find a tick due enqueue it one after the
# other, and the later ones find the last tick already moved on.
ENSURE_SCHEDULE = f"""
INSERT INTO schedules (name, task, spec, updated_at) VALUES (%(name)s, %(task)s, %(spec)s, {T})
ON CONFLICT (name) DO NOTHING
"""

LOCK_SCHEDULE = """
SELECT spec, extract(epoch from last_tick)::float8 AS last_tick FROM schedules
WHERE name = %(name)s
FOR UPDATE
"""

UPDATE_SCHEDULE = f"""
UPDATE schedules
SET task = %(task)s, spec = %(spec)s, last_tick = to_timestamp(%(last_tick)s::float8),
    next_tick = to_timestamp(%(next_tick)s::float8),
    last_job_id = coalesce(%(last_job_id)s, last_job_id), updated_at = {T}, updated_by = %(by)s
WHERE name = %(name)s
"""

LIST_SCHEDULES = """
SELECT s.name, s.task, s.spec, extract(epoch from s.last_tick)::float8 AS last_tick,
       extract(epoch from s.next_tick)::float8 AS next_tick, s.last_job_id,
       j.status AS last_job_status, extract(epoch from s.updated_at)::float8 AS updated_at,
       s.updated_by
FROM schedules AS s LEFT JOIN jobs AS j ON j.id = s.last_job_id
ORDER BY s.name
"""

# Each queue's best runnable jobs come from its own ordered walk of the claim index
# (`LATERAL`, one per queue): `queue = ANY(...)` with this ORDER BY would read and sort
# every queued row of those queues at each claim, so the claim would slow down with the
# backlog. Up to `limit` rows per queue are locked and the best `limit` of them taken;
# the others are unlocked when the claim commits, milliseconds later.
# What every claim does with the jobs it `picked` (a CTE of ids before this): they run
# under a new execution. The running attempt lives on the job row alone (worker_id,
# execution_id, started_at, rate_key): its execution row is written once, complete, by
# the statement that ends it (FINISH, RELEASE), and the `executions` view shows it open
# meanwhile (migration 0017).
_CLAIMED = f"""claimed AS (
    UPDATE jobs AS j
    SET status = 'running',
        worker_id = %(worker_id)s,
        execution_id = j.execution_id + 1,
        attempts = j.attempts + 1,
        lease_expires_at = {T_STATEMENT} + {_secs("lease")},
        heartbeat_at = {T_STATEMENT},
        started_at = {T_STATEMENT},
        updated_at = {T_STATEMENT},
        claimed_ahead = %(ahead)s,
        progress_value = NULL, progress_stage = NULL, progress_message = NULL
    FROM picked WHERE j.id = picked.id
    RETURNING j.*
)
SELECT id, task, queue, args::text AS args, attempts, execution_id, max_retries,
       retry_backoff, retry_backoff_max, checkpoint::text AS checkpoint, priority, chosen,
       meta::text AS meta, extract(epoch from lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from run_at)::float8 AS run_at, dependency_results
FROM claimed
"""

# Jobs without a concurrency key or a rate key only: the claim index holds nothing else.
CLAIM = f"""
WITH picked AS (
    SELECT c.id FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM jobs
        WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
          AND queue = q.name
          AND run_at <= {T_STATEMENT}
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(limit)s
), {_CLAIMED}"""

# CLAIM for a worker of one queue (the usual case): one ordered walk of its claim index,
# without CLAIM's per-queue LATERAL, its aggregate and its outer sort (0.87 -> 0.58 ms for
# claims of 10 here, 1.23 -> 0.95 ms for claims of 30).
CLAIM_ONE_QUEUE = f"""
WITH picked AS (
    SELECT id FROM jobs
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND queue = %(queue)s AND run_at <= {T_STATEMENT}
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {_CLAIMED}"""

# The jobs a transport's messages name (store/sql/ `claim_ids`): only those still queued,
# runnable and without a concurrency or a rate key, claimed as CLAIM does; a row another
# claimer is taking right now is skipped (it is active elsewhere), as is a job running,
# finished or unknown.
CLAIM_IDS = f"""
WITH picked AS (
    SELECT id FROM jobs
    WHERE id = ANY(%(ids)s::text[]) AND status = 'queued' AND concurrency_key IS NULL
      AND rate_key IS NULL AND run_at <= {T_STATEMENT}
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), {_CLAIMED}"""

# What a transport's sweeper (re)publishes (store/sql/ `due_for_publish`): queued,
# runnable, unkeyed jobs of its queues that fell due since its last pass (delayed and
# retried: `run_at` after `created_at`), were requeued since (reaped, released,
# replayed: `updated_at` after `created_at`), or have waited since `stale_before`.
DUE_FOR_PUBLISH = f"""
SELECT id, queue FROM jobs
WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
  AND queue = ANY(%(queues)s::text[])
  AND run_at <= {T_STATEMENT}
  AND ((run_at > to_timestamp(%(since)s::float8) AND run_at > created_at)
       OR (updated_at > to_timestamp(%(since)s::float8) AND updated_at > created_at)
       OR run_at <= to_timestamp(%(stale_before)s::float8))
ORDER BY run_at, id
LIMIT %(limit)s
"""

# Jobs with a concurrency key and no rate key (store/sql/ `claim`, only when CLAIM filled
# fewer than `limit`), in two statements. First the keys: those of runnable keyed jobs whose key
# looked below its limit, best job first, at most `limit` of them, each kept only if its
# transaction lock could be taken (a key another claimer holds is skipped, as SKIP LOCKED
# skips a row). The candidates are fixed first (MATERIALIZED), so no other key's lock is
# tried.
CLAIM_KEYS = f"""
WITH candidates AS MATERIALIZED (
    SELECT k.key FROM (
        SELECT concurrency_key AS key, max(priority) AS priority, min(run_at) AS run_at,
               max(concurrency_limit) AS most
        FROM jobs
        WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL
          AND queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}
        GROUP BY concurrency_key
    ) AS k
    WHERE k.most > (SELECT count(*) FROM jobs AS r
                    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                      AND r.concurrency_key = k.key)
    ORDER BY k.priority DESC, k.run_at, k.key
    LIMIT %(limit)s
)
SELECT key FROM candidates
WHERE pg_try_advisory_xact_lock({CONCURRENCY_NAMESPACE}, hashtext(key))
"""

# Then, in a statement of its own (READ COMMITTED: its snapshot is taken after the locks,
# so it sees every claim of these keys committed before, and none can commit during it),
# each locked key's runnable jobs in claim order, the first `concurrency_limit - running`
# of them (each job's own limit); the best `limit` of those, claimed as CLAIM does.
CLAIM_KEYED = f"""
WITH keys AS (
    SELECT k.key, (SELECT count(*) FROM jobs AS r
                   WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                     AND r.concurrency_key = k.key) AS running
    FROM unnest(%(keys)s::text[]) AS k(key)
), ranked AS (
    SELECT c.id, c.priority, c.run_at, c.concurrency_limit, keys.running,
           row_number() OVER (PARTITION BY c.concurrency_key
                              ORDER BY c.priority DESC, c.run_at, c.id) AS rank
    FROM jobs AS c JOIN keys ON c.concurrency_key = keys.key
    WHERE c.status = 'queued' AND c.concurrency_key IS NOT NULL AND c.rate_key IS NULL
      AND c.queue = ANY(%(queues)s::text[]) AND c.run_at <= {T_STATEMENT}
), picked AS (
    SELECT j.id FROM jobs AS j
    WHERE j.id IN (SELECT id FROM ranked WHERE rank <= concurrency_limit - running)
      AND j.status = 'queued'
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {_CLAIMED}"""

# The rate-limited jobs a claim looks at, as CTEs: `keys`, every rate key of a queued job,
# one probe each of jobs_rated_claim_idx (a skip scan: the index is ordered by key);
# `best`, each key's best runnable job of these queues (its limit is the key's, for the
# look), the key's walk stopping at the first; `open`, the best `limit` of the keys whose
# starts within the period (`used`: its executions, ended or running) looked below
# their limit. A claim's cost follows the number of keys, not their backlogs.
# A key's starts are read from the `executions` view (migration 0017): ended attempts by
# executions_rate_idx, running ones from their job rows by jobs_running_rate_idx (the
# claim writes no execution row), so an attempt counts from its claim on.
_RATE_KEYS = f"""keys AS (
    (SELECT rate_key AS key FROM jobs
     WHERE status = 'queued' AND rate_key IS NOT NULL
     ORDER BY rate_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.rate_key FROM jobs AS j
            WHERE j.status = 'queued' AND j.rate_key IS NOT NULL AND j.rate_key > k.key
            ORDER BY j.rate_key LIMIT 1)
    FROM keys AS k WHERE k.key IS NOT NULL
), best AS MATERIALIZED (
    SELECT k.key, b.priority, b.run_at, b.rate_limit AS n, b.rate_period AS period
    FROM keys AS k
    CROSS JOIN LATERAL (
        SELECT priority, run_at, rate_limit, rate_period FROM jobs
        WHERE status = 'queued' AND rate_key IS NOT NULL AND rate_key = k.key
          AND queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}
        ORDER BY priority DESC, run_at, id
        LIMIT 1
    ) AS b
)"""

# The runnable jobs of a rate key, best first (`rate_key = <key>`): a walk of its part of
# jobs_rated_claim_idx, at most `limit` of them (no claim takes more).
_KEY_JOBS = f"""
        FROM jobs
        WHERE status = 'queued' AND rate_key IS NOT NULL AND rate_key = {{key}}
          AND queue = ANY(%(queues)s::text[]) AND run_at <= {T_STATEMENT}
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s"""

# Jobs with a rate key (store/sql/ `claim`, in the keyed claim's transaction, only when
# the claims before filled fewer than `limit`), in two statements, as keyed jobs are.
# First the keys: the open rate keys (`_RATE_KEYS`), each with whether its transaction
# lock could be taken (a key another claimer holds is skipped, never waited for); with
# them the concurrency keys of their first jobs that have one, locked the same way (a job
# with both keys obeys both); and a `held` row when any rate-limited job is runnable here
# at all, so that only then is RATE_WAIT asked. The candidates are fixed first
# (MATERIALIZED), so no other key's lock is tried.
CLAIM_RATE_KEYS = f"""
WITH RECURSIVE {_RATE_KEYS}, open AS MATERIALIZED (
    SELECT key FROM best
    WHERE n > (SELECT count(*) FROM executions AS e
               WHERE e.rate_key IS NOT NULL AND e.rate_key = best.key
                 AND e.started_at > {T_STATEMENT} - make_interval(secs => best.period))
    ORDER BY priority DESC, run_at, key
    LIMIT %(limit)s
), keyed AS MATERIALIZED (
    SELECT DISTINCT c.concurrency_key AS key
    FROM open AS o
    CROSS JOIN LATERAL (SELECT concurrency_key {_KEY_JOBS.format(key="o.key")}) AS c
    WHERE c.concurrency_key IS NOT NULL
)
SELECT 'rate' AS kind, key, pg_try_advisory_xact_lock({RATE_NAMESPACE}, hashtext(key)) AS locked
FROM open
UNION ALL
SELECT 'concurrency', key, pg_try_advisory_xact_lock({CONCURRENCY_NAMESPACE}, hashtext(key))
FROM keyed
UNION ALL
SELECT 'held', NULL, NULL WHERE EXISTS (SELECT 1 FROM best)
"""

# Then, in a statement of its own (its snapshot taken after the locks: it sees every
# start of these keys committed before, and none can commit during it): the first jobs of
# each locked rate key (`candidates`), per key and period their starts within the period
# (`used`), per locked concurrency key its running jobs. A job whose concurrency key is
# not locked waits; one with a concurrency key takes a place among that key's free slots
# (`free`), among the candidates whose rate key has room, so a job waiting for its rate
# key's next start does not hold a concurrency slot another rate key could use. Then each
# rate key's jobs in claim order, the first `rate_limit - used` of them (each job's own
# limit); the best `limit` of those, claimed as CLAIM does (the running job row, with its
# rate key and start, is the start the next claim counts).
CLAIM_RATED = f"""
WITH candidates AS MATERIALIZED (
    SELECT c.* FROM unnest(%(rate_keys)s::text[]) AS k(key)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at, rate_key, rate_limit, rate_period, concurrency_key,
               concurrency_limit {_KEY_JOBS.format(key="k.key")}
    ) AS c
), windows AS MATERIALIZED (
    SELECT g.key, g.period,
           (SELECT count(*) FROM executions AS e
            WHERE e.rate_key IS NOT NULL AND e.rate_key = g.key
              AND e.started_at > {T_STATEMENT} - make_interval(secs => g.period)) AS used
    FROM (SELECT DISTINCT rate_key AS key, rate_period AS period FROM candidates) AS g
), slots AS MATERIALIZED (
    SELECT k.key, (SELECT count(*) FROM jobs AS r
                   WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                     AND r.concurrency_key = k.key) AS running
    FROM unnest(%(concurrency_keys)s::text[]) AS k(key)
), fit AS (
    SELECT c.id, c.priority, c.run_at, c.rate_key, c.concurrency_key,
           c.rate_limit - w.used AS room, c.concurrency_limit - s.running AS free
    FROM candidates AS c
    JOIN windows AS w ON w.key = c.rate_key AND w.period = c.rate_period
    LEFT JOIN slots AS s ON s.key = c.concurrency_key
    WHERE c.rate_limit > w.used AND (c.concurrency_key IS NULL OR s.key IS NOT NULL)
), within_slots AS (
    SELECT *, row_number() OVER (PARTITION BY concurrency_key
                                 ORDER BY priority DESC, run_at, id) AS place
    FROM fit
), ranked AS (
    SELECT id, room,
           row_number() OVER (PARTITION BY rate_key ORDER BY priority DESC, run_at, id) AS rank
    FROM within_slots WHERE concurrency_key IS NULL OR place <= free
), picked AS (
    SELECT j.id FROM jobs AS j
    WHERE j.id IN (SELECT id FROM ranked WHERE rank <= room) AND j.status = 'queued'
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {_CLAIMED}"""

# How long until a runnable rate-limited job of these queues may start, in seconds (None:
# none is held back by its rate key): per key (with its best job's limit), the start that
# leaves the window last among the `rate_limit` latest, plus the period. A key with room
# counts nothing here (what holds its jobs back, if anything, is a concurrency limit).
RATE_WAIT = f"""
WITH RECURSIVE {_RATE_KEYS}
SELECT extract(epoch from min(nth.started_at + make_interval(secs => best.period))
                          - {T_STATEMENT})::float8 AS wait
FROM best
CROSS JOIN LATERAL (
    SELECT e.started_at FROM executions AS e
    WHERE e.rate_key IS NOT NULL AND e.rate_key = best.key
      AND e.started_at > {T_STATEMENT} - make_interval(secs => best.period)
    ORDER BY e.started_at DESC
    LIMIT 1 OFFSET best.n - 1
) AS nth
"""

# Heartbeat, finish and release lock their job rows in id order (the `locked` CTE) before
# they update them, and update only through it: two statements of one worker that touch
# the same jobs (a heartbeat and a finish racing) then wait for each other instead of
# each holding a row the other needs ("deadlock detected"). Fencing: only rows still
# running under the execution the batch names, and claimed by the worker the statement
# names (`_HELD_BY`), are changed. The lock step finds its rows by primary key alone
# (`j.id = ANY(ARRAY(SELECT id FROM ...))`, no status test), whatever the statistics say:
# with `status = 'running'` there, a table whose statistics lag (a burst of claims) was
# read through every running row (jobs_worker_idx) for each batch. A row of the batch's
# execution that is no longer running is locked too, in the same id order, and left
# unchanged: whether it runs is read from the locked row
# (`locked.status`, the row as locked, which nobody else can change before the update),
# never tested on `j` in the update. With `j.status = 'running'` there, the update's own
# conditions matched the predicate of the partial index of running jobs, and statistics
# taken while nothing ran (a VACUUM ANALYZE of an idle backlog: the index looked empty)
# made it scan that whole index for each row of its batch: quadratic in the jobs a worker
# holds, a heartbeat of minutes with a million queued (BENCHMARKS.md, 2026-11-24). Without
# it, the primary key is the only way to the rows.


# The worker part of the fencing key (docs/DESIGN.md, "A failover that forgets a
# claim"): the lease holder's writes name their worker, and match only a job that worker
# claimed, so an execution id a database issued again after forgetting a claim fences
# out the attempt of the forgotten one. `worker_id` NULL: a reclaimer, which read and
# locked the rows it finishes in its own transaction (or a lease made without its
# worker), fenced on the execution alone. One parameter per statement: no byte per job.
_HELD_BY = "(%(worker_id)s::text IS NULL OR j.worker_id = %(worker_id)s::text)"


def _locked(batch: str, *columns: str) -> str:
    """The `locked` CTE described above, over the CTE `batch` of leases (`id`, `eid`):
    written once for every statement that changes a batch of a worker's rows. It has
    `id`, `status` and the further `columns` (of `j`)."""
    return f"""locked AS (
    SELECT {", ".join(("j.id", "j.status", *columns))}
    FROM jobs AS j JOIN {batch} ON j.id = {batch}.id AND j.execution_id = {batch}.eid
    WHERE j.id = ANY(ARRAY(SELECT id FROM {batch})) AND {_HELD_BY}
    ORDER BY j.id
    FOR UPDATE OF j
)"""


# A heartbeat that comes over half the worker's staleness threshold after its previous
# one ends a pause in its contact with the database: its unbroken contact starts again.
_CONTACT_SINCE = f"""CASE WHEN last_heartbeat_at < {T} - make_interval(secs => stale_after / 2)
        THEN {T} ELSE coalesce(contact_since, started_at) END"""

HEARTBEAT = f"""
WITH touched AS (
    UPDATE workers SET last_heartbeat_at = {T}, status = 'active', stopped_at = NULL,
        contact_since = {_CONTACT_SINCE}
    WHERE id = %(worker_id)s
), r AS (
    SELECT * FROM json_to_recordset(%(renewals)s::json)
        AS r(id text, eid bigint, hp boolean, pv float8, ps text, pm text)
), {_locked("r")}
UPDATE jobs AS j
SET lease_expires_at = {T} + {_secs("lease")},
    heartbeat_at = {T},
    updated_at = {T},
    progress_value = CASE WHEN r.hp THEN r.pv ELSE j.progress_value END,
    progress_stage = CASE WHEN r.hp THEN r.ps ELSE j.progress_stage END,
    progress_message = CASE WHEN r.hp THEN r.pm ELSE j.progress_message END
FROM r JOIN locked ON locked.id = r.id
WHERE j.id = r.id AND j.execution_id = r.eid AND locked.status = 'running'
RETURNING j.id, j.execution_id, j.cancel_requested
"""

# `abandoned`: attempts whose end the worker decided while their code still runs (its
# pulse writes the count when it changed).
RECORD_ABANDONED = "UPDATE workers SET abandoned = %(abandoned)s WHERE id = %(worker_id)s"

# The start of jobs a worker claimed ahead (its prefetch buffer), recorded before their
# code runs: from here on a reclaim counts their attempt (docs/DESIGN.md, "Claim ahead").
# Fenced like a heartbeat; a job whose cancel was requested is not started (its worker
# releases it, which ends it 'cancelled' without counting an attempt). The start renews
# the lease and moves `started_at` to the real start. Locked in id order, as every
# batch of a worker's rows is.
START_AHEAD = f"""
WITH s AS (
    SELECT * FROM json_to_recordset(%(leases)s::json) AS s(id text, eid bigint)
), {_locked("s")}
UPDATE jobs AS j
SET claimed_ahead = false,
    started_at = {T},
    heartbeat_at = {T},
    lease_expires_at = {T} + {_secs("lease")},
    updated_at = {T}
FROM s JOIN locked ON locked.id = s.id
WHERE j.id = s.id AND j.execution_id = s.eid AND locked.status = 'running'
  AND j.claimed_ahead AND NOT j.cancel_requested
RETURNING j.id, j.execution_id
"""

# The result of a job its task already completed inside `ctx.transaction()` (the job keeps
# its worker once it succeeded: fenced like the completion).
SAVE_RESULT = f"""
UPDATE jobs AS j SET result = %(result)s::json, result_pending = false, lease_expires_at = NULL,
                updated_at = {T}
WHERE id = %(job_id)s AND execution_id = %(execution_id)s AND status = 'succeeded'
  AND result_pending AND {_HELD_BY}
RETURNING id, status, awaited
"""

SAVE_CHECKPOINT = f"""
UPDATE jobs AS j SET checkpoint = %(checkpoint)s::json, heartbeat_at = {T}, updated_at = {T}
WHERE id = %(job_id)s AND execution_id = %(execution_id)s AND status = 'running'
  AND {_HELD_BY}
RETURNING cancel_requested
"""

# The pulse: what running tasks reported (progress, checkpoint) since the last pulse, for
# every attempt of a worker in one statement, fenced like a heartbeat; the lease is not
# renewed (that stays the heartbeat's), but a report is a sign of life: `heartbeat_at`
# moves, so a crash's timing runs to it (heartq/inspect/attempts.py), as does a saved
# checkpoint's. Each report: {id, eid, hp, pv, ps, pm, hc, cp}.
PULSE = f"""
WITH r AS (
    SELECT * FROM json_to_recordset(%(reports)s::json) AS r(
        id text, eid bigint, hp boolean, pv float8, ps text, pm text, hc boolean, cp text)
), {_locked("r")}
UPDATE jobs AS j
SET progress_value = CASE WHEN r.hp THEN r.pv ELSE j.progress_value END,
    progress_stage = CASE WHEN r.hp THEN r.ps ELSE j.progress_stage END,
    progress_message = CASE WHEN r.hp THEN r.pm ELSE j.progress_message END,
    checkpoint = CASE WHEN r.hc THEN r.cp::json ELSE j.checkpoint END,
    heartbeat_at = {T},
    updated_at = {T}
FROM r JOIN locked ON locked.id = r.id
WHERE j.id = r.id AND j.execution_id = r.eid AND locked.status = 'running'
RETURNING j.id, j.execution_id, j.cancel_requested
"""

# The running attempts of one worker whose cancel was requested (the partial index of
# running jobs by worker): what a pulse reads where no notification says so at once.
RUNNING_CANCELS = """
SELECT id, execution_id FROM jobs
WHERE worker_id = %(worker_id)s AND status = 'running' AND cancel_requested
"""

# An attempt that would be retried (status 'queued') while a cancel was requested ends the
# job as 'cancelled' instead: the request is honoured, never lost to a retry. The
# execution keeps its own outcome (failed, timed_out, ...).
# An attempt ended `interrupted` (its worker lost the database) or `released` (its worker
# does not know its task: heartq.lifecycle.fate) is not counted as an attempt.
_REQUEUE = "(f.status = 'queued' AND NOT j.cancel_requested)"

FINISH = f"""
WITH f AS (
    SELECT * FROM json_to_recordset(%(finishes)s::json) AS f(
        id text, eid bigint, status text, outcome text, result text, error text,
        delay float8, keep boolean, dead_reason text, crash text, pending boolean)
), {_locked("f", "j.execution_id", "j.has_dependents", "j.worker_id")}, landed AS (
    UPDATE jobs AS j
    SET status = CASE WHEN f.status = 'queued' AND j.cancel_requested
                      THEN 'cancelled' ELSE f.status END,
        run_at = CASE WHEN {_REQUEUE} AND NOT f.keep
                      THEN {T} + make_interval(secs => f.delay) ELSE j.run_at END,
        attempts = CASE WHEN f.outcome IN ('interrupted', 'released')
                        THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        result = f.result::json,
        error = coalesce(f.error, j.error),
        dead_reason = f.dead_reason,
        progress_value = CASE WHEN f.status = 'succeeded' AND j.progress_value IS NOT NULL
                              THEN 1.0 ELSE j.progress_value END,
        finished_at = CASE WHEN {_REQUEUE} THEN NULL ELSE {T} END,
        worker_id = CASE WHEN {_REQUEUE} THEN NULL ELSE j.worker_id END,
        lease_expires_at = CASE WHEN f.pending THEN j.lease_expires_at END,
        result_pending = coalesce(f.pending, false),
        cancel_requested = false,
        updated_at = {T}
    FROM f JOIN locked ON locked.id = f.id
    WHERE j.id = f.id AND j.execution_id = f.eid AND locked.status = 'running'
      AND NOT (%(defer)s AND j.has_dependents)
    RETURNING j.id, j.execution_id, j.status, j.awaited, j.has_dependents,
              locked.worker_id AS ran_on, j.started_at, j.rate_key
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, error, crash, rate_key)
    SELECT landed.id, landed.execution_id, landed.ran_on, landed.started_at, {T},
           f.outcome, f.error, f.crash::json, landed.rate_key
    FROM f JOIN landed ON landed.id = f.id AND landed.execution_id = f.eid
)
SELECT id, execution_id, status, awaited, has_dependents, false AS deferred FROM landed
UNION ALL
SELECT id, execution_id, status, false, true, true FROM locked
WHERE %(defer)s AND has_dependents AND status = 'running'
"""

# Released jobs go back to the queue, no attempt counted; one whose cancel was requested
# ends 'cancelled' instead (run_at and worker_id kept), so it never runs again. The
# attempt's execution row is written here, as FINISH writes it.
RELEASE = f"""
WITH l AS (
    SELECT * FROM json_to_recordset(%(leases)s::json) AS l(id text, eid bigint)
), {_locked("l", "j.worker_id")}, landed AS (
    UPDATE jobs AS j
    SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        attempts = greatest(j.attempts - 1, 0),
        worker_id = CASE WHEN j.cancel_requested THEN j.worker_id END,
        lease_expires_at = NULL,
        run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE {T} END,
        finished_at = CASE WHEN j.cancel_requested THEN {T} END,
        cancel_requested = false,
        updated_at = {T}
    FROM l JOIN locked ON locked.id = l.id
    WHERE j.id = l.id AND j.execution_id = l.eid AND locked.status = 'running'
    RETURNING j.id, j.execution_id, j.status, j.awaited, j.has_dependents,
              locked.worker_id AS ran_on, j.started_at, j.rate_key
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, rate_key)
    SELECT id, execution_id, ran_on, started_at, {T}, 'released', rate_key FROM landed
)
SELECT id, execution_id, status, awaited, has_dependents FROM landed
"""

_RECLAIM_COLUMNS = """
SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff,
       j.retry_backoff_max, j.lease_expires_at, j.heartbeat_at,
       j.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, j.args::text AS args, j.meta::text AS meta,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'crashed')::integer AS crashes,
       (SELECT count(*) FROM ended_executions e
        WHERE e.job_id = j.id AND e.outcome = 'interrupted')::integer AS interruptions,
       (SELECT t.retry_rules::text FROM tasks AS t WHERE t.name = j.task) AS retry_rules
"""
_RECLAIM_FROM = "FROM jobs AS j LEFT JOIN workers AS w ON w.id = j.worker_id"

# Results still to come whose committing attempt's lease ran out (its worker died, froze or
# lost the database between the commit and the save): given up, by a reaper in contact
# (store/sql/ `reap_expired`), so that "no result" is final for every reader and a save
# that comes later is refused (SAVE_RESULT needs `result_pending`).
GIVE_UP_RESULTS = f"""
UPDATE jobs SET result_pending = false, lease_expires_at = NULL, updated_at = {T}
WHERE id IN (SELECT id FROM jobs WHERE result_pending AND lease_expires_at < {T}
             ORDER BY lease_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
  AND result_pending AND lease_expires_at < {T}
RETURNING id, status, awaited
"""

SELECT_EXPIRED = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.lease_expires_at < {T}
ORDER BY j.lease_expires_at
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
"""

SELECT_WORKER_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id = %(worker_id)s
FOR UPDATE OF j SKIP LOCKED
"""

# Reconciliation tries liveness locks as a probe does: one at a time with the probes
# (their lock, for the transaction), so neither takes the other's try-lock for a live
# worker's own.
WAIT_FOR_PROBES = f"SELECT pg_advisory_xact_lock({PROBE_KEY})"

# Startup reconciliation: the other workers of a name that may still matter (active, or
# holding running jobs), each with whether it is silent past its own threshold (judged
# only by an observer in contact that long, as the monitor judges), since when its lock
# has been found free, and whether its liveness lock is free: tried here, in this
# transaction (a lock a live worker's session holds cannot be taken; the ones taken go
# when the transaction ends). The namesakes are fixed first, so no other worker's lock
# is ever tried.
_NAMESAKES = f"""
WITH namesakes AS MATERIALIZED (
    SELECT w.id, w.name, w.last_heartbeat_at, w.stale_after, w.lock_free_since,
           w.liveness_lock
    FROM workers AS w
    WHERE w.name = %(name)s AND w.id <> %(except_id)s
      AND (w.status = 'active'
           OR EXISTS (SELECT 1 FROM jobs AS j WHERE j.worker_id = w.id AND j.status = 'running'))
)
SELECT id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age,
       coalesce(last_heartbeat_at < {T} - make_interval(
                    secs => coalesce(stale_after, %(stale_after)s::float8))
                AND coalesce(stale_after, %(stale_after)s::float8) <= %(contact)s::float8,
                false) AS silent,
       liveness_lock AND pg_try_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(id)) AS lock_free,
       extract(epoch from {T} - lock_free_since)::float8 AS free_for
FROM namesakes
ORDER BY id
"""

NAMESAKES = (WAIT_FOR_PROBES, _NAMESAKES)

# What reconciliation found of its namesakes' locks, kept as the probes keep it: for
# those found free the grace starts now (unless a probe started it earlier); for those
# found held it is forgotten, so a later drop starts a grace of its own.
NOTE_NAMESAKE_LOCKS = f"""
UPDATE workers
SET lock_free_since = CASE WHEN id = ANY(%(free)s::text[])
                           THEN coalesce(lock_free_since, {T}) END
WHERE id = ANY(%(free)s::text[]) OR (id = ANY(%(held)s::text[]) AND lock_free_since IS NOT NULL)
"""

SELECT_NAME_JOBS = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.worker_id = ANY(%(ids)s::text[])
FOR UPDATE OF j SKIP LOCKED
"""

SELECT_ONE_RUNNING = f"""{_RECLAIM_COLUMNS}
{_RECLAIM_FROM}
WHERE j.status = 'running' AND j.id = %(job_id)s AND j.execution_id = %(execution_id)s
  AND {_HELD_BY}
FOR UPDATE OF j
"""

# `liveness_lock`: whether the worker holds a liveness lock (behind a transaction-mode
# pooler without a direct URL it holds none: no probe may try it).
REGISTER_WORKER = f"""
INSERT INTO workers (id, name, hostname, pid, queues, concurrency, status, started_at,
                     last_heartbeat_at, stale_after, contact_since, liveness_lock)
VALUES (%(id)s, %(name)s, %(hostname)s, %(pid)s, %(queues)s::json, %(concurrency)s, 'active',
        {T}, {T}, %(stale_after)s::float8, {T}, %(liveness_lock)s)
ON CONFLICT (id) DO UPDATE SET status = 'active', last_heartbeat_at = {T}, stopped_at = NULL,
                               stale_after = EXCLUDED.stale_after, contact_since = {T},
                               liveness_lock = EXCLUDED.liveness_lock
"""

STOP_WORKER = f"""
UPDATE workers SET status = 'stopped', stopped_at = {T} WHERE id = %(worker_id)s
"""

DEACTIVATE_WORKER = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}, lock_free_since = NULL
WHERE id = (
    SELECT id FROM workers WHERE id = %(worker_id)s AND status = 'active'
    FOR UPDATE SKIP LOCKED
)
RETURNING id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age
"""

DEACTIVATE_NAMED = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}, lock_free_since = NULL
WHERE id = ANY(%(ids)s::text[]) AND status = 'active'
"""

# Each worker is judged by its own threshold; the observer's only for workers that did not
# record one (older versions); and only by an observer in unbroken contact with the
# database for at least that threshold (`contact`, from OBSERVER_CONTACT).
# SKIP LOCKED: a worker frozen in the middle of its own heartbeat transaction keeps its
# row locked; waiting for it would stall this whole maintenance pass (reaper and probe
# share its thread), so every other stale worker is handled and that one next time.
DEACTIVATE_STALE = f"""
UPDATE workers SET status = 'inactive', stopped_at = {T}, lock_free_since = NULL
WHERE id IN (
    SELECT id FROM workers
    WHERE status = 'active'
      AND last_heartbeat_at < {T} - make_interval(
          secs => coalesce(stale_after, %(stale_after)s::float8))
      AND coalesce(stale_after, %(stale_after)s::float8) <= %(contact)s::float8
    FOR UPDATE SKIP LOCKED
)
RETURNING id, name, extract(epoch from {T} - last_heartbeat_at)::float8 AS heartbeat_age
"""

# One query tries every active worker's liveness lock; the transaction's end releases
# the locks it took. A lock it can take belongs to a worker whose session is gone.
# How long the observing worker has been in unbroken contact with the database (0 while
# its own last heartbeat is over half its threshold old: it is cut off right now).
OBSERVER_CONTACT = f"""
SELECT CASE WHEN last_heartbeat_at < {T} - make_interval(secs => stale_after / 2) THEN 0.0
            ELSE extract(epoch from {T} - coalesce(contact_since, started_at))::float8
       END AS contact,
       stale_after
FROM workers WHERE id = %(worker_id)s
"""

# A worker no longer active runs no code: its last `abandoned` count is not shown.
# `running`: the jobs it started; `claimed_ahead`: those it holds in its buffer.
LIST_WORKERS = """
SELECT w.id, w.name, w.hostname, w.pid, w.status, w.queues::text AS queues, w.concurrency,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM jobs j
        WHERE j.worker_id = w.id AND j.status = 'running' AND NOT j.claimed_ahead)::integer
           AS running,
       (SELECT count(*) FROM jobs j
        WHERE j.worker_id = w.id AND j.status = 'running' AND j.claimed_ahead)::integer
           AS claimed_ahead,
       CASE WHEN w.status = 'active' THEN w.abandoned ELSE 0 END AS abandoned
FROM workers AS w
WHERE (%(include_all)s OR w.status = 'active')
ORDER BY w.started_at DESC
"""

PRUNE_WORKERS = f"""
DELETE FROM workers
WHERE status IN ('inactive', 'stopped')
  AND coalesce(stopped_at, last_heartbeat_at) < {T} - {_secs("retention")}
"""

SELECT_PRUNABLE_JOBS = f"""
SELECT id FROM jobs
WHERE status IN ('succeeded', 'cancelled') AND finished_at < {T} - {_secs("retention")}
LIMIT %(limit)s
"""

SELECT_PURGEABLE_DEAD = f"""
SELECT id FROM jobs
WHERE status = 'dead'
  AND (%(older_than)s::float8 IS NULL OR finished_at < {T} - {_secs("older_than")})
"""

DELETE_EXECUTIONS_OF = "DELETE FROM ended_executions WHERE job_id = ANY(%(ids)s::text[])"

# A deleted job's own edges (what it waited for); the edges of its dependents stay with
# them, and show the dependency gone.
DELETE_DEPENDENCIES_OF = "DELETE FROM job_dependencies WHERE job_id = ANY(%(ids)s::text[])"

DELETE_JOBS = "DELETE FROM jobs WHERE id = ANY(%(ids)s::text[])"

GET_JOB = "SELECT * FROM jobs WHERE id = %(job_id)s"

GET_EXECUTIONS = "SELECT * FROM executions WHERE job_id = %(job_id)s ORDER BY execution_id"

# `ahead` (true, false or null: either) tells running jobs claimed ahead from started ones.
LIST_JOBS = """
SELECT * FROM jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(ahead)s::boolean IS NULL OR claimed_ahead = %(ahead)s)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s
"""

# Per concurrency key with live jobs (`heartq stats`): busiest first.
CONCURRENCY_USAGE = """
SELECT concurrency_key AS key,
       sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END)::integer AS running,
       sum(CASE WHEN status = 'queued' THEN 1 ELSE 0 END)::integer AS queued,
       max(concurrency_limit) AS max_limit
FROM jobs
WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'running')
GROUP BY concurrency_key
ORDER BY running DESC, queued DESC, concurrency_key
LIMIT 1000
"""

# Per rate key and limit with live jobs (`heartq stats`, the dashboard): its jobs running,
# queued, and queued and due (`waiting`: what its limit may be holding back), its starts
# within the period (`started`) and, when that is the limit, when the next one frees up
# (`next_start_in`: the `n`-th latest start leaves the window). The live jobs through the
# rated claim index and the running jobs' index; the starts through the executions view.
RATE_USAGE = f"""
WITH live AS (
    SELECT rate_key, rate_limit, rate_period, status, run_at FROM jobs
    WHERE status = 'queued' AND rate_key IS NOT NULL
    UNION ALL
    SELECT rate_key, rate_limit, rate_period, status, run_at FROM jobs
    WHERE status = 'running' AND rate_key IS NOT NULL
), groups AS MATERIALIZED (
    SELECT rate_key AS key, rate_limit AS n, rate_period AS period,
           count(*) FILTER (WHERE status = 'running')::integer AS running,
           count(*) FILTER (WHERE status = 'queued')::integer AS queued,
           count(*) FILTER (WHERE status = 'queued' AND run_at <= {T})::integer AS waiting
    FROM live
    GROUP BY rate_key, rate_limit, rate_period
    ORDER BY waiting DESC, queued DESC, key
    LIMIT 1000
), starts AS (
    SELECT e.rate_key AS key, e.started_at,
           row_number() OVER (PARTITION BY e.rate_key ORDER BY e.started_at DESC) AS latest
    FROM executions AS e
    WHERE e.rate_key IS NOT NULL AND e.rate_key IN (SELECT key FROM groups)
      AND e.started_at > {T} - make_interval(secs => (SELECT max(period) FROM groups))
)
SELECT g.key, g.n, g.period, g.running, g.queued, g.waiting,
       count(s.started_at)::integer AS started,
       extract(epoch from min(s.started_at + make_interval(secs => g.period) - {T})
                          FILTER (WHERE s.latest = g.n))::float8 AS next_start_in
FROM groups AS g
LEFT JOIN starts AS s ON s.key = g.key AND s.started_at > {T} - make_interval(secs => g.period)
GROUP BY g.key, g.n, g.period, g.running, g.queued, g.waiting
ORDER BY g.waiting DESC, g.queued DESC, g.key
"""

QUEUE_WAITS = f"""
SELECT queue,
       extract(epoch from min(run_at) FILTER (WHERE run_at <= {T}))::float8 AS oldest_run_at,
       count(*) FILTER (WHERE run_at > {T})::integer AS scheduled
FROM jobs
WHERE status = 'queued'
GROUP BY queue
"""

# Running anywhere, runnable, or (with :retries) queued after an attempt: a retry waiting
# out its backoff; or waiting (jobs_waiting_idx) for a dependency, in any queue, that is
# one of those or waits itself. A waiting job whose dependencies are all in these queues
# adds nothing: its release commits with their ends, so one snapshot sees them pending or
# it queued.
HAS_PENDING = f"""
SELECT EXISTS (
    SELECT 1 FROM jobs
    WHERE queue = ANY(%(queues)s::text[])
      AND (status = 'running'
           OR (status = 'queued' AND (run_at <= {T} OR (%(retries)s AND attempts > 0))))
) OR EXISTS (
    SELECT 1 FROM jobs AS w
    JOIN job_dependencies AS d ON d.job_id = w.id AND d.ended IS NULL
    JOIN jobs AS e ON e.id = d.depends_on
    WHERE w.status = 'waiting' AND w.queue = ANY(%(queues)s::text[])
      AND (e.status IN ('running', 'waiting')
           OR (e.status = 'queued' AND (e.run_at <= {T} OR (%(retries)s AND e.attempts > 0))))
) AS pending
"""

OLDEST_RUNNABLE = """
SELECT id FROM jobs
WHERE status = 'queued' AND queue = %(queue)s
  AND run_at <= to_timestamp(%(run_at)s::float8) + interval '1 millisecond'
ORDER BY run_at, id
LIMIT 1
"""

# The dashboard's job list, a keyset page of the primary key in two steps. The floor:
# the id scan ids below before (an index-only walk; none when fewer are left). The
# page: the jobs in [floor, before) that match the filters, newest first, read along
# the index and stopped at limit, so a page reads at most scan jobs. Two variants of
# each: the first page has no bound (a generic plan cannot use an index for
# `before IS NULL OR id < before`); no floor is bound as '' (below every id).
_BY_INDEX = (
    "SELECT set_config('enable_seqscan', 'off', true),"
    " set_config('enable_bitmapscan', 'off', true)",
)  # one round trip; `true`: for this transaction only, as SET LOCAL
"""Both steps walk the primary key whatever the statistics say: right after a burst of
enqueues they may still call the table small, and a scan and sort of what is really a
million rows would be the full scan the window exists to avoid. For this read only."""
_FLOOR = "SELECT id FROM jobs {where} ORDER BY id DESC LIMIT 1 OFFSET %(scan_offset)s"
_PAGE = """
SELECT * FROM jobs
WHERE {where} id >= %(floor)s::text
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
  AND (%(ahead)s::boolean IS NULL OR claimed_ahead = %(ahead)s)
ORDER BY id DESC LIMIT %(limit)s
"""
BROWSE_FLOOR = (*_BY_INDEX, _FLOOR.format(where=""))
BROWSE_FLOOR_BEFORE = (*_BY_INDEX, _FLOOR.format(where="WHERE id < %(before)s::text"))
BROWSE_JOBS = _PAGE.format(where="")
BROWSE_JOBS_BEFORE = _PAGE.format(where="id < %(before)s::text AND")

# Jobs that ended, per minute: a range of the finished index (status, finished_at).
FINISHED_PER_MINUTE = """
SELECT (floor(extract(epoch from finished_at) / 60) * 60)::float8 AS minute, status,
       count(*)::integer AS n
FROM jobs
WHERE status IN ('succeeded', 'dead', 'cancelled')
  AND finished_at >= to_timestamp(%(since)s::float8)
GROUP BY 1, 2 ORDER BY 1, 2
"""

# Jobs by queue and status, and of the running ones how many are claimed ahead (`ahead`),
# in one statement so the two agree. The count stays an index-only walk of the status
# index; the running jobs claimed ahead are read apart (running rows are few).
COUNT_JOBS = """
SELECT c.queue, c.status, c.n, coalesce(a.n, 0) AS ahead
FROM (SELECT queue, status, count(*)::integer AS n FROM jobs GROUP BY queue, status) AS c
LEFT JOIN (SELECT queue, count(*)::integer AS n FROM jobs
           WHERE status = 'running' AND claimed_ahead GROUP BY queue) AS a
    ON c.status = 'running' AND a.queue = c.queue
ORDER BY c.queue, c.status
"""

CANCEL_QUEUED = f"""
UPDATE jobs SET status = 'cancelled', finished_at = {T}, updated_at = {T},
                error = 'cancelled before it ran', cancelled_by = %(by)s
WHERE id = %(job_id)s AND status IN ('queued', 'waiting')
RETURNING id, status, awaited, has_dependents
"""

# Someone waits for this job's end (`App.result`): its end will be announced.
MARK_AWAITED = """
UPDATE jobs SET awaited = true WHERE id = %(job_id)s AND NOT awaited
"""

# A result still to come: saved by the attempt that committed its job, or given up by a
# reaper once that attempt's lease ran out (GIVE_UP_RESULTS): either is final.
JOB_END = """
SELECT status, result::text AS result, error, dead_reason, result_pending
FROM jobs WHERE id = %(job_id)s
"""

REQUEST_CANCEL = f"""
UPDATE jobs SET cancel_requested = true, updated_at = {T}, cancelled_by = %(by)s
WHERE id = %(job_id)s AND status = 'running'
RETURNING worker_id
"""

JOB_STATUS = "SELECT status FROM jobs WHERE id = %(job_id)s FOR UPDATE"

JOB_ID = "SELECT id FROM jobs WHERE id = %(job_id)s"

# A prefix as a range of the primary key: `low <= id < high` is an index range scan; the
# `left` test keeps it exact under a collation other than "C".
JOBS_BY_PREFIX = """
SELECT id, task, status FROM jobs
WHERE id >= %(low)s AND id < %(high)s AND left(id, %(n)s) = %(low)s
ORDER BY id LIMIT %(limit)s
"""

# A tail (ids made together share their start; their last characters are random): one
# probe of job_tails' primary key on its last 8 characters (schema v19: the tails live
# apart from jobs, written once per job by triggers, so claims and finishes do not write
# them again), then each job by its id, the whole tail checked on what it finds. No
# ORDER BY: with LIMIT, a planner whose statistics lag would rather walk the primary
# key in order (every job id) than sort the one or two rows the probe finds.
JOBS_BY_SUFFIX = """
SELECT j.id, j.task, j.status FROM job_tails AS t JOIN jobs AS j ON j.id = t.job_id
WHERE t.tail = %(tail)s AND right(t.job_id, %(n)s) = %(suffix)s
LIMIT %(limit)s
"""

# A dead job whose unique key another live job holds stays dead (the key holds).
REPLAY_DEAD = f"""
UPDATE jobs
SET status = 'queued', attempts = 0, run_at = {T}, dead_reason = NULL, finished_at = NULL,
    worker_id = NULL, cancel_requested = false, updated_at = {T}
WHERE status = 'dead' AND (%(all)s OR id = ANY(%(ids)s::text[]))
  AND (unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM jobs AS live
      WHERE live.unique_key = jobs.unique_key AND live.status IN ('queued', 'running')))
RETURNING id, queue
"""

# Retries due now (heartq.testing's drain): only run_at moves; attempts, retry count and
# backoff stay. A job waiting out a retry is queued with an attempt counted (as HAS_PENDING).
RETRY_NOW = f"""
UPDATE jobs SET run_at = {T}, updated_at = {T}
WHERE status = 'queued' AND attempts > 0 AND run_at > {T}
  AND queue = ANY(%(queues)s::text[])
RETURNING id, queue
"""

# Task declarations (heartq.policy). `tasks` is a JSON array of TaskPolicy fields.
TASK_POLICIES = """
SELECT name, queue, priority, max_retries, retry_backoff, retry_backoff_max, timeout,
       heartbeat_timeout, extract(epoch from declared_at)::float8 AS declared_at, declared_by,
       parameters, rate_limit, rate_key, retry_rules::text AS retry_rules
FROM tasks WHERE %(all)s OR name = ANY(%(names)s::text[])
ORDER BY name
"""

DECLARE_TASKS = f"""
INSERT INTO tasks AS t (name, queue, priority, max_retries, retry_backoff, retry_backoff_max,
                        timeout, heartbeat_timeout, declared_at, declared_by, parameters,
                        rate_limit, rate_key, retry_rules)
SELECT x.name, x.queue, x.priority, x.max_retries, x.retry_backoff, x.retry_backoff_max,
       x.timeout, x.heartbeat_timeout, {T}, %(worker_id)s, x.parameters, x.rate_limit,
       x.rate_key, x.retry_rules
FROM json_to_recordset(%(tasks)s::json) AS x(
    name text, queue text, priority integer, max_retries integer, retry_backoff float8,
    retry_backoff_max float8, timeout float8, heartbeat_timeout float8, parameters json,
    rate_limit text, rate_key text, retry_rules json)
ON CONFLICT (name) DO UPDATE SET
    queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_retries = EXCLUDED.max_retries,
    retry_backoff = EXCLUDED.retry_backoff, retry_backoff_max = EXCLUDED.retry_backoff_max,
    timeout = EXCLUDED.timeout, heartbeat_timeout = EXCLUDED.heartbeat_timeout,
    declared_at = EXCLUDED.declared_at, declared_by = EXCLUDED.declared_by,
    parameters = EXCLUDED.parameters, rate_limit = EXCLUDED.rate_limit,
    rate_key = EXCLUDED.rate_key, retry_rules = EXCLUDED.retry_rules
"""

# Queued and waiting jobs of these tasks take the declaration for every option their caller
# did not choose (`chosen` bits, heartq.policy); rows already in line with it are left alone.
_DECLARED_QUEUE = "CASE WHEN j.chosen & %(queue_bit)s = 0 THEN t.queue ELSE j.queue END"
_DECLARED_PRIORITY = "CASE WHEN j.chosen & %(priority_bit)s = 0 THEN t.priority ELSE j.priority END"
_DECLARED_RETRIES = (
    "CASE WHEN j.chosen & %(retries_bit)s = 0 THEN t.max_retries ELSE j.max_retries END"
)
_DECLARED_BACKOFF = (
    "CASE WHEN j.chosen & %(backoff_bit)s = 0 THEN t.retry_backoff ELSE j.retry_backoff END"
)
_DECLARED_BACKOFF_MAX = (
    "CASE WHEN j.chosen & %(backoff_bit)s = 0 THEN t.retry_backoff_max ELSE j.retry_backoff_max END"
)
REROUTE_JOBS = f"""
UPDATE jobs AS j
SET queue = {_DECLARED_QUEUE}, priority = {_DECLARED_PRIORITY},
    max_retries = {_DECLARED_RETRIES}, retry_backoff = {_DECLARED_BACKOFF},
    retry_backoff_max = {_DECLARED_BACKOFF_MAX}, updated_at = {T}
FROM tasks AS t
WHERE t.name = ANY(%(names)s::text[]) AND j.task = t.name AND j.status IN ('queued', 'waiting')
  AND (%(all)s OR j.id = ANY(%(ids)s::text[]))
  AND (j.queue, j.priority, j.max_retries, j.retry_backoff, j.retry_backoff_max)
      IS DISTINCT FROM ({_DECLARED_QUEUE}, {_DECLARED_PRIORITY}, {_DECLARED_RETRIES},
                        {_DECLARED_BACKOFF}, {_DECLARED_BACKOFF_MAX})
RETURNING j.id, j.queue
"""

# The id migration 0009 made for this schema (the NATS transport's names).
DEPLOYMENT_ID = "SELECT id FROM deployment"

# -- only PostgreSQL -------------------------------------------------------------------

NOTIFY = "SELECT pg_notify(%(channel)s, %(queue)s)"

# Search paths on connections heartq does not own, or lends (store/postgres/borrowed.py):
# local to the transaction, so an error cannot leak them past it.
SEARCH_PATH = "SELECT current_setting('search_path') AS search_path"
SET_SEARCH_PATH = "SELECT set_config('search_path', %(search_path)s, true)"
DEFAULT_SEARCH_PATH = """
SELECT set_config('search_path', boot_val, true) FROM pg_settings WHERE name = 'search_path'
"""

NOTIFY_ENDED = "SELECT pg_notify(%(channel)s, id) FROM unnest(%(ids)s::text[]) AS id"

# A cancel requested: the worker running the job hears it at once (payload: its id).
NOTIFY_CANCEL = "SELECT pg_notify(%(channel)s, %(worker_id)s)"

# A liveness probe starts with the probe's time (T), the server's uptime (real clock: a
# restart frees every lock) and the probe lock, taken for the transaction.
PROBE_START = f"""
SELECT extract(epoch from {T})::float8 AS now,
       extract(epoch from now() - pg_postmaster_start_time())::float8 AS uptime,
       pg_try_advisory_xact_lock({PROBE_KEY}) AS alone
"""

# One query tries every active worker's liveness lock; the transaction's end releases
# the locks it took. A lock it can take belongs to a worker whose session is gone. Since
# when probes have found it free is kept in the worker's row (`lock_free_since`), not in
# the prober's memory: the grace spans the probes of every worker, so a suspicion
# survives its prober (killed, frozen, restarted) and the probe lock going to another.
# A lock found held again clears it. Rows a frozen session keeps locked are skipped.
# Returns each free worker with since when it has been free (this probe's time if new).
PROBE_LIVENESS = f"""
WITH free AS MATERIALIZED (
    SELECT id, lock_free_since FROM workers
    WHERE status = 'active' AND liveness_lock
      AND pg_try_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(id))
), held AS (
    UPDATE workers SET lock_free_since = NULL
    WHERE id IN (SELECT id FROM workers
                 WHERE lock_free_since IS NOT NULL AND id NOT IN (SELECT id FROM free)
                 FOR UPDATE SKIP LOCKED)
), marked AS (
    UPDATE workers SET lock_free_since = {T}
    WHERE id IN (SELECT w.id FROM workers AS w JOIN free ON free.id = w.id
                 WHERE free.lock_free_since IS NULL
                 FOR UPDATE OF w SKIP LOCKED)
)
SELECT id, extract(epoch from coalesce(lock_free_since, {T}))::float8 AS free_since FROM free
"""

# What the probes suspect: active workers found with a free lock, and since when.
LIVENESS_SUSPECTS = """
SELECT id, extract(epoch from lock_free_since)::float8 AS free_since FROM workers
WHERE status = 'active' AND lock_free_since IS NOT NULL
"""

# Right after a server start every lock is free: what was suspected is forgotten.
FORGET_SUSPECTS = """
UPDATE workers SET lock_free_since = NULL
WHERE id IN (SELECT id FROM workers WHERE lock_free_since IS NOT NULL FOR UPDATE SKIP LOCKED)
"""

# The same test for the given workers only, read only (operator commands); none while
# the server has been up for less than `quiet` seconds (a restart frees every lock).
LIVENESS_FREE = f"""
SELECT id FROM workers
WHERE status = 'active' AND id = ANY(%(ids)s::text[]) AND liveness_lock
  AND extract(epoch from now() - pg_postmaster_start_time()) >= %(quiet)s
  AND pg_try_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(id))
"""

LIVENESS_LOCK = f"SELECT pg_try_advisory_lock({LOCK_NAMESPACE}, hashtext(%(worker_id)s)) AS locked"

LIVENESS_UNLOCK = f"SELECT pg_advisory_unlock({LOCK_NAMESPACE}, hashtext(%(worker_id)s)) AS done"

PING = "SELECT 1"

# Behind a transaction-mode pooler, the first statement of every transaction: what a
# direct connection sets at its start (`-c search_path=... -c
# idle_in_transaction_session_timeout=...`), for this transaction only, since the next
# one may run on another server session (`pooler.py`).
TRANSACTION_SCOPE = (
    "SELECT set_config('search_path', %(schema)s, true),"
    " set_config('idle_in_transaction_session_timeout', %(idle)s, true)"
)

# What a new direct session shows of heartq's startup options (`-c search_path=... -c
# idle_in_transaction_session_timeout=...`): a pooler told to ignore them leaves the
# role's own (`refusals.options_dropped`).
STARTUP_OPTIONS_APPLIED = (
    "SELECT current_setting('search_path') AS search_path, setting AS idle_ms"
    " FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'"
)

MIGRATIONS_PRESENT = (
    "SELECT to_regclass(format('%%I.schema_migrations', %(schema)s::text)) IS NOT NULL AS present"
)

MIGRATION_START = f"SELECT pg_advisory_xact_lock({LOCK_NAMESPACE}, {MIGRATION_LOCK})"

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations
(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())
"""

APPLIED_VERSIONS = "SELECT version FROM schema_migrations"

RECORD_MIGRATION = "INSERT INTO schema_migrations (version) VALUES (%(version)s)"
