"""The claim of jobs with a concurrency or a rate key (store/sql/keyed.py): whether one
waits (`KEYED_QUEUED`), the concurrency keys with room, locked (`CLAIM_KEYS`), and their
jobs claimed (`CLAIM_KEYED`); the open rate keys, locked (`CLAIM_RATE_KEYS`), and their
jobs claimed (`CLAIM_RATED`); how long a rate limit holds its jobs back (`RATE_WAIT`).
Each key's jobs are read from its own range of its index, a priority at a time
(`claim._due_in_order`): a claim's cost follows the keys, not their backlogs."""

from __future__ import annotations

from heartq.store.postgres.queries.claim import _claimed, _due_in_order
from heartq.store.postgres.queries.common import (
    CONCURRENCY_NAMESPACE,
    RATE_NAMESPACE,
    RATE_STARTS,
    T_STATEMENT,
)

# Whether the keyed claims below could find anything (store/sql/ `claim`, only when CLAIM
# filled fewer than `limit`): a queued job with a concurrency key or with a rate key in
# these queues. One statement instead of the keyed claims' transaction of four round
# trips, on the queues (most) that have no keyed job; the first entry of each partial
# index, never a walk: a keyed job that is not due yet answers yes and the claims below
# look closer.
KEYED_QUEUED = """
SELECT EXISTS (SELECT 1 FROM job_documents
               WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL
                 AND queue = ANY(%(queues)s::text[]))
    OR EXISTS (SELECT 1 FROM job_documents
               WHERE status = 'queued' AND rate_key IS NOT NULL
                 AND queue = ANY(%(queues)s::text[]))
       AS queued,
       false AS fair
"""

# What jobs_keyed_claim_idx holds (migration 0045: by queue, key, then claim order).
_KEYED = """status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL"""

# The concurrency keys of the claim's queues with each one's first job, as a recursive
# CTE `keys` (queue, key, priority, run_at, id): each queue's first entry of
# jobs_keyed_claim_idx, then the first entry of each next key, one probe each (a skip
# scan: a key's jobs are never read to find the next key). A key's first entry is its
# best job when it is due (the index is in claim order within a key).
_CONCURRENCY_KEYS = f"""keys AS (
    SELECT q.name AS queue, k.* FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL (
        SELECT concurrency_key AS key, priority, run_at, id FROM job_documents
        WHERE {_KEYED} AND queue = q.name
        ORDER BY concurrency_key, priority DESC, run_at, id
        LIMIT 1
    ) AS k
    UNION ALL
    SELECT keys.queue, n.* FROM keys CROSS JOIN LATERAL (
        SELECT concurrency_key AS key, priority, run_at, id FROM job_documents
        WHERE {_KEYED} AND queue = keys.queue AND concurrency_key > keys.key
        ORDER BY concurrency_key, priority DESC, run_at, id
        LIMIT 1
    ) AS n
)"""


def _key_jobs(queue: str, key: str, most: str) -> str:
    """The runnable jobs of concurrency key `key` in queue `queue`, best first, at most
    `most`: the key's range of jobs_keyed_claim_idx, a priority at a time."""
    return _due_in_order(_KEYED, f"queue = {queue} AND concurrency_key = {key}",
                         "id, priority, run_at, concurrency_limit", most)  # fmt: skip


def _running(key: str) -> str:
    """How many jobs of concurrency key `key` run (by jobs_key_running_idx)."""
    return f"""(SELECT count(*) FROM job_documents AS r
         WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
           AND r.concurrency_key = {key})"""


# Jobs with a concurrency key and no rate key (store/sql/ `claim`, only when CLAIM filled
# fewer than `limit`), in two statements. First the keys: each key's best runnable job
# (`best`: its first entry, found by the skip scan of `_CONCURRENCY_KEYS`, when that is
# due; else a walk of the key's range for its first due job; in several queues, the best
# of them), in claim order; then, in that order, those whose running jobs are below their
# best job's limit (its limit is the key's, for the look, as a rate key's best job's is),
# at most `limit` of them (`OFFSET 0` keeps the test of a key's room from being pushed
# below the sort: only the keys the claim reaches are counted), each kept only if its
# transaction lock could be taken (a key another claimer holds is skipped, as SKIP LOCKED
# skips a row). The candidates are fixed first (MATERIALIZED), so no other key's lock is
# tried. A claim's cost follows the number of keys (a probe each), not their backlogs.
CLAIM_KEYS = f"""
WITH RECURSIVE {_CONCURRENCY_KEYS}, best AS MATERIALIZED (
    SELECT DISTINCT ON (b.key) b.key, b.priority, b.run_at, b.id FROM (
        SELECT key, priority, run_at, id FROM keys WHERE run_at <= {T_STATEMENT}
        UNION ALL
        SELECT keys.key, w.priority, w.run_at, w.id
        FROM keys CROSS JOIN LATERAL ({_key_jobs("keys.queue", "keys.key", "1")}
        ) AS w
        WHERE keys.run_at > {T_STATEMENT}
    ) AS b
    ORDER BY b.key, b.priority DESC, b.run_at, b.id
), candidates AS MATERIALIZED (
    SELECT o.key FROM (
        SELECT key, id FROM best ORDER BY priority DESC, run_at, key OFFSET 0
    ) AS o
    WHERE (SELECT j.concurrency_limit FROM job_documents AS j WHERE j.id = o.id)
          > {_running("o.key")}
    LIMIT %(limit)s
)
SELECT key FROM candidates
WHERE pg_try_advisory_xact_lock({CONCURRENCY_NAMESPACE}, hashtext(key))
"""

# Then, in a statement of its own (READ COMMITTED: its snapshot is taken after the locks,
# so it sees every claim of these keys committed before, and none can commit during it),
# each locked key's runnable jobs in claim order (at most `limit` a queue: a walk of its
# range), the first `concurrency_limit - running` of them (each job's own limit); the
# best `limit` of those, claimed as CLAIM does.
CLAIM_KEYED = f"""
WITH keys AS (
    SELECT k.key, {_running("k.key")} AS running
    FROM unnest(%(keys)s::text[]) AS k(key)
), ranked AS (
    SELECT c.id, c.priority, c.run_at, c.concurrency_limit, keys.running,
           row_number() OVER (PARTITION BY keys.key
                              ORDER BY c.priority DESC, c.run_at, c.id) AS rank
    FROM keys CROSS JOIN (SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q
    CROSS JOIN LATERAL ({_key_jobs("q.name", "keys.key", "%(limit)s")}
    ) AS c
), picked AS (
    SELECT j.id FROM job_documents AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM ranked WHERE rank <= concurrency_limit - running))
      AND j.status = 'queued'
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {_claimed(logged=False)}"""

# What jobs_rated_claim_idx holds (migration 0046: by queue, key, then claim order).
_RATED = """status = 'queued' AND rate_key IS NOT NULL"""

# The claim's queues, each once, as a FROM item `q` (`q.name`).
_QUEUES = "(SELECT DISTINCT unnest(%(queues)s::text[]) AS name) AS q"


def _rate_key_jobs(queue: str, key: str, columns: str, most: str) -> str:
    """The runnable jobs of rate key `key` in queue `queue` (`columns` of them), best
    first, at most `most`: the key's range of jobs_rated_claim_idx, a priority at a time
    (no claim takes more than `limit`)."""
    return _due_in_order(_RATED, f"queue = {queue} AND rate_key = {key}", columns, most)


# A rate key's best job's columns, as the look for open keys reads them.
_LOOK = "priority, run_at, rate_limit, rate_period"

# A rate-limited job's columns, as the claim reads them.
_CANDIDATE = """id, priority, run_at, rate_key, rate_limit, rate_period, concurrency_key,
               concurrency_limit"""

# The rate-limited jobs a claim looks at, as CTEs: `keys`, the rate keys of the claim's
# queues (each queue's first, then each next one: one probe each of jobs_rated_claim_idx,
# a skip scan); `best`, each key's best runnable job of these queues (its limit is the
# key's, for the look), each key's walk stopping at the first; `open`, the best `limit`
# of the keys whose starts within the period (`used`: its executions, ended or running,
# in every queue) looked below their limit. A claim's cost follows the number of keys of
# its queues, not their backlogs, nor what other queues hold.
# A key's starts are read from `RATE_STARTS` (common.py): ended attempts by
# executions_rate_idx, running ones from their job rows by jobs_running_rate_idx (the
# claim writes no execution row), so an attempt counts from its claim on.
_RATE_KEYS = f"""keys AS (
    SELECT q.name AS queue, k.key FROM {_QUEUES} CROSS JOIN LATERAL (
        SELECT rate_key AS key FROM job_documents
        WHERE {_RATED} AND queue = q.name
        ORDER BY rate_key
        LIMIT 1
    ) AS k
    UNION ALL
    SELECT keys.queue, n.key FROM keys CROSS JOIN LATERAL (
        SELECT rate_key AS key FROM job_documents
        WHERE {_RATED} AND queue = keys.queue AND rate_key > keys.key
        ORDER BY rate_key
        LIMIT 1
    ) AS n
), best AS MATERIALIZED (
    SELECT DISTINCT ON (k.key) k.key, b.priority, b.run_at, b.rate_limit AS n,
           b.rate_period AS period
    FROM keys AS k
    CROSS JOIN LATERAL ({_rate_key_jobs("k.queue", "k.key", _LOOK, "1")}
    ) AS b
    ORDER BY k.key, b.priority DESC, b.run_at
)"""

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
    WHERE n > (SELECT count(*) FROM {RATE_STARTS} AS e
               WHERE e.rate_key IS NOT NULL AND e.rate_key = best.key
                 AND e.started_at > {T_STATEMENT} - make_interval(secs => best.period))
    ORDER BY priority DESC, run_at, key
    LIMIT %(limit)s
), keyed AS MATERIALIZED (
    SELECT DISTINCT c.concurrency_key AS key
    FROM open AS o CROSS JOIN {_QUEUES}
    CROSS JOIN LATERAL ({_rate_key_jobs("q.name", "o.key", "concurrency_key", "%(limit)s")}
    ) AS c
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
    SELECT c.* FROM unnest(%(rate_keys)s::text[]) AS k(key) CROSS JOIN {_QUEUES}
    CROSS JOIN LATERAL ({_rate_key_jobs("q.name", "k.key", _CANDIDATE, "%(limit)s")}
    ) AS c
), windows AS MATERIALIZED (
    SELECT g.key, g.period,
           (SELECT count(*) FROM {RATE_STARTS} AS e
            WHERE e.rate_key IS NOT NULL AND e.rate_key = g.key
              AND e.started_at > {T_STATEMENT} - make_interval(secs => g.period)) AS used
    FROM (SELECT DISTINCT rate_key AS key, rate_period AS period FROM candidates) AS g
), slots AS MATERIALIZED (
    SELECT k.key, {_running("k.key")} AS running
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
    SELECT j.id FROM job_documents AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM ranked WHERE rank <= room)) AND j.status = 'queued'
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {_claimed(logged=False)}"""

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
    SELECT e.started_at FROM {RATE_STARTS} AS e
    WHERE e.rate_key IS NOT NULL AND e.rate_key = best.key
      AND e.started_at > {T_STATEMENT} - make_interval(secs => best.period)
    ORDER BY e.started_at DESC
    LIMIT 1 OFFSET best.n - 1
) AS nth
"""
