"""The chaos runner's held-horizon fault (`horizon`, PostgreSQL, in the `process` family
with the others): the most common way a PostgreSQL queue goes wrong in production is a
session that sits in an open transaction (an application's forgotten one, a long report,
a replica with `hot_standby_feedback`). It pins the xmin horizon: vacuum can remove no
row version that died after it began, so the queue's tables and indexes fill with dead
versions and index entries, every claim, heartbeat, pulse and finish meanwhile runs
beside them, and nothing comes back until it ends.

The fault: another session of the queue's database (`application_name`
`hqc_<schema>_horizon`, so `pg_terminate` never picks it), opens a REPEATABLE READ
transaction, reads the queue's `jobs` table (`count(*)`: the snapshot is taken and held,
and so is an ACCESS SHARE lock on the table), and sits idle in it for 4-10 leases
(seeded; `idle_in_transaction_session_timeout` off for this session), then rolls back.
One falls at a seeded moment of the first 40 % of the chaos whatever the draws (like the
first `pg_restart`), more as drawn. Holds may overlap; a server restart or failover ends
one early (the runner notes when).
At the drain every hold still open is released, as frozen workers are thawed.

What the checker adds (`HeldHorizons.check`), besides every invariant as in any run:

- **No attempt given up because a claim or heartbeat was slow.** An attempt is given up
  when someone else closes it `crashed` (its lease lapsed: `lease_expired`; its worker
  looked silent: `stale_worker`; the liveness probe or a reconciliation took it) or its
  own worker closes it `interrupted` (`self_fence`: it could not renew in time and
  stopped trusting the lease). Every such execution detected while a horizon was held,
  or within a lease and a reclaim interval after (a renewal that came too late shows up to
  then), must be explained by another injected fault on its worker or the server, by
  `chaos_causes.CrashCauses.cause`'s rules (a kill, a stop, its sessions terminated, a
  server outage, a cut or slow link). One that no other fault
  explains is a violation: the held horizon, or what it slowed, cost a live worker its
  lease. The same executions outside every hold are counted beside (the machine's own
  load can make a heartbeat late, and that baseline says how often).
- **Nothing stuck after the release**: the drain that follows the last release must
  end with every job terminal (I1, as in any run), and no running job of a gone worker
  outlives the zombie bound while a horizon is held (the monitor, I1).

The figures (`figures`): the holds (how long, how many ended by a server outage), the
transactions each pinned (the age of its snapshot's xmin when released), the attempts
that started while one was held (claims made beside the dead versions it kept), the
workers' `heartbeat_failed`, `claim_failed`, `leases_untrusted` and `lease_lost` events
while one was held, and the attempts given up meanwhile, explained and not.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.soak.chaos_config import TRANSIENT, Fault, first_line, parse_ts
from tests.soak.chaos_workers import read_events

if TYPE_CHECKING:
    from tests.soak.chaos_checks import Checker
    from tests.soak.chaos_run import ChaosRun

HOLD_LEASES = (4.0, 10.0)
"""How long a horizon is held, in leases (drawn uniformly between the two)."""
GIVEN_UP = ("crashed", "interrupted")
"""The outcomes of an attempt that someone, or its own worker, gave up."""
SLOW_EVENTS = ("heartbeat_failed", "claim_failed", "leases_untrusted", "lease_lost")
"""Worker events that a slow claim or heartbeat would log."""


@dataclass
class Hold:
    """One held horizon (wall clock)."""

    number: int
    opened_at: float
    seconds: float
    xmin: int
    released_at: float = math.inf
    ended: str = ""  # "released", or "server outage" when a restart or failover ended it
    xids_pinned: int | None = None

    def covers(self, at: float, after: float = 0.0) -> bool:
        return self.opened_at <= at <= self.released_at + after


class HeldHorizons:
    """The held-horizon faults of one chaos run (PostgreSQL)."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.holds: list[Hold] = []
        self.sessions: dict[int, Any] = {}  # Hold.number: its open psycopg connection
        self.forced = False
        """Whether the run's first hold, drawn or not, has been tried (`ChaosRun.run`)."""
        self.given_up: dict[str, int] = {
            "explained": 0,
            "unexplained": 0,
            "unexplained_outside_holds": 0,
        }

    @property
    def app_name(self) -> str:
        return f"hqc_{self.run.schema}_horizon"

    def fault_horizon(self, draws: random.Random | None = None) -> None:
        """Open a session, take a REPEATABLE READ snapshot by reading `jobs`, and keep it
        idle; a timer releases it 4-10 leases later. `draws`: the run's first hold, which
        falls whatever the schedule draws, has a stream of its own."""
        import psycopg
        from psycopg import IsolationLevel, sql

        from heartq.store.postgres.connection import parse_url

        run = self.run
        if draws is not None:
            self.forced = True
        seconds = (draws or run.schedule).uniform(*HOLD_LEASES) * run.config.lease
        if run.pg_down:
            run.skipped["horizon"] += 1
            return
        try:
            conn = psycopg.connect(
                parse_url(run.url)[0],
                application_name=self.app_name,
                connect_timeout=5,
                options="-c idle_in_transaction_session_timeout=0 -c statement_timeout=0",
            )
        except psycopg.Error as exc:  # the server went away meanwhile
            run.skipped["horizon"] += 1
            run.say(f"horizon skipped: {first_line(exc)}")
            return
        try:
            conn.isolation_level = IsolationLevel.REPEATABLE_READ
            at = time.time()
            table = sql.Identifier(run.schema or "heartq", "jobs")
            row = conn.execute(
                sql.SQL(
                    "SELECT count(*), txid_snapshot_xmin(txid_current_snapshot()) FROM {}"
                ).format(table)
            ).fetchone()
        except psycopg.Error as exc:
            with contextlib.suppress(Exception):
                conn.close()
            run.skipped["horizon"] += 1
            run.say(f"horizon skipped: {first_line(exc)}")
            return
        assert row is not None
        hold = Hold(len(self.holds), at, seconds, int(row[1]))
        self.holds.append(hold)
        self.sessions[hold.number] = conn
        detail = {"seconds": round(seconds, 3), "xmin": hold.xmin, "jobs_seen": int(row[0])}
        run.faults.append(Fault("horizon", at, None, None, detail))
        run.say(f"horizon #{hold.number} held for {seconds:.2f} s {detail}")
        run.after(seconds, lambda: self.release(hold))

    def release(self, hold: Hold) -> None:
        """End the hold's transaction (rollback) and its session; if a server outage ended
        it first, note when."""
        import psycopg

        conn = self.sessions.pop(hold.number, None)
        if conn is None:
            return
        run = self.run
        now = time.time()
        try:
            if run.pg_down:
                raise psycopg.OperationalError("the server is down")
            age = (
                run.pg()
                .execute(
                    "SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = %s",
                    (conn.info.backend_pid,),
                )
                .fetchone()
            )
            conn.rollback()
            hold.released_at, hold.ended = time.time(), "released"
            hold.xids_pinned = None if age is None or age[0] is None else int(age[0])
        except (*TRANSIENT, psycopg.Error):
            run.drop_pg()
            starts = [start for start, _end in run.outages if start >= hold.opened_at]
            hold.released_at = min([*starts, now])
            hold.ended = "server outage" if starts else "released"
        finally:
            with contextlib.suppress(Exception):
                conn.close()
        run.say(f"horizon #{hold.number} {hold.ended} (xids pinned: {hold.xids_pinned})")

    def release_all(self) -> None:
        """The drain: every hold still open ends now."""
        for hold in self.holds:
            self.release(hold)

    def close(self) -> None:
        for conn in self.sessions.values():
            with contextlib.suppress(Exception):
                conn.close()
        self.sessions.clear()

    # -- the checker's part ------------------------------------------------------------
    def check(self, checker: Checker) -> None:
        """No attempt given up while a horizon was held unless another fault explains it."""
        if not self.holds:
            return
        run = self.run
        after = run.config.lease + run.config.reclaim
        kills, child_kills = checker.crashes.kill_times()
        for job_id, job in checker.jobs.items():
            for e in job["executions"]:
                if e["outcome"] not in GIVEN_UP:
                    continue
                crash = e["crash"] or {}
                at = parse_ts(crash.get("detected_at"))
                hold = next((h for h in self.holds if at and h.covers(at, after)), None)
                cause, _since = checker.crashes.cause(crash, job_id, e, kills, child_kills)
                if hold is None:
                    self.given_up["unexplained_outside_holds"] += int(cause is None)
                elif cause is not None:
                    self.given_up["explained"] += 1
                else:
                    self.given_up["unexplained"] += 1
                    checker.fail(
                        f"held horizon #{hold.number}: job {job_id} ({job['task']}) "
                        f"execution {e['execution_id']} on {crash.get('worker_id')} given up "
                        f"({e['outcome']}, {crash.get('detected_by')}: {crash.get('reason')}) "
                        f"at {crash.get('detected_at')} with no other fault to explain it"
                    )

    def figures(self, checker: Checker) -> dict[str, Any]:
        """What the holds were and what ran beside them."""
        if not self.holds:
            return {}
        after = self.run.config.lease + self.run.config.reclaim
        started = sum(
            1
            for job in checker.jobs.values()
            for e in job["executions"]
            if (t := parse_ts(e["started_at"])) is not None and any(h.covers(t) for h in self.holds)
        )
        events: Counter[str] = Counter()
        for proc in self.run.procs:
            for doc in read_events(proc.log_path):
                if doc["event"] not in SLOW_EVENTS:
                    continue
                at = parse_ts(doc.get("ts"))
                if at is not None and any(h.covers(at, after) for h in self.holds):
                    events[doc["event"]] += 1
        held = [h.released_at - h.opened_at for h in self.holds if h.released_at < math.inf]
        pinned = [h.xids_pinned for h in self.holds if h.xids_pinned is not None]
        return {
            "held_horizons": {
                "n": len(self.holds),
                "ended_by_a_server_outage": sum(1 for h in self.holds if h.ended != "released"),
                "seconds_held": round(sum(held), 1),
                "longest_s": round(max(held, default=0.0), 2),
                "xids_pinned_max": max(pinned, default=None),
                "attempts_started_while_held": started,
                "worker_events_while_held": dict(sorted(events.items())),
                "attempts_given_up": dict(self.given_up),
            }
        }


def horizon_report(fig: dict[str, Any]) -> list[str]:
    """The report's line for the holds (none without them)."""
    held = fig.get("held_horizons")
    if not held:
        return []
    given_up = held["attempts_given_up"]
    return [
        f"  horizons held {held['n']} ({held['seconds_held']} s in all, longest "
        f"{held['longest_s']} s, {held['ended_by_a_server_outage']} ended by a server "
        f"outage; up to {held['xids_pinned_max']} xids pinned); "
        f"{held['attempts_started_while_held']} attempts started meanwhile; attempts given "
        f"up while held: {given_up['explained']} explained by another fault, "
        f"{given_up['unexplained']} not (outside the holds, none explains "
        f"{given_up['unexplained_outside_holds']}); "
        f"worker events while held {held['worker_events_while_held']}"
    ]
