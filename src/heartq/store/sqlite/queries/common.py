"""What every statement module shares: the time (`NOW`; the others are given it as
`:now`)."""

from __future__ import annotations

NOW = "SELECT (julianday('now') - 2440587.5) * 86400.0"

# The time of a read that judges what is due in its own snapshot (`HAS_PENDING`): read by
# the statement itself (`'now'` is one value a statement, read once it runs, its snapshot
# taken), not by a statement before it, against which a job another connection made
# runnable in between (its time, later, its `run_at`) was seen but not due, and a drain
# or a burst worker stopped with it queued (the PostgreSQL dialect's `T_SNAPSHOT`).
NOW_IN_SNAPSHOT = "coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)"

# The current time on a caller's connection (`julianday('now')` is it in any transaction).
WALL_CLOCK = "SELECT (julianday('now') - 2440587.5) * 86400.0 AS now"

# The worker's lease, as in the PostgreSQL dialect's `queries/common.py`. SQLite's
# two-argument `max` is NULL when either is: a worker without a row (or a lease) counts
# as the floor alone.
EFFECTIVE_LEASE = """CASE WHEN j.detached_until IS NOT NULL THEN j.detached_until
         ELSE max(j.lease_expires_at, coalesce(w.lease_expires_at, j.lease_expires_at)) END"""
EFFECTIVE_BEAT = """CASE WHEN j.detached_until IS NOT NULL THEN j.heartbeat_at
         ELSE max(j.heartbeat_at, coalesce(w.last_heartbeat_at, j.heartbeat_at)) END"""
