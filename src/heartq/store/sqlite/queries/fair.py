"""The statements of a claim by fair shares (`heartq.store.sql.fair`, which says how it
takes turns). Not re-exported by `queries`: only this dialect has them
(`Dialect.fair`), and the two dialects' `queries` hold the same names."""

from __future__ import annotations

from heartq.store.sqlite.queries.claim import _CLAIM_RETURNING, _CLAIM_SET

# What every runnable job of a lane is: queued, without a concurrency or a rate key
# (those have their own claims), with a fairness key (`_KEYED`) or without (`_UNKEYED`).
# Named so that each statement implies its index's predicate (the fair claim index's,
# the claim index's).
_KEYED = """status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL"""
_UNKEYED = """status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL"""


def _priorities(cte: str, index: str, jobs: str) -> str:
    """The CTE `cte(queue, priority)`: each queue's priorities that have `jobs`, highest
    first, one probe of `index` past the priority before each (a skip scan: a priority's
    keys and backlog are jumped over); a NULL priority ends a queue's walk."""
    return f"""{cte}(queue, priority) AS (
    SELECT q.queue, (SELECT priority FROM heartq_jobs INDEXED BY {index}
                     WHERE {jobs} AND queue = q.queue ORDER BY priority DESC LIMIT 1)
    FROM q
    UNION ALL
    SELECT {cte}.queue, (SELECT priority FROM heartq_jobs INDEXED BY {index}
                      WHERE {jobs} AND queue = {cte}.queue AND priority < {cte}.priority
                      ORDER BY priority DESC LIMIT 1)
    FROM {cte} WHERE {cte}.priority IS NOT NULL
),"""


# The claim's tiers (a queue and a priority with jobs that take turns, highest priority
# first) and each tier's cursor (NULL: none stored). Each queue's priorities are found
# by one probe each of the two indexes past the priority before (`_priorities`), so the
# cost grows with the priorities queued, never with the keys or the jobs.
FAIR_TIERS = f"""
WITH RECURSIVE q(queue) AS (SELECT DISTINCT value FROM json_each(:queues)),
{_priorities("kp", "heartq_jobs_fair_claim_idx", _KEYED)}
{_priorities("up", "heartq_jobs_claim_idx", _UNKEYED)}
tiers(queue, priority) AS (
    SELECT queue, priority FROM kp WHERE priority IS NOT NULL
    UNION
    SELECT queue, priority FROM up WHERE priority IS NOT NULL
)
SELECT t.queue, t.priority, c.turn_key, c.remaining
FROM tiers AS t
LEFT JOIN heartq_fair_turns AS c ON c.queue = t.queue AND c.priority = t.priority
ORDER BY t.priority DESC, t.queue
"""

# Whether a row of FAIR_LANES' walk is a lane of the rotation: a key (not the walk's
# start when that is only where it starts, nor the '' that restarts it at the first key),
# past the start (phase 1) or up to it (phase 2).
_LANE = """({w}.key IS NOT NULL AND {w}.key <> '' AND CASE WHEN {w}.phase = 1
          THEN {w}.key <> {w}.start OR {w}.incl
          ELSE {w}.key < {w}.start OR (NOT {w}.incl AND {w}.key = {w}.start) END)"""

# The lanes of one priority's tiers (:tiers, [[queue, start, from]]: the rotation starts
# at the key `start`, itself included when `from` is 1) in rotation, at most :need keyed
# lanes with a runnable job a tier: the keys past the start, then from the first key up
# to the start (phase 2), each found by one probe of the fair claim index past the key
# before (a skip scan) and its first runnable job's weight by one more (NULL: none due
# yet, a lane passed over). The jobs without a key: one probe of the claim index a tier.
# Rows: (queue, key, phase, weight), the unkeyed lane with key ''.
FAIR_LANES = f"""
WITH RECURSIVE t(queue, start, incl) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
    FROM json_each(:tiers)
),
w(queue, start, incl, phase, key, found) AS (
    SELECT queue, start, incl, 1, start, 0 FROM t
    UNION ALL
    SELECT w.queue, w.start, w.incl,
           CASE WHEN w.key IS NULL THEN 2 ELSE w.phase END,
           CASE WHEN w.key IS NULL THEN ''
                ELSE (SELECT fair_key FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                      WHERE {_KEYED} AND queue = w.queue AND priority = :priority
                        AND fair_key > w.key ORDER BY fair_key LIMIT 1) END,
           w.found + ({_LANE.format(w="w")} AND EXISTS (
               SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
               WHERE {_KEYED} AND queue = w.queue AND priority = :priority
                 AND fair_key = w.key AND run_at <= :now))
    FROM w
    WHERE (w.key IS NOT NULL OR w.phase = 1) AND w.found < :need
      AND NOT (w.phase = 2 AND w.key <> ''
               AND (w.key > w.start OR (w.incl AND w.key = w.start)))
),
lanes(queue, key, phase, weight) AS (
    SELECT queue, key, phase,
           (SELECT coalesce(fair_weight, 1.0) FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
            WHERE {_KEYED} AND queue = w.queue AND priority = :priority
              AND fair_key = w.key AND run_at <= :now
            ORDER BY run_at, id LIMIT 1)
    FROM w WHERE {_LANE.format(w="w")}
)
SELECT queue, key, phase, weight FROM lanes WHERE weight IS NOT NULL
UNION ALL
SELECT t.queue, '', 0, 1.0 FROM t
WHERE EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
              WHERE {_UNKEYED} AND queue = t.queue AND priority = :priority AND run_at <= :now)
"""

# Each lane's first :cap runnable jobs (:lanes, [[queue, key]], key '' for the jobs
# without one) of one priority, rows (queue, key, id, run_at, rowid) in no order: a walk
# of its range of its index, stopped there (no table read), and each job read by its
# rowid. One bound for all (SQLite takes no LIMIT from an outer row): the most any lane's
# rounds in this claim can take.
FAIR_JOBS = f"""
WITH l(queue, key) AS MATERIALIZED (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:lanes)
)
SELECT l.queue, l.key, j.id, j.run_at, j.rowid
FROM l CROSS JOIN heartq_jobs AS j
WHERE l.key <> '' AND j.rowid IN (
    SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
    WHERE {_KEYED} AND queue = l.queue AND priority = :priority AND fair_key = l.key
      AND run_at <= :now
    ORDER BY run_at, id LIMIT :cap)
UNION ALL
SELECT l.queue, l.key, j.id, j.run_at, j.rowid
FROM l CROSS JOIN heartq_jobs AS j
WHERE l.key = '' AND j.rowid IN (
    SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
    WHERE {_UNKEYED} AND queue = l.queue AND priority = :priority AND run_at <= :now
    ORDER BY run_at, id LIMIT :cap)
"""

# The jobs the turns chose (:rowids, as FAIR_JOBS gave them in this transaction), claimed
# as every claim claims (still queued: SQLite has one writer, so they are). By rowid, not
# id: a seek of the table, not of the id's index then the table.
CLAIM_CHOSEN = f"""{_CLAIM_SET}WHERE rowid IN (SELECT value FROM json_each(:rowids))
  AND status = 'queued'
{_CLAIM_RETURNING}"""

# The tiers' new cursors ([queue, priority, turn_key, remaining]).
STORE_FAIR_TURNS = """
INSERT INTO heartq_fair_turns (queue, priority, turn_key, remaining, turned_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
       json_extract(value, '$[2]'), json_extract(value, '$[3]'), :now
FROM json_each(:turns) WHERE true
ON CONFLICT (queue, priority) DO UPDATE SET turn_key = excluded.turn_key,
                                            remaining = excluded.remaining,
                                            turned_at = excluded.turned_at
"""

# Cursors no claim moved for `idle` seconds: forgotten (the tier starts from its first
# lane again).
PRUNE_FAIR_TURNS = """
DELETE FROM heartq_fair_turns WHERE turned_at < :now - :idle
"""
