"""A primary with a streaming hot standby, both private clusters, and their failover.

What managed PostgreSQL does under a fleet (Patroni, pg_auto_failover, RDS Multi-AZ),
built from `pg_harness.PrivateCluster`s so that tests and the chaos runner can do it to
heartq on one machine:

    pair = StreamingPair(synchronous=True)    # initdb, pg_basebackup -R, slot, hot standby
    url = pair.url(schema="heartq_x")         # postgresql://...@127.0.0.1:P1,127.0.0.1:P2/
                                              #   postgres?target_session_attrs=read-write
    ...
    failover = pair.failover()                # pg_ctl stop -m immediate; pg_ctl promote
    pair.rejoin()                             # a new standby of the new primary on the old
    ...                                       # primary's port: ready for the next failover
    pair.close()

`synchronous=True` lists the standby in the primary's `synchronous_standby_names` with
`synchronous_commit = on`: a commit returns only once the standby has flushed it, so a
promoted standby has every commit a client was told of. `synchronous=False` streams
asynchronously: a commit returns at once, and what the standby had not received when the
primary died is gone. A promoted standby serves alone, without a synchronous standby (as
Patroni's `synchronous_mode` without `synchronous_mode_strict`), until `rejoin` gives it
one.

The clusters are `PrivateCluster`s: their data lives in the run's scratch directory and
their processes carry the run's mark (`tests/leftovers.py`), so what a killed run leaves
is removed by the next one, like every other private server. The multi-host URL never
changes: its two ports keep serving the pair whichever of them is the primary.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg import sql

from tests.pg_harness import PrivateCluster

READY_TIMEOUT = 60.0
"""Seconds to wait for a standby to stream (and, synchronous, to be the synchronous one)
or to replay what its primary wrote: seconds alone, more on a loaded 2-core machine."""


@dataclass(frozen=True)
class Failover:
    """When a failover's steps happened (wall clock, `time.time()`, the clock PostgreSQL's
    `now()` reads on this machine)."""

    stopped_at: float
    """The old primary was gone (`pg_ctl stop` returned)."""
    promote_sent_at: float
    """`pg_ctl promote` was started."""
    promoted_at: float
    """`pg_ctl promote` returned: the new primary accepts writes."""


def _admin(cluster: PrivateCluster) -> psycopg.Connection[Any]:
    return psycopg.connect(cluster.url, autocommit=True, connect_timeout=5)


class StreamingPair:
    """A primary and one streaming hot standby; `failover()` promotes the standby."""

    def __init__(self, synchronous: bool = True, settings: dict[str, str] | None = None) -> None:
        """`settings`: server settings of both clusters (`PrivateCluster`'s)."""
        self.synchronous = synchronous
        self.settings = dict(settings or {})
        self._names = 0
        self.primary = PrivateCluster(self.settings)
        self.standby: PrivateCluster | None = None
        self.former: PrivateCluster | None = None
        """The primary the last failover stopped (its data kept until `rejoin` or `close`)."""
        try:
            self.ports = (self.primary.port, self._add_standby().port)
        except BaseException:
            self.close()
            raise

    # -- what clients use ----------------------------------------------------------------
    def url(self, dbname: str = "postgres", **params: str) -> str:
        """The multi-host URL over both ports, `target_session_attrs=read-write` (libpq
        tries the hosts in order and keeps the one that takes writes), plus `params`
        (`schema=...` for heartq)."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        query = urlencode({"target_session_attrs": "read-write", **params})
        return f"postgresql://postgres@{hosts}/{dbname}?{query}"

    # -- standing up ---------------------------------------------------------------------
    def _add_standby(self, port: int | None = None) -> PrivateCluster:
        self._names += 1
        name = f"heartq_standby{self._names}"
        standby = PrivateCluster(self.settings, standby_of=self.primary, name=name, port=port)
        self.standby = standby
        if self.synchronous:
            with _admin(self.primary) as conn:
                names = sql.Literal(f'"{name}"')
                setting = sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}")
                conn.execute(setting.format(names))
                conn.execute("ALTER SYSTEM SET synchronous_commit = on")
                conn.execute("SELECT pg_reload_conf()")
        self.wait_streaming()
        return standby

    def wait_streaming(self, timeout: float = READY_TIMEOUT) -> None:
        """Until the primary streams to the standby (and, synchronous, counts it as its
        synchronous standby, so commits wait for it from then on)."""
        assert self.standby is not None, "no standby"
        name = self.standby.name
        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        with _admin(self.primary) as conn:
            while True:
                row = conn.execute(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (name,),
                ).fetchone()
                if row is not None and row == ("streaming", wanted):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"standby {name} not streaming ({wanted}): {row}")
                time.sleep(0.05)

    def wait_replayed(self, timeout: float = READY_TIMEOUT) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        assert self.standby is not None, "no standby"
        with _admin(self.primary) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            target = row[0]
        deadline = time.monotonic() + timeout
        with _admin(self.standby) as conn:
            while True:
                row = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()
                if row is not None and row[0]:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"standby did not replay up to {target}")
                time.sleep(0.05)

    def standby_uptime(self) -> float:
        """Seconds the standby's postmaster has been up: what a promoted standby's
        `pg_postmaster_start_time()` will say, however recent the promotion."""
        assert self.standby is not None, "no standby"
        with _admin(self.standby) as conn:
            row = conn.execute(
                "SELECT extract(epoch from now() - pg_postmaster_start_time())::float8"
            ).fetchone()
        assert row is not None
        return float(row[0])

    def cut_replication(self) -> None:
        """The standby stops receiving (its `primary_conninfo` emptied: its WAL receiver
        exits, dropping what it had not yet read): a standby that falls behind. The
        primary goes on. Asynchronous, its commits return as before and are not on the
        standby; synchronous, every commit waits (none returns) until
        `restore_replication`, or fails if the primary dies meanwhile."""
        assert self.standby is not None, "no standby"
        with _admin(self.standby) as conn:
            row = conn.execute("SHOW primary_conninfo").fetchone()
            assert row is not None and row[0], "the standby streams from nowhere"
            self._conninfo: str = row[0]
            conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.execute("SELECT pg_reload_conf()")
            deadline = time.monotonic() + READY_TIMEOUT
            while conn.execute("SELECT 1 FROM pg_stat_wal_receiver").fetchone():
                if time.monotonic() > deadline:
                    raise RuntimeError("the standby's WAL receiver did not stop")
                time.sleep(0.02)

    def restore_replication(self) -> None:
        """Undo `cut_replication`: the standby streams again and catches up."""
        assert self.standby is not None, "no standby"
        with _admin(self.standby) as conn:
            value = sql.Literal(self._conninfo)
            conn.execute(sql.SQL("ALTER SYSTEM SET primary_conninfo = {}").format(value))
            conn.execute("SELECT pg_reload_conf()")
        self.wait_streaming()

    # -- failing over --------------------------------------------------------------------
    def stop_primary(self, mode: str = "immediate") -> float:
        """The primary goes away (`pg_ctl stop -m immediate`: its processes quit at once,
        as in a crash: sessions reset, nothing flushed); returns when (wall clock)."""
        self.primary.stop(mode)
        return time.time()

    def promote(self) -> tuple[float, float]:
        """The standby becomes the primary (`pg_ctl promote`, waiting until it accepts
        writes); the pair then has no standby until `rejoin`. Returns (sent, done)."""
        assert self.standby is not None, "no standby to promote"
        sent = time.time()
        self.standby.promote()
        done = time.time()
        self.former, self.primary, self.standby = self.primary, self.standby, None
        return sent, done

    def failover(self, mode: str = "immediate") -> Failover:
        """Stop the primary and promote the standby, as a failover manager would."""
        stopped = self.stop_primary(mode)
        sent, done = self.promote()
        return Failover(stopped_at=stopped, promote_sent_at=sent, promoted_at=done)

    def rejoin(self) -> None:
        """The stopped former primary's place is taken by a fresh standby of the new
        primary (`pg_basebackup` again, not `pg_rewind`), on the same port, so the URL
        still names both; synchronous again if the pair is."""
        assert self.former is not None and self.standby is None, "nothing to rejoin"
        port = self.former.port
        self.former.close()
        self.former = None
        self._add_standby(port)

    def close(self) -> None:
        """Stop and remove both clusters (and a stopped former primary)."""
        for cluster in (self.standby, self.primary, self.former):
            if cluster is not None:
                with contextlib.suppress(Exception):
                    cluster.close()
