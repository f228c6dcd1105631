"""The claim of jobs with a concurrency or a rate key (store/sql/keyed.py): whether one
waits (`KEYED_QUEUED`, which also says whether one with a fairness key does), the jobs
of the concurrency keys with room (`CLAIM_KEYED`) and of the open rate keys
(`CLAIM_RATED`), and how long a rate limit holds its jobs back (`RATE_WAIT`). Each key's
jobs are read from its own range of its index, a priority at a time
(`claim._due_in_order`): a claim's cost follows the keys, not their backlogs.
`_starts` reads the starts of a rate key's attempts for `inspection.RATE_USAGE` too."""

from __future__ import annotations

from heartq.store.sqlite.queries.claim import (
    _CLAIM_RETURNING,
    _CLAIM_SET,
    _UNKEYED_QUEUED,
    _due_in_order,
    _tagged_waits,
    _untagged_due,
)

# Whether the keyed claims below could find anything (store/sql/ `claim`, only when CLAIM
# filled fewer than `limit`): a queued job with a concurrency key, a rate key or a
# fairness key (`fair`) in these queues; the first entry of each partial index, never a
# walk. `untagged`: whether the claim by fair shares has jobs to tag first
# (`heartq.store.sql.fair`: without, it skips `TAG_DUE`). `line`: whether the claim by
# fair shares would take its jobs from the queues' lines alone (jobs tagged, none to tag,
# none without a key queued: `fair.claim_line`), which the next claim then asks first.
_QUEUES = "queue IN (SELECT value FROM json_each(:queues))"
KEYED_QUEUED = f"""
WITH k AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                   WHERE status = 'queued' AND concurrency_key IS NOT NULL
                     AND rate_key IS NULL AND {_QUEUES})
        OR EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                   WHERE status = 'queued' AND rate_key IS NOT NULL AND {_QUEUES}) AS keyed,
        {_tagged_waits(_QUEUES)} AS tagged,
        {_untagged_due(_QUEUES)} AS untagged
)
SELECT keyed OR tagged OR untagged AS queued, tagged OR untagged AS fair, untagged,
       CASE WHEN tagged AND NOT untagged
            THEN NOT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                             WHERE {_UNKEYED_QUEUED} AND {_QUEUES})
            ELSE false END AS line
FROM k
"""

# What heartq_jobs_keyed_claim_idx holds (migration 0045: by queue, key, then claim order).
_KEYED = "status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL"


def _key_jobs(queue: str, key: str, most: str) -> str:
    """The rowids of the runnable jobs of concurrency key `key` in queue `queue`, best
    first, at most `most`: the key's range of heartq_jobs_keyed_claim_idx, a priority at
    a time."""
    return _due_in_order("heartq_jobs_keyed_claim_idx", _KEYED,
                         f"queue = {queue} AND concurrency_key = {key}", most)  # fmt: skip


def _running(key: str) -> str:
    """How many jobs of concurrency key `key` run (by heartq_jobs_key_running_idx)."""
    return f"""(SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_key_running_idx
                    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                      AND r.concurrency_key = {key})"""


# Jobs with a concurrency key and no rate key (store/sql/ `claim`, only when CLAIM filled
# fewer than `limit`). The keys of the claim's queues (`keys`: each queue's first, then
# each next one, one seek each of heartq_jobs_keyed_claim_idx, a key's jobs never read to
# find the next); each key's best runnable job (`best`; in several queues, the best of
# them); the keys whose running jobs (counted by the key's index) are below their best
# job's limit (its limit is the key's, for the look, as a rate key's best job's is), best
# job first, at most `limit` of them (`open`); their runnable jobs in claim order (a walk
# of each key's range), the first `concurrency_limit - running` of each (each job's own
# limit); the best `limit` of those. A claim's cost follows the number of keys, not their
# backlogs (it ranked every runnable job with a key: 130 ms a claim with 50,000 of them).
# SQLite has one writer: nothing is claimed or finished between the count and the update.
CLAIM_KEYED = f"""{_CLAIM_SET}WHERE id IN (
    WITH RECURSIVE q(queue) AS (SELECT DISTINCT value FROM json_each(:queues)),
    keys(queue, key) AS (
        SELECT q.queue, (SELECT concurrency_key
                         FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                         WHERE {_KEYED} AND queue = q.queue
                         ORDER BY concurrency_key LIMIT 1)
        FROM q
        UNION ALL
        SELECT keys.queue, (SELECT concurrency_key
                            FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                            WHERE {_KEYED} AND queue = keys.queue
                              AND concurrency_key > keys.key
                            ORDER BY concurrency_key LIMIT 1)
        FROM keys WHERE keys.key IS NOT NULL
    ), best AS MATERIALIZED (
        SELECT keys.key, b.priority, b.run_at, b.concurrency_limit AS most
        FROM keys JOIN heartq_jobs AS b
          ON b.rowid = ({_key_jobs("keys.queue", "keys.key", "1")})
        WHERE keys.key IS NOT NULL
    ), open AS MATERIALIZED (
        SELECT key, running FROM (
            SELECT key, max(priority) AS priority, min(run_at) AS run_at, max(most) AS most,
                   {_running("best.key")} AS running
            FROM best GROUP BY key
        )
        WHERE most > running
        ORDER BY priority DESC, run_at, key
        LIMIT :limit
    ), ranked AS (
        SELECT c.id, c.priority, c.run_at, c.concurrency_limit, open.running,
               row_number() OVER (PARTITION BY open.key
                                  ORDER BY c.priority DESC, c.run_at, c.id) AS rank
        FROM open CROSS JOIN q JOIN heartq_jobs AS c
          ON c.rowid IN ({_key_jobs("q.queue", "open.key", ":limit")})
    )
    SELECT id FROM ranked WHERE rank <= concurrency_limit - running
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


# What heartq_jobs_rated_claim_idx holds (migration 0046: by queue, key, then claim order).
_RATED = "status = 'queued' AND rate_key IS NOT NULL"


def _rate_key_jobs(queue: str, key: str, most: str) -> str:
    """The rowids of the runnable jobs of rate key `key` in queue `queue`, best first, at
    most `most`: the key's range of heartq_jobs_rated_claim_idx, a priority at a time (no
    claim takes more than :limit)."""
    return _due_in_order("heartq_jobs_rated_claim_idx", _RATED,
                         f"queue = {queue} AND rate_key = {key}", most)  # fmt: skip


# The rate-limited jobs a claim looks at, as CTEs: `q`, the claim's queues; `keys`, the
# rate keys of those (each queue's first, then each next one: one seek each of
# heartq_jobs_rated_claim_idx, a skip scan); `best`, each key's best runnable job of
# these queues (its limit is the key's, for the look), each key's walk stopping at the
# first; `open`, the best `limit` of the keys whose starts within the period (`used`:
# `_starts_count`, ended and running attempts, in every queue) are below their limit. A
# claim's cost follows the number of keys of its queues, not their backlogs, nor what
# other queues hold.
_RATE_KEYS = f"""q(queue) AS (SELECT DISTINCT value FROM json_each(:queues)),
keys(queue, key) AS (
    SELECT q.queue, (SELECT rate_key FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                     WHERE {_RATED} AND queue = q.queue ORDER BY rate_key LIMIT 1)
    FROM q
    UNION ALL
    SELECT keys.queue, (SELECT rate_key FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                        WHERE {_RATED} AND queue = keys.queue AND rate_key > keys.key
                        ORDER BY rate_key LIMIT 1)
    FROM keys WHERE keys.key IS NOT NULL
), best AS MATERIALIZED (
    SELECT key, priority, run_at, n, period FROM (
        SELECT keys.key, b.priority, b.run_at, b.rate_limit AS n, b.rate_period AS period,
               row_number() OVER (PARTITION BY keys.key
                                  ORDER BY b.priority DESC, b.run_at) AS place
        FROM keys JOIN heartq_jobs AS b
          ON b.rowid = ({_rate_key_jobs("keys.queue", "keys.key", "1")})
        WHERE keys.key IS NOT NULL
    )
    WHERE place = 1
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
        FROM open CROSS JOIN q
        JOIN heartq_jobs AS c ON c.rowid IN ({_rate_key_jobs("q.queue", "open.key", ":limit")})
    ), windows AS MATERIALIZED (
        SELECT g.rate_key AS key, g.rate_period AS period,
               {_starts_count("g.rate_key", ":now - g.rate_period")} AS used
        FROM (SELECT DISTINCT rate_key, rate_period FROM candidates) AS g
    ), slots AS MATERIALIZED (
        SELECT k.key, {_running("k.key")} AS running
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
