"""PostgreSQL's liveness locks, as the store uses them: held on the store's lasting
session, probed, and judged at a restarted worker's reconciliation.

Why an object of its own and not store hooks: a liveness lock is a session advisory lock
(`advisory_locks.py`, which says why a free lock is believed only after a grace), held
on a session that lives as long as the worker (`session.py`), not a statement of a
transaction; the SQL store only asks it, through `Liveness` (`store/sql/base.py`), which
workers' locks stayed free for the grace (`gone`: the probe reclaims their jobs in the
transaction it opens) and whether a namesake's lock is free.
Behind a transaction-mode pooler without a direct URL workers hold none (`NoLock`,
recorded in their row so no probe tries it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from heartq.model import LivenessChange
from heartq.store.link import LivenessHandle
from heartq.store.postgres import queries as q
from heartq.store.postgres.advisory_locks import LIVENESS_GRACE, LIVENESS_RESTART_QUIET
from heartq.store.postgres.pooler import NoLock
from heartq.store.postgres.session import LastingSession
from heartq.store.sql.base import Dialect, FoundGone


class AdvisoryLiveness:
    """`Liveness` by session advisory locks (see the module docstring)."""

    def __init__(self, dialect: Dialect, sessions: LastingSession, holds_lock: bool) -> None:
        self.d = dialect
        self.sessions = sessions
        self.holds_lock = holds_lock
        self.grace = LIVENESS_GRACE
        self.restart_quiet = LIVENESS_RESTART_QUIET

    def hold(
        self, worker_id: str, on_change: Callable[[LivenessChange], None] | None = None
    ) -> LivenessHandle:
        """Hold `worker_id`'s liveness lock on the store's shared session (`session.py`);
        behind a transaction-mode pooler without a direct URL, none (`NoLock`)."""
        if not self.holds_lock:
            return NoLock()
        while True:
            handle = self.sessions.get().hold_lock(worker_id, on_change or _ignore)
            if handle is not None:
                return handle

    @contextlib.contextmanager
    def gone(self, now: float | None = None) -> Iterator[FoundGone | None]:
        """The active workers whose liveness lock stayed free on consecutive probes
        spanning `grace` (`LIVENESS_GRACE`) of database time (`now` if given), in the
        probe's write transaction; a worker found holding its lock again is forgotten.

        Why not at the first free lock: a free lock means the lock's session is gone, and a
        dropped session is not a gone process. A server restart, a failover, a network
        reset, `idle_session_timeout` or `pg_terminate_backend` ends the session under a
        living worker, which keeps heartbeating; taken for gone at once, it would lose its
        jobs at every probe until they died of spent attempts. Its `AdvisoryLivenessLock`
        takes the lock again within about a second. After a restart every lock is free at
        once, so there is no probe at all while the server has been up for less than
        `restart_quiet` (`LIVENESS_RESTART_QUIET`). One probe runs at a time per
        queue (`PROBE_KEY`); a prober that finds another one at work skips its turn.

        A failover ends every session too, but the new primary's postmaster may have run
        for days (a standby promoted), so its uptime says nothing. What a prober knows is
        its own session: while this store's shared session is down after it dropped, and
        for `restart_quiet` after it was opened again, this process does not probe
        (nor touch the suspicions: a worker whose session did not drop goes on probing).
        Every worker's session dropped with the old primary, so none probes until each has
        had that long to reconnect and take its lock again.

        The cost: a SIGKILLed worker's jobs come back after about `LIVENESS_GRACE` plus
        one probe interval (~4 s at default settings) instead of ~1 s; still far below the
        lease (90 s), which stays the backstop. A worker that dies during a failover or a
        restart is found a quiet period later.
        """
        session = self.sessions.current
        if session is not None and session.unsettled(self.restart_quiet):
            yield None
            return
        self.d.ensure_schema()
        with self.d.write() as conn:
            start = conn.execute(q.PROBE_START, {"now": now}).fetchone()
            assert start is not None
            if not start["alone"]:
                yield None  # another worker is probing right now
                return
            if float(start["uptime"]) < self.restart_quiet:
                conn.execute(q.FORGET_SUSPECTS)
                yield None
                return
            at = float(start["now"])
            free = conn.execute(q.PROBE_LIVENESS, {"now": now}).fetchall()
            gone = [r["id"] for r in free if at - float(r["free_since"]) >= self.grace]
            yield FoundGone(conn, now, gone)

    def lock_free(self, namesake: Mapping[str, Any]) -> bool | None:
        """Startup reconciliation believes a free lock as the probes do: once it has been
        found free for `grace` (None before: suspected). A twin started under a live
        worker's name while that worker's lock session was down would otherwise take its
        jobs (the chaos runs' finding 6)."""
        if not namesake["lock_free"]:
            return False
        free_for = namesake["free_for"]
        return True if free_for is not None and free_for >= self.grace else None

    def note_locks(
        self, conn: Any, clock: float | None, free: Sequence[str], held: Sequence[str]
    ) -> None:
        if free or held:
            params = {"free": list(free), "held": list(held), "now": clock}
            conn.execute(q.NOTE_NAMESAKE_LOCKS, params)

    def forget(self, worker_ids: Sequence[str]) -> None:
        """Nothing to clean up: a gone worker's lock went with its session."""

    def suspects(self) -> dict[str, float]:
        """Active workers whose liveness lock the probes (of any worker) found free, not
        yet for the whole grace: worker id -> the probe's time (epoch seconds) when one
        first found it free."""
        self.d.ensure_schema()
        with self.d.read() as conn:
            rows = conn.execute(q.LIVENESS_SUSPECTS).fetchall()
        return {r["id"]: float(r["free_since"]) for r in rows}

    def free(self, worker_ids: Sequence[str]) -> list[str]:
        """Active workers among `worker_ids` whose advisory lock is free at this instant
        (tried inside a transaction, so released at once). A session that dropped under
        a living worker shows free for the second its watcher needs to take it again:
        callers only report it; the probe (`gone`) alone reclaims, after the grace."""
        if not worker_ids:
            return []
        self.d.ensure_schema()
        params = {"ids": list(worker_ids), "quiet": self.restart_quiet}
        with self.d.read() as conn:
            free = {r["id"] for r in conn.execute(q.LIVENESS_FREE, params).fetchall()}
        return [w for w in worker_ids if w in free]


def _ignore(change: LivenessChange) -> None:
    """The default `on_change`: nobody to tell."""
