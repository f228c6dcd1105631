"""Reads: a job and its executions, lists and pages of jobs, counts, the use of
concurrency, rate and fairness keys, queue waits, whether work is pending, the end of an awaited
job, jobs by a prefix or a tail of their id."""

from __future__ import annotations

from heartq.store.postgres.queries.common import (
    EFFECTIVE_BEAT,
    EFFECTIVE_LEASE,
    JOB_ID_TYPE,
    RATE_STARTS,
    T_SNAPSHOT,
    T,
)
from heartq.store.postgres.queries.dependencies import HOLDER

# With the running attempt's effective lease and last sign of life (docs/design/leases.md,
# "Leases and heartbeats"): its worker's row joined.
GET_JOB = f"""
SELECT j.*, {EFFECTIVE_LEASE} AS effective_lease, {EFFECTIVE_BEAT} AS effective_heartbeat
FROM jobs AS j LEFT JOIN workers AS w ON w.id = j.worker_id AND j.status = 'running'
WHERE j.id = %(job_id)s
"""

GET_EXECUTIONS = "SELECT * FROM executions WHERE job_id = %(job_id)s ORDER BY execution_id"

# `ahead` (true, false or null: either) tells running jobs claimed ahead from started ones.
LIST_JOBS = f"""
SELECT j.*, {EFFECTIVE_LEASE} AS effective_lease, {EFFECTIVE_BEAT} AS effective_heartbeat
FROM jobs AS j LEFT JOIN workers AS w ON w.id = j.worker_id AND j.status = 'running'
WHERE (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
  AND (%(ahead)s::boolean IS NULL OR j.claimed_ahead = %(ahead)s)
ORDER BY j.created_at DESC, j.id DESC
LIMIT %(limit)s
"""

# Per concurrency key with live jobs (`heartq stats`): busiest first. A keyed job is
# never in the ready log: its claim marks its document `running`, which says so exactly.
CONCURRENCY_USAGE = """
SELECT concurrency_key AS key,
       sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END)::integer AS running,
       sum(CASE WHEN status = 'queued' THEN 1 ELSE 0 END)::integer AS queued,
       max(concurrency_limit) AS max_limit
FROM job_documents
WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'running')
GROUP BY concurrency_key
ORDER BY running DESC, queued DESC, concurrency_key
LIMIT 1000
"""

# Per rate key and limit with live jobs (`heartq stats`, the dashboard): its jobs running,
# queued, and queued and due (`waiting`: what its limit may be holding back), its starts
# within the period (`started`) and, when that is the limit, when the next one frees up
# (`next_start_in`: the `n`-th latest start leaves the window). The live jobs through the
# rated claim index and the running jobs' index (of the documents, which say exactly
# what a rate-limited job is doing: its claim marks them); the starts through
# `RATE_STARTS`.
RATE_USAGE = f"""
WITH live AS (
    SELECT rate_key, rate_limit, rate_period, status, run_at FROM job_documents
    WHERE status = 'queued' AND rate_key IS NOT NULL
    UNION ALL
    SELECT rate_key, rate_limit, rate_period, status, run_at FROM job_documents
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
    FROM {RATE_STARTS} AS e
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

# Per fairness key with jobs queued or running (see the SQLite statement). The keys are
# the ready log's lanes (`lanes`: a queue, a priority and a key; at most :keys of them
# read), and each lane's queued jobs are counted through its range of `ready`'s key, up
# to :counted, so a key's flood is not walked (under a held horizon the count also steps
# over the entries its claimed jobs left, as a claim past the frontier does not). A key's
# jobs that came back or were delayed wait in the claim index, not in a lane, and are not
# counted until they run. The weight: the first job's of the key's highest lane with
# jobs. The running jobs (few: a fleet's slots) each worker's leases, through their index
# by worker (a plan that holds before statistics say otherwise), with their documents.
# `more`: the key's count reached :counted, so it may hold more.
FAIR_USAGE = """
WITH lane AS MATERIALIZED (
    SELECT l.queue, l.priority, l.fair_key AS key, w.queued, w.weight
    FROM (SELECT queue, priority, fair_key FROM lanes WHERE fair_key <> ''
          ORDER BY queue, fair_key, priority DESC LIMIT %(keys)s) AS l
    CROSS JOIN LATERAL (
        SELECT count(*)::integer AS queued,
               (array_agg(j.fair_weight ORDER BY j.ready_xid, j.id))[1] AS weight
        FROM (SELECT fair_weight, ready_xid, job_id AS id FROM ready
              WHERE queue = l.queue AND priority = l.priority AND fair_key = l.fair_key
              ORDER BY ready_xid, job_id
              LIMIT %(counted)s) AS j
    ) AS w
    WHERE w.queued > 0
), waiting AS (
    SELECT queue, key, sum(queued)::integer AS queued,
           (array_agg(weight ORDER BY priority DESC))[1] AS weight
    FROM lane
    GROUP BY queue, key
), running AS (
    SELECT j.queue, j.fair_key AS key, count(*)::integer AS running,
           max(j.fair_weight) AS weight
    FROM workers AS wk
    CROSS JOIN LATERAL (
        SELECT d.queue, d.fair_key, d.fair_weight
        FROM leases AS l JOIN job_documents AS d ON d.id = l.job_id
        WHERE l.worker_id = wk.id AND d.concurrency_key IS NULL AND d.rate_key IS NULL
          AND d.fair_key IS NOT NULL
    ) AS j
    GROUP BY j.queue, j.fair_key
)
SELECT coalesce(w.queue, r.queue) AS queue, coalesce(w.key, r.key) AS key,
       coalesce(w.queued, 0) AS queued, coalesce(r.running, 0) AS running,
       coalesce(w.weight, r.weight) AS weight, coalesce(w.queued, 0) >= %(counted)s AS more
FROM waiting AS w
FULL JOIN running AS r ON r.queue = w.queue AND r.key = w.key
ORDER BY 1, 4 DESC, 3 DESC, 2
"""

# The queued jobs (queue, run_at, id), read where they are held: the ready log's entries
# (an entry is deleted by the claim that takes its job), and the documents outside the
# log through the claim index whose predicate each matches (plain, keyed, rated: the
# rated one is keyed by rate key, so a queue's read reads it whole; it holds only queued
# rated jobs). Through `jobs`, a read of queued jobs read every job kept: a success of
# the ready log keeps a document that says `queued` beside the end row that says it
# ended, so the view's status is no column an index can serve.
QUEUED = """
SELECT queue, run_at, job_id AS id FROM ready
UNION ALL
SELECT queue, run_at, id FROM job_documents
WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
  AND ready_xid IS NULL
UNION ALL
SELECT queue, run_at, id FROM job_documents
WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL
UNION ALL
SELECT queue, run_at, id FROM job_documents WHERE status = 'queued' AND rate_key IS NOT NULL
"""

QUEUE_WAITS = f"""
SELECT queue,
       extract(epoch from min(run_at) FILTER (WHERE run_at <= {T}))::float8 AS oldest_run_at,
       count(*) FILTER (WHERE run_at > {T})::integer AS scheduled
FROM ({QUEUED}) AS queued
GROUP BY queue
"""

# Running anywhere, runnable, or (with :retries) queued after an attempt: a retry waiting
# out its backoff, or a snooze its delay; or waiting (jobs_waiting_idx) for a dependency,
# in any queue, that is one of those or waits itself. A waiting job whose dependencies are
# all in these queues adds nothing: its release commits with their ends, so one snapshot
# sees them pending or it queued. Each part is read where its state is held, through an
# index whose predicate it matches (a test the planner cannot fit to one reads a whole
# index here, where sequential scans are off): running, the leases, each with its
# document by key; queued in the ready log, its entries by queue; queued outside it (a
# document of the log says `queued` while its job runs), the plain, keyed and rated
# claim indexes; waiting, the queues' waiting documents, each with its open edges and
# each edge's job by their keys (`LATERAL`: joined plainly, the edges were walked whole
# from their `depends_on` index, every edge not yet pruned). What a look with nothing to
# find reads whole, pinned by the plan census: the leases (the running attempts of every
# queue: they hold no queue) and the rated claim index (keyed by rate key, not queue).
# Due is judged at a time read after the statement's snapshot (`T_SNAPSHOT`), never
# before it: a job that snapshot sees runnable is due in it.
_QUEUED_HERE = f"""status = 'queued' AND queue = ANY(%(queues)s::text[])
          AND (run_at <= {T_SNAPSHOT} OR (%(retries)s AND (attempts > 0 OR snoozes > 0)))"""

HAS_PENDING = f"""
SELECT EXISTS (
    SELECT 1 FROM leases AS l CROSS JOIN LATERAL (
        SELECT d.queue FROM job_documents AS d WHERE d.id = l.job_id LIMIT 1
    ) AS d
    WHERE d.queue = ANY(%(queues)s::text[])
) OR EXISTS (
    SELECT 1 FROM ready WHERE queue = ANY(%(queues)s::text[]) AND run_at <= {T_SNAPSHOT}
) OR EXISTS (
    SELECT 1 FROM job_documents
    WHERE concurrency_key IS NULL AND rate_key IS NULL AND ready_xid IS NULL AND {_QUEUED_HERE}
) OR EXISTS (
    SELECT 1 FROM job_documents
    WHERE concurrency_key IS NOT NULL AND rate_key IS NULL AND {_QUEUED_HERE}
) OR EXISTS (
    SELECT 1 FROM job_documents WHERE rate_key IS NOT NULL AND {_QUEUED_HERE}
) OR EXISTS (
    SELECT 1 FROM job_documents AS w CROSS JOIN LATERAL (
        SELECT 1 FROM job_dependencies AS d CROSS JOIN LATERAL (
            SELECT status, run_at, attempts, snoozes FROM jobs WHERE id = d.depends_on LIMIT 1
        ) AS e
        WHERE d.job_id = w.id AND d.ended IS NULL
          AND (e.status IN ('running', 'waiting')
               OR (e.status = 'queued'
                   AND (e.run_at <= {T_SNAPSHOT}
                        OR (%(retries)s AND (e.attempts > 0 OR e.snoozes > 0)))))
        LIMIT 1
    ) AS held
    WHERE w.status = 'waiting' AND w.queue = ANY(%(queues)s::text[])
) AS pending
"""

OLDEST_RUNNABLE = f"""
SELECT id FROM ({QUEUED}) AS queued
WHERE queue = %(queue)s
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

_PAGE = f"""
SELECT j.*, {EFFECTIVE_LEASE} AS effective_lease, {EFFECTIVE_BEAT} AS effective_heartbeat
FROM jobs AS j LEFT JOIN workers AS w ON w.id = j.worker_id AND j.status = 'running'
WHERE {{where}} j.id >= %(floor)s::{JOB_ID_TYPE}
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
  AND (%(task)s::text IS NULL OR j.task = %(task)s)
  AND (%(ahead)s::boolean IS NULL OR j.claimed_ahead = %(ahead)s)
ORDER BY j.id DESC LIMIT %(limit)s
"""

BROWSE_FLOOR = (*_BY_INDEX, _FLOOR.format(where=""))

BROWSE_FLOOR_BEFORE = (*_BY_INDEX, _FLOOR.format(where=f"WHERE id < %(before)s::{JOB_ID_TYPE}"))

BROWSE_JOBS = _PAGE.format(where="")

BROWSE_JOBS_BEFORE = _PAGE.format(where=f"j.id < %(before)s::{JOB_ID_TYPE} AND")

# Jobs that ended, per minute: a range of the documents' finished index (status,
# finished_at) and one of the end rows' (finished_at).
FINISHED_PER_MINUTE = """
SELECT (floor(extract(epoch from finished_at) / 60) * 60)::float8 AS minute, status,
       count(*)::integer AS n
FROM (SELECT finished_at, status FROM job_documents
      WHERE status IN ('succeeded', 'dead', 'cancelled')
        AND finished_at >= to_timestamp(%(since)s::float8)
      UNION ALL
      SELECT finished_at, status FROM job_ends
      WHERE finished_at >= to_timestamp(%(since)s::float8)) AS ended
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

# Someone waits for this job's end (`App.result`): its end will be announced.
MARK_AWAITED = """
UPDATE job_documents SET awaited = true WHERE id = %(job_id)s AND NOT awaited
"""

# A result still to come: saved by the attempt that committed its job, or given up by a
# lease reclaimer once that attempt's lease ran out (GIVE_UP_RESULTS: `result_lost` says why):
# either is final. A blocked job's end for its waiter is the dead job that holds it (HOLDER).
JOB_END = f"""
SELECT j.status, j.result::text AS result, j.error, j.dead_reason, j.result_pending,
       j.cancelled_by, j.result_lost,
       h.id AS holder, h.error AS holder_error, h.dead_reason AS holder_dead_reason
FROM jobs AS j LEFT JOIN ({HOLDER}) AS h ON true
WHERE j.id = %(job_id)s
"""

JOB_ID = "SELECT id FROM jobs WHERE id = %(job_id)s"

# A prefix as a range of the primary key: the least and the greatest id that start with
# it (`ids.id_range`), an index range scan.
JOBS_BY_PREFIX = f"""
SELECT id, task, status FROM jobs
WHERE id BETWEEN %(low)s::{JOB_ID_TYPE} AND %(high)s::{JOB_ID_TYPE}
ORDER BY id LIMIT %(limit)s
"""

# A tail (ids made together share their start; their last characters are random): one
# probe of the documents' index of tails on their last 8 characters (schema v42), the
# whole tail checked on what it finds, each job's status read where the view reads it. No
# ORDER BY: with LIMIT, a planner whose statistics lag would rather walk the primary
# key in order (every job id) than sort the one or two rows the probe finds.
JOBS_BY_SUFFIX = """
SELECT id, task, status FROM jobs
WHERE right(id::text, 8) = %(tail)s AND right(id::text, %(n)s) = %(suffix)s
LIMIT %(limit)s
"""
