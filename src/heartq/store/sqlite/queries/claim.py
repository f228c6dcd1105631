"""The claim: runnable jobs put under a worker's lease, each as a new execution. Jobs
without a key (`CLAIM`, `CLAIM_ONE_QUEUE`, a transport's `CLAIM_IDS`), and what a
transport's sweeper publishes (`DUE_FOR_PUBLISH`); those with a concurrency or a rate
key are `keyed.py`'s, those with a fairness key `fair.py`'s, which take from here what
every claim sets and answers (`_CLAIM_SET`, `_CLAIM_RETURNING`) and the walk of an
index's due jobs (`_due_in_order`)."""

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


# The rowids of the due jobs of one range of an index in claim order (`index`; `held`:
# its predicate and any filter; `range_`: its leading columns' values, after which it is
# ordered by priority, `run_at`, id), at most `most`, best first. In one walk in that
# order each priority's delayed jobs (not due yet) lie right after its due ones, and a
# claim that found fewer due jobs than it may take walked every delayed job of the range
# (100,000 delayed in a queue: 14 ms a claim; 50,000 of a rate key: 17 ms a claim and
# its finish). So the walk names the range's priorities (`level`, found one seek each,
# highest first): SQLite then walks each priority as a range that ends at its first job
# not due yet, the priorities in the index's order (no sort), and stops at `most`.
def _due_in_order(index: str, held: str, range_: str, most: str) -> str:
    """The due jobs' walk of one range, its priorities one by one, as a query."""
    return f"""SELECT rowid FROM heartq_jobs INDEXED BY {index}
        WHERE {held} AND {range_} AND run_at <= :now
          AND priority IN (
              WITH RECURSIVE level(p) AS (
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY {index}
                          WHERE {held} AND {range_}
                          ORDER BY priority DESC LIMIT 1)
                  UNION ALL
                  SELECT (SELECT priority FROM heartq_jobs INDEXED BY {index}
                          WHERE {held} AND {range_} AND priority < level.p
                          ORDER BY priority DESC LIMIT 1)
                  FROM level WHERE level.p IS NOT NULL
              )
              SELECT p FROM level)
        ORDER BY priority DESC, run_at, id
        LIMIT {most}"""


def _due_rowids(queue: str) -> str:
    """The rowids of the first :limit due jobs without a key of queue `queue` (an SQL
    expression), best first."""
    return _due_in_order("heartq_jobs_claim_idx", _UNKEYED_QUEUED, f"queue = {queue}", ":limit")


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
