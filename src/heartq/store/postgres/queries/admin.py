"""An operator's writes: cancel, replay, retry now, a later attempt first (a test's);
and what is pruned and purged (old workers, old jobs with their executions and edges)."""

from __future__ import annotations

from heartq.store.postgres.queries.common import JOB_ID_ARRAY, LANE_NAMESPACE, T, _secs, lane_key
from heartq.store.postgres.queries.ready_log import HAS_WORK, LATEST_MARK, entry_of

# The jobs table's space given back for reuse, between autovacuum's runs (at most one a
# minute per database: its naptime). A job's row is written three times (enqueue, claim,
# finish, neither update heap-only), and without a vacuum the free-space map never learns
# of the two dead versions, so new rows extend the table instead of filling them:
# measured 648 -> 600 bytes a finished job and 34 -> 21 % free in a clean run (100 jobs/s,
# BENCHMARKS.md, "Storage a finished job"). Light by its options: no index pass
# (INDEX_CLEANUP OFF: the heap's dead versions become line pointers, the indexes are left
# to autovacuum), no truncation (which would take an exclusive lock), and never a wait
# (SKIP_LOCKED: a vacuum under way, autovacuum's or another worker's, means nothing to do
# now). A role that does not own the table gets a warning from PostgreSQL and no vacuum.
VACUUM_JOBS = "VACUUM (SKIP_LOCKED, INDEX_CLEANUP OFF, TRUNCATE OFF) job_documents"

# The marks of a lane's frontier a further one (or an equal one made later) supersedes,
# a minute after they were made (store/sql/admin.py `prune`): a claim reads only its
# lane's furthest mark, and one made by a claim still in flight is never past a minute.
# The further one is looked for by a probe of the marks' index per mark (`OFFSET 0`
# keeps the look a subquery: turned into a join, it read the whole index per mark). The
# rows of where the turns stand go the same way: a claim reads only its tier's newest.
PRUNE_CLAIM_MARKS = f"""
WITH turns AS (
    DELETE FROM claim_turns AS c
    WHERE c.made_at < {T} - interval '1 minute'
      AND EXISTS (
          SELECT 1 FROM claim_turns AS n
          WHERE n.queue = c.queue AND n.priority = c.priority AND n.made_at > c.made_at
          OFFSET 0)
)
DELETE FROM claim_marks AS m
WHERE m.made_at < {T} - interval '1 minute'
  AND EXISTS (
      SELECT 1 FROM claim_marks AS n
      WHERE n.queue = m.queue AND n.priority = m.priority AND n.fair_key = m.fair_key
        AND (n.frontier_xid, n.frontier_id, n.made_at)
            > (m.frontier_xid, m.frontier_id, m.made_at)
      OFFSET 0)
"""

# The lanes that emptied (store/sql/admin.py `vacuum_jobs`, `prune`), in two statements of
# one transaction. First the lanes no claim took from for `idle` seconds (their furthest
# mark older, or none), each kept only if its lane lock could be taken exclusive: none
# while a transaction that entered the lane runs (every enqueue holds it shared until it
# commits), and none can enter it until this one commits.
IDLE_LANES = f"""
WITH snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), idle AS MATERIALIZED (
    SELECT l.queue, l.priority, l.fair_key
    FROM lanes AS l CROSS JOIN LATERAL ({LATEST_MARK}) AS m
    WHERE m.made_at < {T} - make_interval(secs => %(idle)s::float8)
)
SELECT queue, priority, fair_key FROM idle
WHERE pg_try_advisory_xact_lock({LANE_NAMESPACE}, {lane_key("queue", "priority", "fair_key")})
"""

# Then, with a snapshot taken after the locks (it sees every enqueue into these lanes
# committed, and none can commit during it), those that have no work deleted. Their
# marks stay: an enqueue that makes a lane again finds its furthest mark, whose pending
# transactions a claim still probes.
DELETE_EMPTY_LANES = f"""
WITH snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s
), empty AS MATERIALIZED (
    SELECT l.queue, l.priority, l.fair_key
    FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
        AS l(queue, priority, fair_key)
    CROSS JOIN LATERAL ({LATEST_MARK}) AS m
    WHERE NOT {HAS_WORK}
)
DELETE FROM lanes AS l USING empty AS e
WHERE l.queue = e.queue AND l.priority = e.priority AND l.fair_key = e.fair_key
"""

# Whether a vacuum of the jobs table is due: not if it was vacuumed (by a worker or by
# autovacuum) within `since` seconds, since every worker runs the vacuum service and one
# vacuum an interval is enough for the database, whatever the size of the fleet; and
# never for a role that may not vacuum it (PostgreSQL's rule: the table's owner or the
# database's, with their privileges), which would get a warning every interval.
VACUUM_DUE = """
SELECT (pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE'))
       AND NOT coalesce(greatest(s.last_vacuum, s.last_autovacuum)
                        > now() - make_interval(secs => %(since)s::float8), false) AS due
FROM pg_class AS c
JOIN pg_stat_user_tables AS s ON s.relid = c.oid
JOIN pg_database AS d ON d.datname = current_database()
WHERE c.oid = 'job_documents'::regclass
"""

# A worker is kept while an attempt of it runs (its lease covers it until the lease reclaimer walks
# it: without its row, an attempt left attached would be covered by nobody, never reclaimed).
PRUNE_WORKERS = f"""
DELETE FROM workers AS w
WHERE w.status IN ('inactive', 'stopped')
  AND coalesce(w.stopped_at, w.last_heartbeat_at) < {T} - {_secs("retention")}
  AND NOT EXISTS (SELECT 1 FROM leases AS l WHERE l.worker_id = w.id)
"""

# Successes and cancels past the retention: those ended on their documents, and those
# ended on a row of their own (`job_ends`, read by when they ended).
SELECT_PRUNABLE_JOBS = f"""
(SELECT id FROM job_documents
 WHERE status IN ('succeeded', 'cancelled') AND finished_at < {T} - {_secs("retention")}
 LIMIT %(limit)s)
UNION ALL
(SELECT job_id FROM job_ends
 WHERE finished_at < {T} - {_secs("retention")} AND status IN ('succeeded', 'cancelled')
 LIMIT %(limit)s)
LIMIT %(limit)s
"""

# Locked: a replay of one waits for the purge, or the purge for it (then it is not dead).
SELECT_PURGEABLE_DEAD = f"""
SELECT id FROM job_documents
WHERE status = 'dead'
  AND (%(older_than)s::float8 IS NULL OR finished_at < {T} - {_secs("older_than")})
FOR UPDATE
"""

DELETE_EXECUTIONS_OF = f"DELETE FROM ended_executions WHERE job_id = ANY(%(ids)s::{JOB_ID_ARRAY})"

# A deleted job's own edges (what it waited for); the edges of its dependents stay with
# them, and show the dependency gone.
DELETE_DEPENDENCIES_OF = f"DELETE FROM job_dependencies WHERE job_id = ANY(%(ids)s::{JOB_ID_ARRAY})"

# A job's end row goes with its document.
DELETE_JOBS = f"""
WITH ends AS (DELETE FROM job_ends WHERE job_id = ANY(%(ids)s::{JOB_ID_ARRAY}))
DELETE FROM job_documents WHERE id = ANY(%(ids)s::{JOB_ID_ARRAY})
"""

# The trace of pruned successes (migration 0021): the ids of the succeeded jobs a prune
# is about to delete (ended on their documents or on end rows, each read by its key), so
# a job enqueued later may still depend on them (store/sql/dependencies.py). An id pruned
# again (a store's test reuses ids) stays once.
RECORD_PRUNED_SUCCESSES = f"""
INSERT INTO pruned_successes (id)
SELECT id FROM job_documents WHERE id = ANY(%(ids)s::{JOB_ID_ARRAY}) AND status = 'succeeded'
UNION ALL
SELECT job_id FROM job_ends WHERE job_id = ANY(%(ids)s::{JOB_ID_ARRAY}) AND status = 'succeeded'
ON CONFLICT DO NOTHING
"""

# Forgetting the trace's ids made before `before` (an id that sorts first: a job id's
# leading digits are its creation time), a range of its primary key, at most `limit`.
FORGET_PRUNED_SUCCESSES = """
DELETE FROM pruned_successes
WHERE id IN (SELECT id FROM pruned_successes WHERE id < %(before)s ORDER BY id
             LIMIT %(limit)s)
"""

def _at_rest(job_id: str) -> str:
    """The job whose id `job_id` binds is at rest, as its document says: no attempt runs
    it (a lease) and it did not end on a row of its own (an end row, schema v41)."""
    return f"""NOT EXISTS (SELECT 1 FROM leases WHERE job_id = {job_id})
  AND NOT EXISTS (SELECT 1 FROM job_ends WHERE job_id = {job_id})"""


# A job of the ready log leaves it: its entry is deleted (JOB_STATUS locked it).
CANCEL_QUEUED = f"""
WITH entry AS (
    DELETE FROM ready AS r USING job_documents AS d
    WHERE d.id = %(job_id)s AND {entry_of("r", "d")}
)
UPDATE job_documents SET status = 'cancelled', finished_at = {T}, updated_at = {T},
                error = 'cancelled before it ran', cancelled_by = %(by)s, ready_xid = NULL
WHERE id = %(job_id)s AND status IN ('queued', 'waiting', 'blocked')
  AND {_at_rest("%(job_id)s")}
RETURNING id, status, awaited, has_dependents
"""

REQUEST_CANCEL = f"""
UPDATE job_documents AS j SET cancel_requested = true, updated_at = {T}, cancelled_by = %(by)s
FROM leases AS l
WHERE j.id = %(job_id)s AND l.job_id = j.id
RETURNING l.worker_id
"""

# A job's status for a cancel, with what decides it locked in the order every writer
# takes them (docs/design-notes/hot-path.md, stage 1): its entry of the ready log (a
# claim in flight holds it: this waits, then finds it gone), its lease (an end in
# flight holds it), then the document; the status then read from `jobs` (the one place
# that says which of the document, the lease and the end row holds it) in a statement
# of its own, whose snapshot sees what those locks waited for. Locked, the answer holds
# for the transaction: a queued job of the log cannot be claimed, a running one cannot
# end. A due job claimed between the lease's lock and the document's is seen running
# (its document says so).
JOB_STATUS = (
    f"""SELECT 1 FROM ready AS r JOIN job_documents AS d ON {entry_of("r", "d")}
       WHERE d.id = %(job_id)s FOR UPDATE OF r""",
    "SELECT 1 FROM leases WHERE job_id = %(job_id)s FOR UPDATE",
    "SELECT 1 FROM job_documents WHERE id = %(job_id)s FOR UPDATE",
    "SELECT status FROM jobs WHERE id = %(job_id)s",
)

# A replayed job starts over: attempts and snoozes from 0 (its history kept). A dead job
# whose unique key another live job holds stays dead (the key holds). Those
# with dependents unblock the jobs they blocked (store/sql/dependencies.py `unblock`).
# A replay is an operator's ask to run the job now: its expiry (`expires=`) is dropped.
REPLAY_DEAD = f"""
UPDATE job_documents
SET status = 'queued', attempts = 0, snoozes = 0, run_at = {T}, dead_reason = NULL,
    finished_at = NULL, worker_id = NULL, cancel_requested = false, ready_xid = NULL,
    expires_at = NULL, updated_at = {T}
WHERE status = 'dead' AND (%(all)s OR id = ANY(%(ids)s::{JOB_ID_ARRAY}))
  AND (unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM job_documents AS live
      WHERE live.unique_key = job_documents.unique_key AND live.status IN ('queued', 'running')))
RETURNING id, queue, has_dependents
"""

# Retries and snoozes due now (heartq.testing's drain): only run_at moves; attempts,
# snoozes, retry count and backoff stay. A job waiting out a retry is queued with an attempt
# counted, one waiting out a snooze with a snooze counted (as HAS_PENDING).
RETRY_NOW = f"""
UPDATE job_documents SET run_at = {T}, updated_at = {T}
WHERE status = 'queued' AND (attempts > 0 OR snoozes > 0) AND run_at > {T}
  AND queue = ANY(%(queues)s::text[])
RETURNING id, queue
"""

# A later attempt first (heartq.testing.run_attempt): a queued job never claimed counts
# its earlier attempts and executions as made, so its next claim is attempt %(attempt)s.
START_AT_ATTEMPT = f"""
UPDATE job_documents
SET attempts = %(attempt)s - 1, execution_id = %(attempt)s - 1, updated_at = {T}
WHERE id = %(id)s AND status = 'queued' AND execution_id = 0
  AND {_at_rest("%(id)s")}
RETURNING id
"""
