"""The statements of a claim by fair shares (`heartq.store.sql.fair`, which says how it
takes turns). Not re-exported by `queries`: only this dialect has them
(`Dialect.fair`), and the two dialects' `queries` hold the same names."""

from __future__ import annotations

from heartq.store.sqlite.queries.claim import (
    _CLAIM_RETURNING,
    _CLAIM_SET,
    _UNKEYED_QUEUED,
    _due_rowids,
    _untagged_due,
)


# What every job that takes turns is: queued, without a concurrency or a rate key (those
# have their own claims), with a fairness key, tagged (`_TAGGED`, the fair claim index's
# predicate) or not yet (`_UNTAGGED`, the fair due index's); and the jobs without a key
# (`_UNKEYED_QUEUED`, the claim index's). Named so that each statement implies its index's
# predicate.
def _turns(j: str = "") -> str:
    """The predicate of a job that takes turns, its columns named through alias `j`."""
    return f"""{j}status = 'queued' AND {j}concurrency_key IS NULL AND {j}rate_key IS NULL
      AND {j}fair_key IS NOT NULL"""


_TAGGED = f"{_turns()} AND fair_tag IS NOT NULL"
_UNTAGGED = f"{_turns()} AND fair_tag IS NULL"

# The start where a share's next job goes in its tier: its finish, unless the tier's
# clock has passed it (then the clock: no credit for time without work). `c` is the
# tier's row of heartq_fair_clocks, `f` the share's (a key's, or '' for the jobs without
# one) of heartq_fair_finishes. A key's finish is pulled back to where its served jobs
# end (`served`) whenever its line empties (`LEFT_LINE`, `left_line`): so a key whose
# backlog was cancelled owes nothing for it, while one that ran its jobs owes their turns.
_START = "max(coalesce(c.clock, 0.0), coalesce(f.finish, 0.0))"


# The runnable jobs that take turns and have no tag, in :queues, oldest first, at most
# :most, each given its start tag: the first of a key in this statement at `_START`, each
# next one a step of one over its weight after the one before. Rows: each job tagged, with
# its key's new finish (its tag plus its step), which `STORE_FINISHES` keeps with the
# jobs the key now has in line.
TAG_DUE = f"""
WITH due AS MATERIALIZED (
    SELECT rowid AS r, queue, priority, fair_key, run_at, id,
           1.0 / coalesce(fair_weight, 1.0) AS step
    FROM heartq_jobs INDEXED BY heartq_jobs_fair_due_idx
    WHERE {_UNTAGGED} AND queue IN (SELECT value FROM json_each(:queues)) AND run_at <= :now
    ORDER BY run_at, id
    LIMIT :most
), tagged AS (
    SELECT d.r, {_START} + coalesce(sum(d.step) OVER (
               PARTITION BY d.queue, d.priority, d.fair_key ORDER BY d.run_at, d.id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS tag
    FROM due AS d
    LEFT JOIN heartq_fair_clocks AS c ON c.queue = d.queue AND c.priority = d.priority
    LEFT JOIN heartq_fair_finishes AS f
      ON f.queue = d.queue AND f.priority = d.priority AND f.fair_key = d.fair_key
)
UPDATE heartq_jobs SET fair_tag = tagged.tag
FROM tagged WHERE heartq_jobs.rowid = tagged.r
RETURNING queue, priority, fair_key, fair_tag + 1.0 / coalesce(fair_weight, 1.0) AS finish
"""

# The first :limit jobs in the order of the turns, across :queues: per queue, its tagged
# jobs in index order (priority, then tag), and its jobs without a key, whose share is
# tagged here as a key's would be (the `n`th of a tier at `_START` + n - 1, over the key
# ''); merged by priority, then by each tag less its tier's clock (so the tiers of
# several queues go side by side, whatever their clocks), then id. Each queue's walks stop
# at :limit entries (SQLite takes no LIMIT from an outer row: one bound for all). Rows
# (rowid, queue, priority, key, tag, step), in claim order; the key '' for a job without
# one.
FAIR_CHOSEN = f"""
WITH q(queue) AS MATERIALIZED (SELECT DISTINCT value FROM json_each(:queues)),
keyed AS (
    SELECT j.rowid AS r, j.queue, j.priority, j.fair_key AS key, j.fair_tag AS tag,
           1.0 / coalesce(j.fair_weight, 1.0) AS step, j.id
    FROM q CROSS JOIN heartq_jobs AS j
    WHERE j.rowid IN (
        SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
        WHERE {_TAGGED} AND queue = q.queue AND run_at <= :now
        ORDER BY priority DESC, fair_tag, id LIMIT :limit)
), plain AS (
    SELECT j.rowid AS r, j.queue, j.priority, j.run_at, j.id
    FROM q CROSS JOIN heartq_jobs AS j
    WHERE j.rowid IN ({_due_rowids("q.queue")})
), shares AS (
    SELECT r, queue, priority, key, tag, step, id FROM keyed
    UNION ALL
    SELECT p.r, p.queue, p.priority, '',
           {_START} + row_number() OVER (PARTITION BY p.queue, p.priority
                                         ORDER BY p.run_at, p.id) - 1,
           1.0, p.id
    FROM plain AS p
    LEFT JOIN heartq_fair_clocks AS c ON c.queue = p.queue AND c.priority = p.priority
    LEFT JOIN heartq_fair_finishes AS f
      ON f.queue = p.queue AND f.priority = p.priority AND f.fair_key = ''
)
SELECT s.r, s.queue, s.priority, s.key, s.tag, s.step
FROM shares AS s
LEFT JOIN heartq_fair_clocks AS c ON c.queue = s.queue AND c.priority = s.priority
ORDER BY s.priority DESC, s.tag - coalesce(c.clock, 0.0), s.id
LIMIT :limit
"""

# The jobs the turns chose (:rowids, as FAIR_CHOSEN gave them in this transaction),
# claimed as every claim claims (still queued: SQLite has one writer, so they are). By
# rowid, not id: a seek of the table, not of the id's index then the table.
CLAIM_CHOSEN = f"""{_CLAIM_SET}WHERE rowid IN (SELECT value FROM json_each(:rowids))
  AND status = 'queued'
{_CLAIM_RETURNING}"""

# The claim by turns of one queue (:queue) none of whose queued jobs lacks a key: the
# first :limit of its line, in the order FAIR_CHOSEN gives them there (priority, then
# tag, then id: one tier's clock does not reorder its own tags), claimed in the same
# statement, one walk of the fair claim index as CLAIM_ONE_QUEUE walks the claim index.
# Each row carries after the claimed columns what the turns move (`fair.advance`): its
# key, the tag it kept and its step. Claims nothing where a job without a key is queued
# in the queue (its share is tagged by FAIR_CHOSEN): the claim then takes the two steps;
# nor where a job that takes turns waits there due and untagged (TAG_DUE first), so that
# a claim whose last one took turns may run it before asking what waits (`claim_line`).
# Queued, not runnable: one probe of the claim index, where "runnable" walked every
# delayed job of the queue without statistics (100,000: 7 ms a claim, 0.24 without).
CLAIM_TURNS_ONE_QUEUE = f"""{_CLAIM_SET}WHERE rowid IN (
    SELECT rowid FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
    WHERE {_TAGGED} AND queue = :queue AND run_at <= :now
    ORDER BY priority DESC, fair_tag, id
    LIMIT :limit)
  AND NOT EXISTS (SELECT 1 FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                  WHERE {_UNKEYED_QUEUED} AND queue = :queue)
  AND NOT {_untagged_due("queue = :queue")}
{_CLAIM_RETURNING.rstrip()},
          fair_key, fair_tag, 1.0 / coalesce(fair_weight, 1.0) AS step
"""

# The tiers' clocks moved to the last tag a claim took there ([queue, priority, clock]);
# a clock never goes back.
STORE_CLOCKS = """
INSERT INTO heartq_fair_clocks (queue, priority, clock)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
FROM json_each(:clocks) WHERE true
ON CONFLICT (queue, priority) DO UPDATE SET clock = max(clock, excluded.clock)
"""

# The keys' new finishes and how many of their jobs came into line ([queue, priority,
# key, finish, jobs]); a finish never goes back.
STORE_FINISHES = """
INSERT INTO heartq_fair_finishes (queue, priority, fair_key, finish, waiting, served)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), 0.0
FROM json_each(:finishes) WHERE true
ON CONFLICT (queue, priority, fair_key) DO UPDATE
SET finish = max(finish, excluded.finish), waiting = waiting + excluded.waiting
"""

# How many of each key's jobs left the line, claimed, and where its served jobs end
# ([queue, priority, key, jobs, served]: the last tag claimed plus its step); a key whose
# line empties has its finish there (`_START`).
LEFT_LINE = """
UPDATE heartq_fair_finishes AS f
SET waiting = max(0, f.waiting - x.n), served = max(f.served, x.served),
    finish = CASE WHEN f.waiting - x.n <= 0 THEN max(f.served, x.served) ELSE f.finish END
FROM (SELECT json_extract(value, '$[0]') AS queue, json_extract(value, '$[1]') AS priority,
             json_extract(value, '$[2]') AS fair_key, json_extract(value, '$[3]') AS n,
             json_extract(value, '$[4]') AS served
      FROM json_each(:left)) AS x
WHERE f.queue = x.queue AND f.priority = x.priority AND f.fair_key = x.fair_key
"""


def left_line(source: str, jobs: str) -> str:
    """A statement that counts out of their keys' lines the tagged jobs a statement is
    about to take out of line without a claim (a cancel, a re-route), to run just before
    it in its transaction: the rows of `source` (`heartq_jobs AS j` and what else the
    condition needs) that `jobs` selects. A key whose line empties so has its finish
    pulled back to where its served jobs end: it owes nothing for jobs it never ran."""
    return f"""
UPDATE heartq_fair_finishes AS f
SET waiting = max(0, f.waiting - x.n),
    finish = CASE WHEN f.waiting - x.n <= 0 THEN f.served ELSE f.finish END
FROM (SELECT j.queue, j.priority, j.fair_key, count(*) AS n FROM {source}
      WHERE {jobs} AND {_turns("j.")} AND j.fair_tag IS NOT NULL
      GROUP BY j.queue, j.priority, j.fair_key) AS x
WHERE f.queue = x.queue AND f.priority = x.priority AND f.fair_key = x.fair_key
"""


# The finishes that say nothing any more: a share's with no job in line whose finish the
# tier's clock has passed (its next job starts at the clock, with or without its row).
PRUNE_FAIR_FINISHES = """
DELETE FROM heartq_fair_finishes
WHERE waiting <= 0
  AND finish <= (SELECT c.clock FROM heartq_fair_clocks AS c
                 WHERE c.queue = heartq_fair_finishes.queue
                   AND c.priority = heartq_fair_finishes.priority)
"""
