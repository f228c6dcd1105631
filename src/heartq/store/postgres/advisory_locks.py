"""PostgreSQL liveness: a session advisory lock per worker, and a probe that believes a
free lock only once it has stayed free for a grace period.

A worker holds `pg_advisory_lock(LOCK_NAMESPACE, hashtext(worker_id))` on a session it
keeps for its life (`session.py`, shared with its LISTENs); the server frees it the
instant that session ends, which is when the process dies. But a session can also end
under a living worker (a server restart or failover, a network reset,
`idle_session_timeout`, `pg_terminate_backend`), so the session's thread takes it again
on a new session, and the probe (`AdvisoryLiveness.gone`, `liveness.py`) waits for a lock to
stay free for `LIVENESS_GRACE` before it reclaims. Since when a lock has been found free
is kept in the worker's row (`workers.lock_free_since`), not in a prober's memory: in a
fleet whose workers die, freeze and restart, and whose probes take turns (`PROBE_KEY`),
no single prober may watch a lock for the whole grace, and a gone worker whose jobs only
the probe could reclaim would wait for its lease.
"""

from __future__ import annotations

from typing import Any

import psycopg

from heartq.store.postgres import queries as q

LIVENESS_GRACE = 3.0
"""Defaults to 3 s: how long a worker's liveness lock must stay free, on consecutive
probes (database time), before the probe takes the worker for gone. A session that
dropped under a living worker is taken again well within it (`LOCK_CHECK_INTERVAL`)."""
LIVENESS_RESTART_QUIET = 3 * LIVENESS_GRACE
"""Defaults to 9 s (3 x `LIVENESS_GRACE`): no liveness probe while the server has been up
for less than this, nor from a process whose own lock session was opened again less than
this ago (or is still down). A restart or a failover ends every session, so every lock is
free at once until each living worker has reconnected and taken its own again; a promoted
standby's uptime is that of its postmaster, days maybe, so the prober's own session is
what tells it."""
LOCK_CHECK_INTERVAL = 0.5
"""Defaults to 0.5 s between two checks of the session that holds a worker's liveness lock
(and between two attempts to take the lock again once a new session is open)."""
RELEASE_TIMEOUT = 2.0
"""Seconds `close()` waits for a session's thread to stop (it closes its session)."""

LOCK_NAMESPACE = q.LOCK_NAMESPACE
PROBE_NAMESPACE = q.PROBE_NAMESPACE

Conn = psycopg.Connection[Any]
