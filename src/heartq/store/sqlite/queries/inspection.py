"""Reads: a job and its executions, lists and pages of jobs, counts, the use of
concurrency, rate and fairness keys, queue waits, whether work is pending, the end of an awaited
job, jobs by a prefix or a tail of their id."""

from __future__ import annotations

from heartq.store.sqlite.queries.common import EFFECTIVE_BEAT, EFFECTIVE_LEASE, NOW_IN_SNAPSHOT
from heartq.store.sqlite.queries.dependencies import HOLDER
from heartq.store.sqlite.queries.keyed import _starts

# With the running attempt's effective lease and last sign of life (see the PostgreSQL
# statement).
GET_JOB = f"""
SELECT j.*, {EFFECTIVE_LEASE} AS effective_lease, {EFFECTIVE_BEAT} AS effective_heartbeat
FROM heartq_jobs AS j LEFT JOIN heartq_workers AS w ON w.id = j.worker_id AND j.status = 'running'
WHERE j.id = :job_id
"""

GET_EXECUTIONS = """
SELECT * FROM heartq_executions WHERE job_id = :job_id ORDER BY execution_id
"""

# `:ahead` (true, false or null: either) tells running jobs claimed ahead from started ones.
LIST_JOBS = f"""
SELECT j.*, {EFFECTIVE_LEASE} AS effective_lease, {EFFECTIVE_BEAT} AS effective_heartbeat
FROM heartq_jobs AS j LEFT JOIN heartq_workers AS w ON w.id = j.worker_id AND j.status = 'running'
WHERE (:status IS NULL OR j.status = :status) AND (:queue IS NULL OR j.queue = :queue)
  AND (:ahead IS NULL OR j.claimed_ahead = :ahead)
ORDER BY j.created_at DESC, j.id DESC
LIMIT :limit
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
# fmt: off
RATE_USAGE = f"""
WITH live AS (
    SELECT rate_key, rate_limit, rate_period, status, run_at
    FROM heartq_jobs INDEXED BY heartq_jobs_rated_claim_idx
    WHERE status = 'queued' AND rate_key IS NOT NULL
    UNION ALL
    SELECT rate_key, rate_limit, rate_period, status, run_at
    FROM heartq_jobs INDEXED BY heartq_jobs_running_rate_idx
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
# fmt: on

# The jobs of a fairness key that take turns (`heartq.store.sql.fair`): without a
# concurrency or a rate key (those go to their own claims). Queued, they are the entries
# of heartq_jobs_fair_claim_idx (tagged, in the order of their turns) and of
# heartq_jobs_fair_due_idx (not tagged yet).
_TURNS = "concurrency_key IS NULL AND rate_key IS NULL AND fair_key IS NOT NULL"
_FAIR_QUEUED = f"status = 'queued' AND {_TURNS}"


def _fair_queues(cte: str, index: str, test: str) -> str:
    """The CTE `cte(queue)`: the queues with an entry of `index`, one probe each past the
    queue before (a skip scan)."""
    return f"""{cte}(queue) AS (
    SELECT (SELECT queue FROM heartq_jobs INDEXED BY {index}
            WHERE {_FAIR_QUEUED} AND {test} ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT queue FROM heartq_jobs INDEXED BY {index}
            WHERE {_FAIR_QUEUED} AND {test} AND queue > {cte}.queue ORDER BY queue LIMIT 1)
    FROM {cte} WHERE {cte}.queue IS NOT NULL
)"""


# Per fairness key with jobs queued or running (`heartq queues`, the dashboard, the
# metrics): its queued jobs among the first :line of each of its queue's lines (a line a
# priority, and the jobs not tagged yet, oldest first), up to :counted; whether it may
# hold more (`more`: its count reached :counted, or a line of its queue was read only in
# part); its running ones; and its weight (its next job's in line; else its running
# jobs' largest). Nothing walks a backlog: the queues and each one's priorities are
# found by one probe each of the indexes past the one before, each line is read :line
# entries deep, and the running jobs (few: a fleet's slots) through their own index; at
# most :keys keys. A key whose jobs all lie further back in its line than :line is not
# listed (a line interleaves the keys by their weights, so each key with work has its
# first jobs near its head).
# fmt: off
FAIR_USAGE = f"""
WITH RECURSIVE {_fair_queues("tq", "heartq_jobs_fair_claim_idx", "fair_tag IS NOT NULL")},
{_fair_queues("uq", "heartq_jobs_fair_due_idx", "fair_tag IS NULL")},
tiers(queue, priority) AS (
    SELECT tq.queue, (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                      WHERE {_FAIR_QUEUED} AND fair_tag IS NOT NULL AND queue = tq.queue
                      ORDER BY priority DESC LIMIT 1)
    FROM tq WHERE tq.queue IS NOT NULL
    UNION ALL
    SELECT t.queue, (SELECT priority FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                     WHERE {_FAIR_QUEUED} AND fair_tag IS NOT NULL AND queue = t.queue
                       AND priority < t.priority
                     ORDER BY priority DESC LIMIT 1)
    FROM tiers AS t WHERE t.priority IS NOT NULL
), line AS MATERIALIZED (
    SELECT j.queue, j.fair_key AS key, j.fair_weight AS weight, j.priority, j.fair_tag AS tag
    FROM tiers AS t CROSS JOIN heartq_jobs AS j
    WHERE t.priority IS NOT NULL
      AND j.rowid IN (SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                      WHERE {_FAIR_QUEUED} AND fair_tag IS NOT NULL AND queue = t.queue
                        AND priority = t.priority
                      ORDER BY fair_tag, id LIMIT :line)
    UNION ALL
    SELECT j.queue, j.fair_key, j.fair_weight, j.priority, NULL
    FROM uq CROSS JOIN heartq_jobs AS j
    WHERE uq.queue IS NOT NULL
      AND j.rowid IN (SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
                      WHERE {_FAIR_QUEUED} AND fair_tag IS NULL AND queue = uq.queue
                      ORDER BY run_at, id LIMIT :line)
), cut AS (
    SELECT DISTINCT queue FROM (
        SELECT queue FROM line
        GROUP BY queue, CASE WHEN tag IS NOT NULL THEN priority END, tag IS NULL
        HAVING count(*) >= :line
    )
), waiting AS (
    SELECT queue, key, count(*) AS queued, max(CASE WHEN place = 1 THEN weight END) AS weight,
           count(*) >= :counted OR queue IN (SELECT queue FROM cut) AS more
    FROM (SELECT queue, key, weight,
                 row_number() OVER (PARTITION BY queue, key
                                    ORDER BY priority DESC, tag IS NULL, tag) AS place
          FROM line)
    GROUP BY queue, key
), running AS (
    SELECT queue, fair_key AS key, count(*) AS running, max(fair_weight) AS weight,
           queue IN (SELECT queue FROM cut) AS more
    FROM heartq_jobs INDEXED BY heartq_jobs_worker_idx
    WHERE status = 'running' AND {_TURNS}
    GROUP BY queue, fair_key
)
SELECT queue, key, min(sum(queued), :counted) AS queued, sum(running) AS running,
       coalesce(max(CASE WHEN queued > 0 THEN weight END), max(weight)) AS weight,
       max(more) AS more
FROM (SELECT queue, key, queued, 0 AS running, weight, more FROM waiting
      UNION ALL
      SELECT queue, key, 0, running, weight, more FROM running)
GROUP BY queue, key
ORDER BY queue, sum(running) DESC, sum(queued) DESC, key
LIMIT :keys
"""
# fmt: on

# Queued jobs are in one of five indexes: without any key, with a fairness key only
# (tagged, or not yet), with a concurrency key only, with a rate key.
_CLAIM_INDEXES = (
    ("heartq_jobs_claim_idx", "concurrency_key IS NULL AND rate_key IS NULL AND fair_key IS NULL"),
    ("heartq_jobs_fair_claim_idx", f"{_TURNS} AND fair_tag IS NOT NULL"),
    ("heartq_jobs_fair_due_idx", f"{_TURNS} AND fair_tag IS NULL"),
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

QUEUE_WAITS = f"""
SELECT queue, min(oldest_run_at) AS oldest_run_at, sum(scheduled) AS scheduled FROM (
{"UNION ALL".join(_QUEUE_WAIT.format(index=i, test=t) for i, t in _CLAIM_INDEXES)}
)
GROUP BY queue
"""

# Running anywhere, runnable, or (with :retries) queued after an attempt: a retry waiting
# out its backoff, or a snooze its delay; or waiting (heartq_jobs_waiting_idx) for a
# dependency, in any queue, that is one of those or waits itself. A waiting job whose
# dependencies are all in these queues adds nothing: its release commits with their ends,
# so one snapshot sees them pending or it queued. Due is judged at the statement's own
# time (`NOW_IN_SNAPSHOT`).
HAS_PENDING = f"""
SELECT EXISTS (
    SELECT 1 FROM heartq_jobs
    WHERE queue IN (SELECT value FROM json_each(:queues))
      AND (status = 'running'
           OR (status = 'queued'
               AND (run_at <= {NOW_IN_SNAPSHOT}
                    OR (:retries AND (attempts > 0 OR snoozes > 0)))))
) OR EXISTS (
    SELECT 1 FROM heartq_jobs AS w INDEXED BY heartq_jobs_waiting_idx
    JOIN heartq_job_dependencies AS d ON d.job_id = w.id AND d.ended IS NULL
    JOIN heartq_jobs AS e ON e.id = d.depends_on
    WHERE w.status = 'waiting' AND w.queue IN (SELECT value FROM json_each(:queues))
      AND (e.status IN ('running', 'waiting')
           OR (e.status = 'queued'
               AND (e.run_at <= {NOW_IN_SNAPSHOT}
                    OR (:retries AND (e.attempts > 0 OR e.snoozes > 0)))))
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

# The dashboard's job list, a keyset page of the primary key in two steps. The floor:
# the id :scan ids below :before (an index-only walk; none when fewer are left). The
# page: the jobs in [floor, before) that match the filters, newest first, read along
# the index and stopped at :limit, so a page reads at most :scan jobs. Two variants of
# each: the first page has no bound (a planner cannot use an index for
# `:before IS NULL OR id < :before`); no floor is bound as '' (below every id).
_FLOOR = "SELECT id FROM heartq_jobs {where} ORDER BY id DESC LIMIT 1 OFFSET :scan_offset"

_PAGE = f"""
SELECT j.*, {EFFECTIVE_LEASE} AS effective_lease, {EFFECTIVE_BEAT} AS effective_heartbeat
FROM heartq_jobs AS j LEFT JOIN heartq_workers AS w ON w.id = j.worker_id AND j.status = 'running'
WHERE {{where}} j.id >= :floor
  AND (:status IS NULL OR j.status = :status) AND (:queue IS NULL OR j.queue = :queue)
  AND (:task IS NULL OR j.task = :task) AND (:ahead IS NULL OR j.claimed_ahead = :ahead)
ORDER BY j.id DESC LIMIT :limit
"""

BROWSE_FLOOR = _FLOOR.format(where="")

BROWSE_FLOOR_BEFORE = _FLOOR.format(where="WHERE id < :before")

BROWSE_JOBS = _PAGE.format(where="")

BROWSE_JOBS_BEFORE = _PAGE.format(where="j.id < :before AND")

# Jobs that ended, per minute: a range of the finished index (status, finished_at).
FINISHED_PER_MINUTE = """
SELECT CAST(finished_at / 60 AS INTEGER) * 60 AS minute, status, count(*) AS n
FROM heartq_jobs
WHERE status IN ('succeeded', 'dead', 'cancelled') AND finished_at >= :since
GROUP BY minute, status ORDER BY minute, status
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

# Someone waits for this job's end (`App.result`). SQLite announces nothing (waiters
# poll), but the flag says the same in both dialects.
MARK_AWAITED = "UPDATE heartq_jobs SET awaited = 1 WHERE id = :job_id AND NOT awaited"

# A result still to come: saved by the attempt that committed its job, or given up by a
# lease reclaimer once that attempt's lease ran out (GIVE_UP_RESULTS: `result_lost` says why):
# either is final. A blocked job's end for its waiter is the dead job that holds it (HOLDER).
JOB_END = f"""
SELECT j.status, j.result, j.error, j.dead_reason, j.result_pending, j.result_lost,
       j.cancelled_by, h.id AS holder, h.error AS holder_error, h.dead_reason AS holder_dead_reason
FROM heartq_jobs AS j LEFT JOIN ({HOLDER}) AS h ON 1
WHERE j.id = :job_id
"""

JOB_ID = "SELECT id FROM heartq_jobs WHERE id = :job_id"

# A prefix as a range of the primary key: the least and the greatest id that start with
# it (`ids.id_range`), so only the ids that do are read.
JOBS_BY_PREFIX = """
SELECT id, task, status FROM heartq_jobs
WHERE id BETWEEN :low AND :high
ORDER BY id LIMIT :limit
"""

# A tail (ids made together share their start; their last characters are random): no
# index has them, so the inner query reads every id from the primary key's index (its
# covering scan, never the rows: about 0.2 s per million jobs), and only the matches are
# read whole. An index of tails would cost every enqueue a write at a random place:
# docs/design/events-and-dashboard.md, "Shortened job ids".
JOBS_BY_SUFFIX = """
SELECT id, task, status FROM heartq_jobs
WHERE id IN (SELECT id FROM heartq_jobs WHERE substr(id, -:n) = :suffix LIMIT :limit)
"""
