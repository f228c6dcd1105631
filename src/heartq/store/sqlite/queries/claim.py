"""The claim: runnable jobs put under a worker's lease, each as a new execution. Plain
jobs (`CLAIM`, `CLAIM_ONE_QUEUE`, a transport's `CLAIM_IDS`), then jobs with a
concurrency key, then jobs with a rate key, and how long a rate limit holds jobs back
(`RATE_WAIT`). `_starts` reads the starts of a rate key's attempts for
`inspection.RATE_USAGE` too."""

from __future__ import annotations

# The row's `lease_expires_at` is the attempt's floor; an attempt whose worker has no
# lease (no row, or a lease the lease reclaimer cleared) is detached at it (see the PostgreSQL
# statement; SQLite has one writer, so no lease reclaimer can clear the lease meanwhile).
# A claimed job keeps its fair share tag while it runs (the claim by turns reads back
# from its rows the tags it took: `queries/fair.py`); its attempt's end clears it
# (`queries/finish.py`).
_CLAIM_SET = """
UPDATE heartq_jobs
SET status = 'running',
    worker_id = :worker_id,
    execution_id = execution_id + 1,
    attempts = attempts + 1,
    lease_expires_at = :now + :lease,
    detached_until = CASE WHEN (SELECT w.lease_expires_at FROM heartq_workers AS w
                                WHERE w.id = :worker_id) IS NULL THEN :now + :lease END,
    heartbeat_at = :now,
    started_at = :now,
    updated_at = :now,
    claimed_ahead = :ahead,
    progress_value = NULL, progress_stage = NULL, progress_message = NULL
"""

_CLAIM_RETURNING = """
RETURNING id, task, queue, args, attempts, execution_id, max_retries, retry_backoff,
          retry_backoff_max, checkpoint, lease_expires_at, run_at, priority, chosen, meta,
          dependency_results, snoozes, expires_at - :now AS expires_in
"""


# Whether a job with a fairness key waits in the claim's queues: the first entry of the
# fair claim index (tagged), or a runnable one of the fair due index (not tagged yet:
# `_untagged_due`). Then the claim of jobs without a key takes nothing, and the claim by
# fair shares (`queries/fair.py`, after KEYED_QUEUED says so) tags the one and gives the
# jobs without a key their one share.
def _untagged_due(queues: str) -> str:
    """Whether a runnable job that takes turns waits untagged in the claim's queues."""
    return f"""EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NULL AND {queues}
                   AND run_at <= :now)"""


def _tagged_waits(queues: str) -> str:
    """Whether a job that takes turns waits tagged in the claim's queues."""
    return f"""EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                 WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
                   AND fair_key IS NOT NULL AND fair_tag IS NOT NULL AND {queues})"""


def _fair_waits(queues: str = "queue IN (SELECT value FROM json_each(:queues))") -> str:
    """That test, for the claim's queues (`queues`: a condition on `queue`)."""
    return f"({_tagged_waits(queues)} OR {_untagged_due(queues)})"


_FAIR_WAITS = _fair_waits()

# What the claim index holds: queued jobs without a concurrency, a rate or a fairness key.
_UNKEYED_QUEUED = """status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL"""


# The rowids of the first :limit due jobs without a key of queue `queue` (an SQL
# expression), best first: priority, then `run_at`, then id. The claim index is ordered
# by priority first, so a walk of it in that order meets each priority's delayed jobs
# (not due yet) right after its due ones, and a claim that found fewer due jobs than its
# slots walked every delayed job of the queue (100,000 delayed: 14 ms a claim). So the
# walk names the queue's priorities (`level`, found one seek each, highest first): SQLite
# then walks each priority as a range that ends at its first job not due yet, the
# priorities in the index's order (no sort), and stops at :limit.
def _due_rowids(queue: str) -> str:
    """The due jobs' walk of one queue, its priorities one by one, as a query."""
    return f"""SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
        WHERE {_UNKEYED_QUEUED} AND queue = {queue} AND run_at <= :now
          AND priority IN (
              WITH RECURSIVE level(p) AS (
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                          WHERE {_UNKEYED_QUEUED} AND queue = {queue}
                          ORDER BY priority DESC LIMIT 1)
                  UNION ALL
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                          WHERE {_UNKEYED_QUEUED} AND queue = {queue} AND priority < level.p
                          ORDER BY priority DESC LIMIT 1)
                  FROM level WHERE level.p IS NOT NULL
              )
              SELECT p FROM level)
        ORDER BY priority DESC, run_at, id
        LIMIT :limit"""


# Jobs without a concurrency, a rate or a fairness key only: the claim index holds nothing
# else, and none is taken here while a job with a fairness key waits (`_FAIR_WAITS`).
# Each queue's jobs from its own walks (`_due_rowids`), the best :limit of them taken.
CLAIM = f"""{_CLAIM_SET}WHERE rowid IN (
    SELECT j.rowid FROM (SELECT DISTINCT value AS queue FROM json_each(:queues)) AS q
    CROSS JOIN heartq_jobs AS j
    WHERE j.rowid IN ({_due_rowids("q.queue")})
      AND NOT {_FAIR_WAITS}
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT :limit
){_CLAIM_RETURNING}"""

# CLAIM for a worker of one queue (the usual case): `queue = :queue` lets the claim index's
# order serve the ORDER BY, so the claim reads `limit` entries whatever the backlog. With
# the queues from `json_each`, SQLite reads and sorts every queued job of the queue (3 ms
# with 100,000 queued), and once ANALYZE has written statistics it skip-scans the index
# instead (59 ms): a claim whose cost grew with the backlog.
CLAIM_ONE_QUEUE = f"""{_CLAIM_SET}WHERE rowid IN ({_due_rowids(":queue")})
  AND NOT {_fair_waits("queue = :queue")}
{_CLAIM_RETURNING}"""

# PostgreSQL's claims without turns, tried first (store/sql/ `_claim_rows`). SQLite's
# claims take no turns (the claim by fair shares is one of its own, `fair.py`, after
# KEYED_QUEUED says a job with a fairness key waits), so CLAIM_ONE_QUEUE and CLAIM are
# they; they never answer that turns are due.
CLAIM_IN_ORDER = CLAIM_ONE_QUEUE
CLAIM_QUEUES_IN_ORDER = CLAIM

# The jobs a transport's messages name (store/sql/ `claim_ids`): only those still queued,
# runnable and without a concurrency, a rate or a fairness key (a keyed job is left to
# CLAIM_KEYED or CLAIM_RATED, which count its keys, and one with a fairness key to the
# claim by fair shares, which takes its turn); a job running elsewhere, finished or
# unknown matches nothing.
CLAIM_IDS = f"""{_CLAIM_SET}WHERE id IN (SELECT value FROM json_each(:ids))
  AND status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL AND run_at <= :now
  AND fair_key IS NULL
{_CLAIM_RETURNING}"""

# What a transport's sweeper (re)publishes (store/sql/ `due_for_publish`): queued,
# runnable, unkeyed jobs of its queues that fell due since its last pass (delayed and
# retried: `run_at` after `created_at`), were queued again since (reclaimed, released,
# replayed: `updated_at` after `created_at`), or have waited since `waiting_since`.
DUE_FOR_PUBLISH = """
SELECT id, queue FROM heartq_jobs
WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
  AND queue IN (SELECT value FROM json_each(:queues))
  AND run_at <= :now
  AND ((run_at > :since AND run_at > created_at)
       OR (updated_at > :since AND updated_at > created_at)
       OR run_at <= :waiting_since)
ORDER BY run_at, id
LIMIT :limit
"""

# Whether the keyed claims below could find anything (store/sql/ `claim`, only when CLAIM
# filled fewer than `limit`): a queued job with a concurrency key in these queues, or
# with a rate key in any queue, or with a fairness key in these (`fair`); the first entry
# of each partial index, never a walk. `untagged`: whether the claim by fair shares has
# jobs to tag first (`heartq.store.sql.fair`: without, it skips `TAG_DUE`).
_QUEUES = "queue IN (SELECT value FROM json_each(:queues))"
KEYED_QUEUED = f"""
WITH k AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
                   WHERE status = 'queued' AND concurrency_key IS NOT NULL
                     AND rate_key IS NULL AND {_QUEUES})
        OR EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
                   WHERE status = 'queued' AND rate_key IS NOT NULL) AS keyed,
        {_tagged_waits(_QUEUES)} AS tagged,
        {_untagged_due(_QUEUES)} AS untagged
)
SELECT keyed OR tagged OR untagged AS queued, tagged OR untagged AS fair, untagged FROM k
"""

# What heartq_jobs_keyed_claim_idx holds (migration 0045: by queue, key, then claim order).
_KEYED = "status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL"


def _key_jobs(queue: str, key: str, most: str) -> str:
    """The rowids of the runnable jobs of concurrency key `key` in queue `queue`, best
    first, at most `most`: a walk of the key's range of heartq_jobs_keyed_claim_idx."""
    return f"""SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_keyed_claim_idx
            WHERE {_KEYED} AND queue = {queue} AND concurrency_key = {key}
              AND run_at <= :now
            ORDER BY priority DESC, run_at, id LIMIT {most}"""


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
                   (SELECT count(*) FROM heartq_jobs AS r INDEXED BY heartq_jobs_key_running_idx
                    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                      AND r.concurrency_key = best.key) AS running
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
