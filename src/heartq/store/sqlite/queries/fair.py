"""The statements of a claim by fair shares (`heartq.store.sql.fair`, which says how it
decides). Not re-exported by `queries`: only this dialect has them so far
(`Dialect.fair`), and the two dialects' `queries` hold the same names."""

from __future__ import annotations

from heartq.store.sqlite.queries.claim import _CLAIM_RETURNING, _CLAIM_SET

# What every runnable job of a share is: queued, without a concurrency or a rate key
# (those have their own claims), with a fairness key (`_KEYED`) or without (`_UNKEYED`).
# Named so that each statement implies its index's predicate (the fair claim index's,
# the claim index's).
_KEYED = """status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL"""
_UNKEYED = """status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NULL"""


def _first(index: str, share: str) -> str:
    """The ids (rowids) of the first `reach` runnable jobs of the share `b` of
    `FAIR_CANDIDATES` (`share`: its condition on the index `index`), in its own order:
    a walk of its range of the index, stopped there (no table read)."""
    return f"""(SELECT rowid FROM heartq_jobs INDEXED BY {index}
            WHERE {share} AND queue = b.queue AND run_at <= :now
            ORDER BY priority DESC, run_at, id
            LIMIT (SELECT n FROM reach))"""


_KEYED_FIRST = _first("heartq_jobs_fair_claim_idx", f"{_KEYED} AND fair_key = b.key")
_UNKEYED_FIRST = _first("heartq_jobs_claim_idx", _UNKEYED)

# Everything a claim by fair shares decides on, in one statement, by `kind`: 0, the
# claim's queues' stored clocks; 1, its shares (a queue and a key, '' for the queue's
# jobs without one), each with its weight (its first runnable job's), its stored virtual
# time, and `reach`, how many jobs of each share are read; 2, each share's first `reach`
# runnable jobs (id, priority, run_at), in no order (sorted in Python: a fifth of the
# statement's time when SQLite sorted them).
#
# The shares: each queue's keys, found by one probe each of the fair claim index past
# the key before (a skip scan: a key's backlog is jumped over, not read), and its jobs
# without a key (the claim index). So the cost grows with the keys queued (a few probes
# and at most `reach` index entries each), never with a backlog.
#
# `reach`: not `limit` jobs of every share, as many as one could take. Were every
# share's jobs endless and of one priority, the claim would give each share about
# `weight x (level - ahead)` slots (`ahead`: its time past its queue's clock), where
# `level`, the virtual time the claim reaches, spreads the `limit` slots over the
# shares' weights; rounded down for each share, the level is at most `count / weight`
# higher. The most of those over the shares, and one more (`limit` at most), is read of
# each (one bound for all: SQLite takes no LIMIT from an outer row). A share that took
# every job read and may have more (fewer runnable jobs elsewhere, a higher priority)
# could have taken more: then the shares are read again with `:exact`, `limit` each
# (`store/sql/fair.py`).
FAIR_CANDIDATES = f"""
WITH RECURSIVE q(queue) AS (SELECT DISTINCT value FROM json_each(:queues)),
k(queue, key) AS (
    SELECT q.queue, (SELECT fair_key FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                     WHERE {_KEYED} AND queue = q.queue
                     ORDER BY fair_key LIMIT 1)
    FROM q
    UNION ALL
    SELECT k.queue, (SELECT fair_key FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                     WHERE {_KEYED} AND queue = k.queue AND fair_key > k.key
                     ORDER BY fair_key LIMIT 1)
    FROM k WHERE k.key IS NOT NULL
),
found(queue, key, weight) AS (
    SELECT k.queue, k.key,
           (SELECT coalesce(fair_weight, 1.0) FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
            WHERE {_KEYED} AND queue = k.queue AND fair_key = k.key AND run_at <= :now
            ORDER BY priority DESC, run_at, id LIMIT 1)
    FROM k WHERE k.key IS NOT NULL
    UNION ALL
    SELECT q.queue, '', (SELECT 1.0 FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
                         WHERE {_UNKEYED} AND queue = q.queue AND run_at <= :now LIMIT 1)
    FROM q
),
shares(queue, key, weight, served, ahead) AS MATERIALIZED (
    SELECT f.queue, f.key, f.weight, s.served,
           max(coalesce(s.served, c.clock, 0.0), coalesce(c.clock, 0.0)) - coalesce(c.clock, 0.0)
    FROM found AS f
    LEFT JOIN heartq_fair_clocks AS c ON c.queue = f.queue
    LEFT JOIN heartq_fair_shares AS s ON s.queue = f.queue AND s.fair_key = f.key
    WHERE f.weight IS NOT NULL
),
level(at, spread) AS (
    SELECT (:limit + sum(weight * ahead)) / sum(weight), count(*) / sum(weight) FROM shares
),
reach(n) AS MATERIALIZED (
    SELECT CASE WHEN :exact THEN :limit
                ELSE min(:limit, max(0, max(CAST(weight * (at + spread - ahead) AS INTEGER))) + 1)
           END
    FROM shares, level
),
b(queue, key) AS MATERIALIZED (SELECT queue, key FROM shares)
SELECT 0 AS kind, c.queue, NULL, NULL, NULL, NULL, c.clock, NULL, NULL
FROM q JOIN heartq_fair_clocks AS c ON c.queue = q.queue
UNION ALL
SELECT 1, queue, key, NULL, NULL, NULL, weight, served, n FROM shares, reach
UNION ALL
SELECT 2, b.queue, b.key, j.id, j.priority, j.run_at, NULL, NULL, NULL
FROM b CROSS JOIN heartq_jobs AS j
WHERE b.key <> '' AND j.rowid IN {_KEYED_FIRST}
UNION ALL
SELECT 2, b.queue, b.key, j.id, j.priority, j.run_at, NULL, NULL, NULL
FROM b CROSS JOIN heartq_jobs AS j
WHERE b.key = '' AND j.rowid IN {_UNKEYED_FIRST}
"""

# The jobs the allotment chose, claimed as every claim claims (still queued: SQLite has
# one writer, so they are).
CLAIM_CHOSEN = f"""{_CLAIM_SET}WHERE id IN (SELECT value FROM json_each(:ids))
  AND status = 'queued'
{_CLAIM_RETURNING}"""

# The new virtual times ([queue, key, served]) and clocks ([queue, clock]).
STORE_FAIR_TIMES = (
    """
INSERT INTO heartq_fair_shares (queue, fair_key, served, served_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
       json_extract(value, '$[2]'), :now
FROM json_each(:served) WHERE true
ON CONFLICT (queue, fair_key) DO UPDATE SET served = excluded.served,
                                            served_at = excluded.served_at
""",
    """
INSERT INTO heartq_fair_clocks (queue, clock)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
FROM json_each(:clocks) WHERE true
ON CONFLICT (queue) DO UPDATE SET clock = excluded.clock
""",
)

# Shares no claim served for `idle` seconds: their time is forgotten (a share that comes
# back starts at its queue's clock, as it would anyway).
PRUNE_FAIR_SHARES = """
DELETE FROM heartq_fair_shares WHERE served_at < :now - :idle
"""
