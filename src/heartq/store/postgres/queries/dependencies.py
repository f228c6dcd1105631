"""Jobs that wait for jobs (store/sql/dependencies.py): the jobs and edges an enqueue
writes, the settling of a job's dependents in the transaction that ends it, and what a
job's dependencies and dependents are."""

from __future__ import annotations

from heartq.store.postgres.queries.common import JOB_ID_ARRAY, JOB_ID_TYPE, T, _secs
from heartq.store.postgres.queries.ready_log import entry_of

# Jobs that take part in dependencies (store/sql/dependencies.py): those that wait for
# others (`status` 'waiting', `waiting_for` their number; 'blocked' with `holders`, the
# number of them blocked already) and those of the same batch that others wait for
# (`has_dependents`). Plain jobs keep INSERT_JOBS: they pay nothing.
INSERT_LINKED_JOBS = f"""
INSERT INTO job_documents (id, task, queue, args, priority, status, run_at, max_retries,
                  retry_backoff,
                  retry_backoff_max, chosen, created_at, updated_at, concurrency_key,
                  concurrency_limit, rate_key, rate_limit, rate_period, fair_key, fair_weight,
                  meta, has_dependents, waiting_for, holders, on_dependency_failure,
                  dependency_results, expires_at)
SELECT x.id, x.task, x.queue, x.args::json, x.priority, x.status,
       {T} + make_interval(secs => x.delay), x.max_retries, x.retry_backoff,
       x.retry_backoff_max, x.chosen, {T}, {T}, x.concurrency_key, x.concurrency_limit,
       x.rate_key, x.rate_limit, x.rate_period, x.fair_key, x.fair_weight, x.meta::jsonb,
       x.has_dependents,
       x.waiting_for, x.holders, x.on_dependency_failure, x.dependency_results,
       {T} + make_interval(secs => x.expires_in)
FROM json_to_recordset(%(jobs)s::json) AS x(
    id {JOB_ID_TYPE}, task text, queue text, args text, priority integer, delay float8,
    max_retries integer, retry_backoff float8, retry_backoff_max float8, chosen integer,
    concurrency_key text, concurrency_limit integer, rate_key text, rate_limit integer,
    rate_period float8, fair_key text, fair_weight float8, meta text, status text,
    has_dependents boolean, waiting_for integer,
    holders integer, on_dependency_failure text, dependency_results boolean,
    expires_in float8)
"""


def _status_of(id_: str) -> str:
    """The status of the job `id_` names, read by its key, as a scalar subquery (run per
    row, never merged into a join) or as a FROM item (`status`: its LIMIT keeps it from
    being merged, so one read serves every reference; as `(SELECT (...) AS status)` each
    reference read it again). The statements that update edges scan only the edges
    (`depends_on = ANY(...)`, the one search their index allows) and read each edge's jobs
    this way: joined to the jobs, the edges were walked whole once the census analyzed
    the table small."""
    return f"(SELECT status FROM jobs WHERE id = {id_} LIMIT 1)"


# The dependencies an enqueue names, locked in the order every writer of a job takes its
# rows (the entry of the ready log, the lease, the document), each kind in id order, four
# statements in the enqueue's transaction: the entries of those queued in the ready log
# and the leases of those running, share-locked; then each document locked and marked
# `has_dependents`; then each one's status, read in a snapshot taken after the locks. A
# claim deletes the entry (a claim in flight is waited for; one after this skips the
# entry until this commits), a FINISH deletes the lease and then writes the document or
# share-locks it to append an end row. So either this locks first (the FINISH waits and
# sees the mark on the document's newest version) or the claim and the FINISH do (this
# waits, and reads the job running or ended, on its document or its end row). In a
# caller's REPEATABLE READ transaction, an entry or a lease deleted by a transaction that
# committed after its snapshot fails the lock with a serialization error (the caller
# retries), as a document written after it does: a status read in that snapshot would
# call an ended job queued or running and leave its dependent waiting. A row already
# marked is only locked (no new row version). A job not found is missing from the answer.
LOCK_DEPENDENCIES = (
    f"""
SELECT r.job_id FROM job_documents AS d
CROSS JOIN LATERAL (
    SELECT r.job_id FROM ready AS r WHERE {entry_of("r", "d")} FOR KEY SHARE OF r
) AS r
WHERE d.id = ANY(%(ids)s::{JOB_ID_ARRAY}) AND d.ready_xid IS NOT NULL
ORDER BY d.id
""",
    f"""
SELECT job_id FROM leases WHERE job_id = ANY(%(ids)s::{JOB_ID_ARRAY})
ORDER BY job_id
FOR KEY SHARE
""",
    f"""
WITH locked AS (
    SELECT id, has_dependents FROM job_documents
    WHERE id = ANY(%(ids)s::{JOB_ID_ARRAY})
    ORDER BY id
    FOR UPDATE
), marked AS (
    UPDATE job_documents SET has_dependents = true
    WHERE id IN (SELECT id FROM locked WHERE NOT has_dependents)
)
SELECT id FROM locked
""",
    # Each job read by its key: with `id = ANY(...)` the view's leases and end rows,
    # analyzed empty, were merged whole (the census). A job not found has no row.
    f"""
SELECT x.id, j.status FROM unnest(%(ids)s::{JOB_ID_ARRAY}) AS x(id)
CROSS JOIN LATERAL {_status_of("x.id")} AS j
""",
)

# The dependencies an enqueue names that are not jobs: those in the trace of pruned
# successes (the pruner writes it as it deletes them) count as succeeded; the others are
# not found.
PRUNED_SUCCESSES = f"SELECT id FROM pruned_successes WHERE id = ANY(%(ids)s::{JOB_ID_ARRAY})"

# Each edge: {job_id, depends_on, position, ended, result_as, holds}; `ended` is set for a
# dependency that succeeded and was pruned (counted at once), `result_as` for a job that
# takes results (how this dependency's result reaches it: store/documents.py), `holds`
# for a dependency blocked already.
INSERT_DEPENDENCIES = f"""
INSERT INTO job_dependencies (job_id, depends_on, position, ended, result_as, holds)
SELECT x.job_id, x.depends_on, x.position, x.ended, x.result_as, x.holds
FROM json_to_recordset(%(edges)s::json) AS x(
    job_id {JOB_ID_TYPE}, depends_on {JOB_ID_TYPE}, position integer, ended text, result_as text,
    holds boolean)
"""


def _locked(ids: str) -> str:
    """The jobs whose ids `ids` selects, locked in id order (as FINISH locks its rows): two
    statements that change common jobs wait for each other instead of deadlocking."""
    return (
        f"SELECT j.id FROM job_documents AS j WHERE j.id = ANY(ARRAY({ids}))"
        " ORDER BY j.id FOR UPDATE OF j"
    )


def _edges_of(condition: str) -> str:
    """The edges (`d`: job_id, depends_on, holds) of the dependencies `ids` that meet
    `condition`, for a FROM list: each dependency's edges searched by its key
    (`x.id`). Joined plainly (or with `id = ANY(...)`), a GROUP BY over them walked the
    whole primary key, in its order, once the table was analyzed small (the census);
    `OFFSET 0` keeps the search from being merged back into such a join."""
    return f"""(SELECT DISTINCT unnest(%(ids)s::{JOB_ID_ARRAY})) AS x(id)
    CROSS JOIN LATERAL (
        SELECT job_id, depends_on, holds FROM job_dependencies
        WHERE depends_on = x.id AND {condition} OFFSET 0
    ) AS d"""


# The waiting (or blocked) dependents of jobs that ended (`ids`), in the ending
# transaction, in a statement of its own: its snapshot is taken after the ended rows were
# locked, so it sees every edge committed before (LOCK_DEPENDENCIES waits for those
# locks). Each edge not yet counted whose dependency has ended counts once; a job whose
# last dependency ended, none holding it, is queued (run_at: now, or its own later eta).
# A dependency that ended dead blocks a job that blocks on failure
# (`on_dependency_failure` 'block': `holders` + 1, the edge marked `holds` by
# END_DEPENDENCY_EDGES) and cancels one that cancels; a cancelled one cancels both; a job
# that runs anyway counts either as satisfied. An edge that held the job (its dependency
# was blocked, and is now cancelled) holds it no more (`unheld`). The dependents are
# locked in id order first (as FINISH locks its rows), so two settlings of jobs with
# common dependents wait for each other instead of deadlocking; a row another transaction
# is settling is waited for, then re-read (READ COMMITTED): two dependencies ending at
# once each count once, and `holders` moves by differences for the same reason.
# END_DEPENDENCY_EDGES then marks the edges.
_BLOCKS = "j.on_dependency_failure = 'block'"

_WHY = f"CASE WHEN {_BLOCKS} THEN c.cancelled ELSE c.failed END"

_FAILED = f"{_WHY} IS NOT NULL AND j.on_dependency_failure IS DISTINCT FROM 'run'"

_HOLDERS = f"j.holders - c.unheld + CASE WHEN {_BLOCKS} THEN c.dead ELSE 0 END"

_SATISFIED = f"NOT ({_FAILED}) AND j.waiting_for - c.n <= 0 AND {_HOLDERS} <= 0"

SETTLE_DEPENDENTS = f"""
WITH c AS (
    SELECT d.job_id, count(*)::integer AS n,
           count(*) FILTER (WHERE e.status = 'dead')::integer AS dead,
           count(*) FILTER (WHERE d.holds)::integer AS unheld,
           min(CASE WHEN e.status <> 'succeeded' THEN d.depends_on || ' ended ' || e.status END)
               AS failed,
           min(CASE WHEN e.status = 'cancelled' THEN d.depends_on || ' ended cancelled' END)
               AS cancelled
    FROM {_edges_of("ended IS NULL")}
    CROSS JOIN LATERAL {_status_of("x.id")} AS e
    WHERE e.status IN ('succeeded', 'dead', 'cancelled')
    GROUP BY d.job_id
), locked AS ({_locked("SELECT job_id FROM c")})
UPDATE job_documents AS j
SET waiting_for = greatest(j.waiting_for - c.n, 0),
    holders = {_HOLDERS},
    status = CASE WHEN {_FAILED} THEN 'cancelled'
                  WHEN {_SATISFIED} THEN 'queued'
                  WHEN {_HOLDERS} > 0 THEN 'blocked' ELSE 'waiting' END,
    run_at = CASE WHEN {_SATISFIED} THEN greatest(j.run_at, {T}) ELSE j.run_at END,
    finished_at = CASE WHEN {_FAILED} THEN {T} END,
    error = CASE WHEN {_FAILED} THEN 'dependency_failed: job ' || {_WHY} ELSE j.error END,
    ready_xid = NULL,
    updated_at = {T}
FROM c JOIN locked ON locked.id = c.job_id
WHERE j.id = c.job_id AND j.status IN ('waiting', 'blocked')
RETURNING j.id, j.queue, j.status, j.awaited, j.has_dependents
"""

# An edge counted holds its job when its dependency ended dead and the job, blocking on
# failure, is blocked by it (SETTLE_DEPENDENTS counted it in `holders`, under the lock
# this transaction holds on the job).
END_DEPENDENCY_EDGES = f"""
UPDATE job_dependencies AS d
SET (ended, holds) = (
    SELECT e.status,
           coalesce(e.status = 'dead' AND j.status = 'blocked'
                    AND j.on_dependency_failure = 'block', false)
    FROM {_status_of("d.depends_on")} AS e
    LEFT JOIN LATERAL (
        SELECT status, on_dependency_failure FROM jobs WHERE id = d.job_id LIMIT 1
    ) AS j ON true
)
WHERE d.depends_on = ANY(%(ids)s::{JOB_ID_ARRAY}) AND d.ended IS NULL
  AND {_status_of("d.depends_on")} IN ('succeeded', 'dead', 'cancelled')
"""

# The edges of not-ended dependencies (`ids`, whose status this transaction changed, under
# their locks) made to say whether each holds its job: it does while the dependency is
# blocked. Each edge that changed, with its new `holds`: its job's `holders` move by one
# (SHIFT_HOLDERS).
SYNC_HOLDS = f"""
UPDATE job_dependencies AS d SET holds = NOT d.holds
WHERE d.depends_on = ANY(%(ids)s::{JOB_ID_ARRAY}) AND d.ended IS NULL
  AND d.holds <> ({_status_of("d.depends_on")} = 'blocked')
RETURNING d.job_id, d.holds
"""

# Waiting and blocked jobs whose `holders` (and `waiting_for`) move: {id, holders,
# waiting}, each a difference, applied to the row as it stands once locked (in id
# order). Blocked while any dependency holds it, else waiting.
SHIFT_HOLDERS = f"""
WITH s AS (
    SELECT * FROM json_to_recordset(%(shifts)s::json) AS x(id {JOB_ID_TYPE}, holders integer,
                                                            waiting integer)
), locked AS ({_locked("SELECT id FROM s")})
UPDATE job_documents AS j
SET holders = j.holders + s.holders, waiting_for = j.waiting_for + s.waiting,
    status = CASE WHEN j.holders + s.holders > 0 THEN 'blocked' ELSE 'waiting' END,
    updated_at = {T}
FROM s JOIN locked ON locked.id = s.id
WHERE j.id = s.id AND j.status IN ('waiting', 'blocked')
RETURNING j.id, j.queue, j.status, j.awaited, j.has_dependents
"""

# A dead dependency replayed (`ids`, queued again): the edges by which it held its
# blocked dependents are not counted any more (it will end again); each such job waits
# for it once more (`waiting_for` + 1, `holders` - 1: SHIFT_HOLDERS).
REOPEN_HELD_EDGES = f"""
UPDATE job_dependencies AS d SET ended = NULL, holds = false
WHERE d.depends_on = ANY(%(ids)s::{JOB_ID_ARRAY}) AND d.ended = 'dead' AND d.holds
  AND {_status_of("d.job_id")} = 'blocked'
RETURNING d.job_id
"""

# The blocked jobs that dead jobs (`ids`: purged, or dead past the blocked retention) hold
# by their own edge, cancelled: they could only be unblocked by a replay that will not
# come. Their dependents are settled from them as from any cancel.
CANCEL_HELD = f"""
WITH h AS (
    SELECT DISTINCT ON (d.job_id) d.job_id, d.depends_on AS holder
    FROM {_edges_of("ended = 'dead' AND holds")}
    ORDER BY d.job_id, d.depends_on
), locked AS ({_locked("SELECT job_id FROM h")})
UPDATE job_documents AS j
SET status = 'cancelled', finished_at = {T}, updated_at = {T},
    error = 'dependency_failed: job ' || h.holder || ' ended dead and ' || %(why)s
FROM h JOIN locked ON locked.id = h.job_id
WHERE j.id = h.job_id AND j.status = 'blocked'
RETURNING j.id, j.status, j.awaited, j.has_dependents
"""

# The dead jobs that hold blocked jobs and died before the blocked retention, locked (a
# replay of one waits, or is waited for and seen).
EXPIRED_HOLDERS = f"""
SELECT id FROM job_documents
WHERE status = 'dead' AND finished_at < {T} - {_secs("retention")}
  AND has_dependents
  AND EXISTS (SELECT 1 FROM job_dependencies AS d WHERE d.depends_on = job_documents.id
              AND d.ended = 'dead' AND d.holds)
LIMIT %(limit)s
FOR UPDATE
"""

# The dead job at the root of what blocks a job (`job_id`, when it is blocked): up its
# edges that hold, to a dead job (the least id, when several hold it).
HOLDER = """
WITH RECURSIVE up(id) AS (
    SELECT id FROM jobs WHERE id = %(job_id)s AND status = 'blocked'
    UNION
    SELECT d.depends_on FROM up JOIN job_dependencies AS d ON d.job_id = up.id
    WHERE d.holds
)
SELECT e.id, e.task, e.error, e.dead_reason
FROM up JOIN jobs AS e ON e.id = up.id
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
SELECT d.depends_on AS id, e.status, e.result::text AS result,
       coalesce(e.result_pending, false) AS pending, d.result_as IS NOT DISTINCT FROM 'value'
           AS as_value, e.result_lost AS lost, d.ended
FROM job_dependencies AS d LEFT JOIN jobs AS e ON e.id = d.depends_on
WHERE d.job_id = %(job_id)s AND d.result_as IS DISTINCT FROM 'none'
ORDER BY d.position
"""

# A job's dependencies (in order) and its dependents, for `get_job`.
GET_DEPENDENCIES = """
SELECT d.depends_on AS id, e.task, e.status, d.ended, d.holds
FROM job_dependencies AS d LEFT JOIN jobs AS e ON e.id = d.depends_on
WHERE d.job_id = %(job_id)s
ORDER BY d.position
"""

GET_DEPENDENTS = """
SELECT d.job_id AS id, e.task, e.status, d.ended, d.holds
FROM job_dependencies AS d LEFT JOIN jobs AS e ON e.id = d.job_id
WHERE d.depends_on = %(job_id)s
ORDER BY d.job_id
LIMIT %(limit)s
"""
