"""The statements of a claim by fair shares (`heartq.store.sql.fair`, which says how it
decides). Not re-exported by `queries`: only this dialect has them so far
(`Dialect.fair`), and the two dialects' `queries` hold the same names."""

from __future__ import annotations

from heartq.store.sqlite.queries.claim import _CLAIM_RETURNING, _CLAIM_SET

# What every runnable job of a share is: queued, without a concurrency or a rate key
# (those have their own claims), in the claim's queues. Named so that each statement
# implies its index's predicate.
_KEYED = """status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND fair_key IS NOT NULL"""

# The keys with jobs queued in these queues, each found by one probe of the index past
# the one before (a skip scan: a key's backlog is jumped over, not read).
FAIR_KEYS = f"""
WITH RECURSIVE k(queue, key) AS (
    SELECT q.value, (SELECT fair_key FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                     WHERE {_KEYED} AND queue = q.value
                     ORDER BY fair_key LIMIT 1)
    FROM (SELECT DISTINCT value FROM json_each(:queues)) AS q
    UNION ALL
    SELECT k.queue, (SELECT fair_key FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
                     WHERE {_KEYED} AND queue = k.queue AND fair_key > k.key
                     ORDER BY fair_key LIMIT 1)
    FROM k WHERE k.key IS NOT NULL
)
SELECT queue, key FROM k WHERE key IS NOT NULL
"""

# One key's first `limit` runnable jobs, in its own order.
FAIR_SHARE_JOBS = f"""
SELECT id, priority, fair_weight FROM heartq_jobs INDEXED BY heartq_jobs_fair_claim_idx
WHERE {_KEYED} AND queue = :queue AND fair_key = :key AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :limit
"""

# The first `limit` runnable jobs without a key, as the plain claim walks them.
UNKEYED_SHARE_JOBS = """
SELECT id, queue, priority FROM heartq_jobs INDEXED BY heartq_jobs_claim_idx
WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
  AND fair_key IS NULL AND queue IN (SELECT value FROM json_each(:queues))
  AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :limit
"""

# The shares' stored virtual times ([queue, key] pairs), and their queues' clocks (key
# NULL).
FAIR_TIMES = """
SELECT s.queue, s.fair_key AS key, s.served
FROM json_each(:shares) AS x
JOIN heartq_fair_shares AS s
  ON s.queue = json_extract(x.value, '$[0]') AND s.fair_key = json_extract(x.value, '$[1]')
UNION ALL
SELECT c.queue, NULL, c.clock FROM heartq_fair_clocks AS c
WHERE c.queue IN (SELECT json_extract(value, '$[0]') FROM json_each(:shares))
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
