"""Only PostgreSQL: the advisory lock each worker's session holds while it lives, and the
probes that try those locks (a lock a probe can take belongs to a worker whose session
is gone)."""

from __future__ import annotations

from heartq.store.postgres.queries.common import LOCK_NAMESPACE, PROBE_KEY, T

# A liveness probe starts with the probe's time (T), the server's uptime (real clock: a
# restart frees every lock) and the probe lock, taken for the transaction.
PROBE_START = f"""
SELECT extract(epoch from {T})::float8 AS now,
       extract(epoch from now() - pg_postmaster_start_time())::float8 AS uptime,
       pg_try_advisory_xact_lock({PROBE_KEY}) AS alone
"""

# One query tries every active worker's liveness lock; the transaction's end releases
# the locks it took. A lock it can take belongs to a worker whose session is gone. Since
# when probes have found it free is kept in the worker's row (`lock_free_since`), not in
# the prober's memory: the grace spans the probes of every worker, so a suspicion
# survives its prober (killed, frozen, restarted) and the probe lock going to another.
# A lock found held again clears it. Rows a frozen session keeps locked are skipped.
# Returns each free worker with since when it has been free (this probe's time if new).
PROBE_LIVENESS = f"""
WITH free AS MATERIALIZED (
    SELECT id, lock_free_since FROM workers
    WHERE status = 'active' AND liveness_lock
      AND pg_try_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(id))
), held AS (
    UPDATE workers SET lock_free_since = NULL
    WHERE id IN (SELECT id FROM workers
                 WHERE lock_free_since IS NOT NULL AND id NOT IN (SELECT id FROM free)
                 FOR UPDATE SKIP LOCKED)
), marked AS (
    UPDATE workers SET lock_free_since = {T}
    WHERE id IN (SELECT w.id FROM workers AS w JOIN free ON free.id = w.id
                 WHERE free.lock_free_since IS NULL
                 FOR UPDATE OF w SKIP LOCKED)
)
SELECT id, extract(epoch from coalesce(lock_free_since, {T}))::float8 AS free_since FROM free
"""

# What the probes suspect: active workers found with a free lock, and since when.
LIVENESS_SUSPECTS = """
SELECT id, extract(epoch from lock_free_since)::float8 AS free_since FROM workers
WHERE status = 'active' AND lock_free_since IS NOT NULL
"""

# Right after a server start every lock is free: what was suspected is forgotten.
FORGET_SUSPECTS = """
UPDATE workers SET lock_free_since = NULL
WHERE id IN (SELECT id FROM workers WHERE lock_free_since IS NOT NULL FOR UPDATE SKIP LOCKED)
"""

# The same test for the given workers only, read only (operator commands); none while
# the server has been up for less than `quiet` seconds (a restart frees every lock).
LIVENESS_FREE = f"""
SELECT id FROM workers
WHERE status = 'active' AND id = ANY(%(ids)s::text[]) AND liveness_lock
  AND extract(epoch from now() - pg_postmaster_start_time()) >= %(quiet)s
  AND pg_try_advisory_xact_lock({LOCK_NAMESPACE}, hashtext(id))
"""

LIVENESS_LOCK = f"SELECT pg_try_advisory_lock({LOCK_NAMESPACE}, hashtext(%(worker_id)s)) AS locked"

LIVENESS_UNLOCK = f"SELECT pg_advisory_unlock({LOCK_NAMESPACE}, hashtext(%(worker_id)s)) AS done"

PING = "SELECT 1"
