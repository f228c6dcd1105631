"""The chaos runner's `process` family of faults (`tests/soak/chaos.py`, step 4): worker
signals (SIGKILL, SIGSTOP, SIGTERM, a twin under a live worker's name), a task's child
killed, a worker's sessions terminated, the run's private server restarted, a cancel.
The network and failover families are `tests/soak/chaos_links.py`'s."""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any

from heartq.errors import JobNotFound
from heartq.model import CancelResult
from tests.soak.chaos_config import TRANSIENT, Fault, first_line, stderr_line
from tests.soak.chaos_workers import WorkerProc, all_threads_stopped, is_descendant
from tests.support import sqlite_write_lock_free

if TYPE_CHECKING:
    from tests.soak.chaos_run import ChaosRun


class ProcessFaults:
    """The `process` family's faults on one run (`ChaosRun.inject` draws them): each
    `fault_KIND` injects one and records it in the run's `faults`."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run

    def pick_target(self, kind: str) -> WorkerProc | None:
        targets = self.run.targets()
        if not targets:
            self.run.skipped[kind] += 1
            return None
        return self.run.rng.choice(targets)

    def fault_sigkill(self) -> None:
        proc = self.pick_target("sigkill")
        if proc is not None:
            self.sigkill(proc)

    def sigkill(self, proc: WorkerProc, detail: dict[str, Any] | None = None) -> None:
        """SIGKILL `proc`; a replacement starts in its slot 0-1 s later."""
        at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.killed_at = at
        proc.state = "exited"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(5)
        self.run.faults.append(Fault("sigkill", at, proc.number, proc.id, detail or {}))
        self.run.say(f"SIGKILL worker #{proc.number} ({proc.id}) {detail or ''}")
        delay = 0.0 if self.run.rng.random() < 0.5 else self.run.rng.uniform(0.1, 1.0)
        self.run.after(delay, lambda: self.run.restart_slot(proc.slot))

    def fault_sigstop(self) -> None:
        seconds = self.run.schedule.uniform(1.5, 2.5) * self.run.config.lease
        proc = self.pick_target("sigstop")
        if proc is None:
            return
        at = self.freeze(proc)
        if at is None:
            self.run.skipped["sigstop"] += 1
            self.run.say(f"could not stop worker #{proc.number} outside a write transaction")
            return
        proc.state = "frozen"
        proc.frozen_at.append(at)
        detail: dict[str, Any] = {"seconds": seconds}
        if self.run.config.backend == "postgres":
            detail["open_transactions"] = self.open_transactions(proc)
        self.run.faults.append(Fault("sigstop", at, proc.number, proc.id, detail))
        self.run.say(f"SIGSTOP worker #{proc.number} ({proc.id}) for {seconds:.2f} s {detail}")
        self.run.after(seconds, lambda: self.thaw(proc))

    def freeze(self, proc: WorkerProc) -> float | None:
        """SIGSTOP; on SQLite only at a moment the process does not hold the write lock.
        Returns when it was stopped (None if it could not be).

        The lock is looked at only once every thread of the worker has stopped: SIGSTOP
        is delivered asynchronously, and a thread still running (in a system call, an
        fsync, on the other core) could take the write lock just after a look that
        found it free, then stop holding it: every writer, the runner's own enqueue
        among them, then waited out its busy timeout (30 s), and the runner, waiting
        too, thawed nobody meanwhile (RELIABILITY.md, the seed-44 stall)."""
        for _ in range(30):
            at = time.time()
            os.kill(proc.pid, signal.SIGSTOP)
            if self.run.config.backend != "sqlite" or (
                all_threads_stopped(proc.pid) and self.write_lock_free()
            ):
                return at
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.01)
        return None

    def open_transactions(self, proc: WorkerProc) -> int | None:
        """Sessions of a stopped worker left inside a transaction: their row locks stay
        taken while it is stopped (the reaper skips those jobs; see docs/RELIABILITY.md).
        None while the server cannot say (restarting)."""
        import psycopg

        if self.run.pg_down:
            return None
        time.sleep(0.05)  # a statement in flight finishes on the server
        try:
            row = (
                self.run.pg()
                .execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                    "AND xact_start IS NOT NULL",
                    (proc.app_name,),
                )
                .fetchone()
            )
        except psycopg.Error:
            self.run.drop_pg()
            return None
        return int(row[0])

    def write_lock_free(self, timeout: float = 0.2) -> bool:
        return sqlite_write_lock_free(self.run.url.removeprefix("sqlite:///"), timeout)

    def thaw(self, proc: WorkerProc) -> None:
        if proc.state != "frozen":
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.thawed_at.append(time.time())
        proc.state = "running" if proc.alive() else "exited"
        self.run.say(f"SIGCONT worker #{proc.number}")

    def fault_sigterm(self) -> None:
        proc = self.pick_target("sigterm")
        if proc is not None:
            self.run.faults.append(Fault("sigterm", self.terminate(proc), proc.number, proc.id))

    def fault_twin(self) -> None:
        """A second worker under the name of a live one (a pod rescheduled while the old
        one still runs). Its startup reconciliation must leave the live namesake's jobs
        alone (reported as an anomaly if it takes them; fencing must then keep the old
        one's writes out). The old one is retired with SIGTERM 1-2.5 s later, as a
        rolling update would."""
        proc = self.pick_target("twin")
        if proc is None:
            return
        at = time.time()
        twin = self.run.start_worker(proc.slot, proc.name)
        proc.state = "retiring"
        proc.twinned_at.append(at)
        self.run.faults.append(Fault("twin", at, proc.number, proc.id, {"twin": twin.number}))
        self.run.after(self.run.rng.uniform(1.0, 2.5), lambda: self.terminate(proc))

    def terminate(self, proc: WorkerProc) -> float:
        """SIGTERM (graceful stop); once it has exited, its slot gets a live worker."""
        at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        proc.state = "terminating"
        self.run.say(f"SIGTERM worker #{proc.number} ({proc.id})")
        deadline = time.monotonic() + self.run.config.shutdown_timeout + 15

        def check() -> None:
            if proc.alive() and time.monotonic() < deadline:
                self.run.after(0.1, check)
                return
            if proc.alive():
                self.run.violations.append(
                    f"worker #{proc.number} did not stop within shutdown timeout + 15 s "
                    f"of SIGTERM: {self.run.tail(proc)}"
                )
                os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait(5)
            elif proc.popen.returncode != 0:
                self.run.violations.append(
                    f"worker #{proc.number} exited {proc.popen.returncode} after SIGTERM"
                )
            proc.state = "exited"
            self.run.restart_slot(proc.slot)

        self.run.after(0.1, check)
        return at

    def fault_kill_child(self) -> None:
        """SIGKILL the child process of a running `chaos_proc_long` attempt."""
        self.run.side.poll()
        candidates = []
        for doc in self.run.side.open_attempts("chaos_proc_long"):
            proc = self.run.by_id(doc["wid"])
            if proc is None or proc.state != "running" or not proc.alive():
                continue
            if doc["pid"] != proc.pid and is_descendant(doc["pid"], proc.pid):
                candidates.append((doc, proc))
        if not candidates:
            self.run.skipped["kill_child"] += 1
            return
        doc, proc = self.run.rng.choice(
            sorted(candidates, key=lambda c: (c[0]["job"], c[0]["eid"]))
        )
        at = time.time()
        try:
            os.kill(doc["pid"], signal.SIGKILL)
        except ProcessLookupError:
            self.run.skipped["kill_child"] += 1
            return
        detail = {"job": doc["job"], "eid": doc["eid"], "pid": doc["pid"]}
        self.run.faults.append(Fault("kill_child", at, proc.number, proc.id, detail))
        self.run.say(f"SIGKILL child {doc['pid']} of worker #{proc.number} (job {doc['job']})")

    def fault_pg_terminate(self) -> None:
        import psycopg

        if self.run.pg_down:
            self.run.skipped["pg_terminate"] += 1
            return
        proc = self.pick_target("pg_terminate")
        if proc is None:
            return
        try:
            self.terminate_sessions(proc)
        except psycopg.Error as exc:  # its session went with a restart: the next reconnects
            self.run.drop_pg()
            self.run.skipped["pg_terminate"] += 1
            self.run.say(f"pg_terminate skipped: {first_line(exc)}")

    def fault_pg_restart(self, draws: random.Random | None = None) -> None:
        """Stop the run's private cluster (`fast` or `immediate`, seeded) and start it
        again 0.5-2 s later (a timer: the runner goes on meanwhile)."""
        draws = draws or self.run.schedule
        mode = draws.choice(("fast", "immediate"))
        down_for = draws.uniform(0.5, 2.0)
        if self.run.cluster is None or self.run.pg_down:
            self.run.skipped["pg_restart"] += 1
            return
        at = time.time()
        self.run.pg_down = True
        self.run.outages.append([at, math.inf])
        self.run.outage_kinds.append("pg_restart")
        try:
            self.run.cluster.stop(mode)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"pg_ctl stop -m {mode} failed: {stderr_line(exc)}") from None
        self.run.drop_pg()
        stopped = time.time() - at
        detail = {"mode": mode, "stop_s": round(stopped, 3), "down_s": round(down_for, 3)}
        self.run.faults.append(Fault("pg_restart", at, None, None, detail))
        self.run.say(f"PostgreSQL stopped ({mode}, {stopped:.2f} s), starting in {down_for:.2f} s")
        self.run.after(down_for, self.pg_start)

    def pg_start(self) -> None:
        if not self.run.pg_down:
            return
        try:
            self.run.cluster.start()  # pg_ctl -w: returns once it accepts connections
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"pg_ctl start failed: {stderr_line(exc)}") from None
        self.run.outages[-1][1] = time.time()
        self.run.pg_down = False
        down_for = time.time() - self.run.outages[-1][0]
        self.run.say(f"PostgreSQL answering again after {down_for:.2f} s")

    def terminate_sessions(self, proc: WorkerProc) -> int:
        """pg_terminate_backend on every session of one worker, found by the
        application_name the runner gave it (PGAPPNAME, unique to this run's schema), so
        no other session of the server is touched."""
        at = time.time()
        rows = (
            self.run.pg()
            .execute(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database() "
                "AND pid <> pg_backend_pid()",
                (proc.app_name,),
            )
            .fetchall()
        )
        proc.terminated_backends_at.append(at)
        detail = {"sessions": len(rows)}
        self.run.faults.append(Fault("pg_terminate", at, proc.number, proc.id, detail))
        self.run.say(f"pg_terminate_backend x{len(rows)} for worker #{proc.number} ({proc.id})")
        return len(rows)

    def fault_cancel(self) -> None:
        if not self.run.enqueued or self.run.pg_down:
            self.run.skipped["cancel"] += 1
            return
        job_id = self.run.rng.choice(self.run.enqueued[-20:])  # recent: likely queued or running
        at = time.time()
        with self.run.links.db_lock:
            if self.run.pg_down:  # a failover began meanwhile
                self.run.skipped["cancel"] += 1
                return
            try:
                result = self.run.store.cancel_job(job_id)
            except TRANSIENT as exc:  # nothing in flight when the server stopped: not done
                self.run.skipped["cancel"] += 1
                self.run.say(f"cancel skipped: {first_line(exc)}")
                return
            except JobNotFound:  # an asynchronous failover lost it (checked after the run)
                if not self.run.links.loss_windows():
                    raise
                self.run.skipped["cancel"] += 1
                return
        if result is not CancelResult.ALREADY_FINISHED:
            self.run.cancel_asked[job_id] = str(result)
        detail = {"job": job_id, "result": str(result)}
        self.run.faults.append(Fault("cancel", at, None, None, detail))
