"""Why each crashed execution of a chaos run crashed: the injected fault that explains
it and how soon after it the crash was detected; and the protocol anomalies among them,
jobs taken from workers that were alive and well (a liveness probe or a reconciliation
that took a live worker's job, a lease lost on a link that was only slow, an attempt
counted for a synchronous failover). Anomalies are not invariant violations: `--strict`
fails a run on them."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tests.soak.chaos_config import CLOCK_TOLERANCE, PG_FAULTS, parse_ts
from tests.soak.chaos_workers import WorkerProc

if TYPE_CHECKING:
    from tests.soak.chaos_run import ChaosRun

KillTimes = tuple[dict[str, float], dict[tuple[str, int], float]]
"""When the runner SIGKILLed each worker (by id) and each child (by attempt)."""


class CrashCauses:
    """The crashed executions of a run, explained (`explain`), with the figures they give:
    crashes by detector and by cause, detection latencies, the reaper's lag."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.detected: Counter[str] = Counter()
        self.causes: Counter[str] = Counter()
        self.latencies: dict[str, list[float]] = defaultdict(list)
        """Per cause: seconds from the fault to the crash's detection."""
        self.reap_lag: list[float] = []
        """Seconds from a lease's expiry to its reclaim."""
        self.unexplained: list[dict[str, Any]] = []
        self.false_positives = 0
        self.failover_crashes: list[dict[str, Any]] = []

    def explain(self, jobs: dict[str, dict[str, Any]]) -> None:
        """Every crashed execution of `jobs`: its cause, and the anomalies."""
        kills, child_kills = self.kill_times()
        latencies, reap_lag = self.latencies, self.reap_lag
        detected, causes, unexplained = self.detected, self.causes, self.unexplained
        for job_id, job in jobs.items():
            for e in job["executions"]:
                if e["outcome"] != "crashed":
                    continue
                crash = e["crash"] or {}
                how = crash.get("detected_by", "?")
                detected[how] += 1
                at = parse_ts(crash.get("detected_at"))
                if at is None:
                    continue
                expiry = parse_ts(crash.get("lease_expires_at"))
                if how == "lease_expired" and expiry is not None:
                    reap_lag.append(at - expiry)
                cause, since = self.cause(crash, job_id, e, kills, child_kills)
                if how in ("liveness_lock", "reconciliation") and cause != "sigkill":
                    self.false_positive(job_id, e, crash, cause)
                elif how in ("lease_expired", "stale_worker"):
                    self.slow_link_reclaim(job_id, e, crash, cause)
                causes[cause or "none"] += 1
                if cause == "failover":
                    self.failover_crash(job_id, job, e, crash)
                if cause is None:
                    unexplained.append(
                        {"job": job_id, "task": job["task"], "execution": e["execution_id"],
                         "worker": crash.get("worker_id"), "detected_by": how,
                         "detected_at": crash.get("detected_at"), "reason": crash.get("reason")}
                    )  # fmt: skip
                elif since is not None:
                    latencies[cause].append(at - since)

    def kill_times(self) -> KillTimes:
        """When the runner SIGKILLed each worker (by id) and each child (by attempt)."""
        faults = self.run.faults
        kills = {f.worker_id: f.at for f in faults if f.kind == "sigkill" and f.worker_id}
        children = {
            (f.detail["job"], f.detail["eid"]): f.at for f in faults if f.kind == "kill_child"
        }
        return kills, children

    def cause(
        self,
        crash: dict[str, Any],
        job_id: str,
        execution: dict[str, Any],
        kills: dict[str, float],
        child_kills: dict[tuple[str, int], float],
    ) -> tuple[str | None, float | None]:
        """Which injected fault explains this crash, and when it was injected (None when
        there is no latency to speak of): the last fault on its worker (or its child)
        between the start of the execution and the crash's detection."""
        at = parse_ts(crash.get("detected_at")) or 0.0
        began = parse_ts(execution["started_at"]) or 0.0
        how = crash.get("detected_by")
        key = (job_id, execution["execution_id"])
        if how == "child_exit":
            if key in child_kills:
                return "kill_child", child_kills[key]
            if self.run.kind_of[job_id] in ("chaos_child_crash", "chaos_hostile_exit"):
                return "task_killed_own_child", None
            return None, None
        worker_id = crash.get("worker_id")
        # A worker id is one process's, killed at most once: every attempt of it detected
        # after the kill is the kill's, whenever it began (a claim the worker sent just
        # before the kill, which a busy server ran just after it, is dated after it: seen
        # when the kill follows a commit that woke the worker for the jobs it released,
        # `chaos_commits`). PostgreSQL's now() is its transaction's start: a probe that
        # began just before the kill may date its detection a little earlier.
        kill = kills.get(worker_id or "")
        if kill is not None and kill <= at + CLOCK_TOLERANCE:
            return "sigkill", kill
        proc = self.run.by_id(worker_id)
        run = self.run
        during = [(kind, o[0]) for o, kind in zip(run.outages, run.outage_kinds, strict=True)]
        if proc is not None:
            for kind in ("partition", "slow_link"):
                spans = run.links.spans(proc.slot, kind)
                during += [(kind, s.start) for s in spans if s.worker == proc.number]
            if how == "reconciliation" and any(t <= at for t in proc.twinned_at):
                twinned = [t for t in proc.twinned_at if began <= t <= at]
                return "twin", (max(twinned) if twinned else None)
            during += [("pg_terminate", t) for t in proc.terminated_backends_at]
            # a stopped worker begins nothing: an attempt of it that began before the
            # thaw was in flight when it stopped (a claim it sent just before, which the
            # server ran later, is dated after the stop)
            during += [("sigstop", t) for t, thaw in proc.freezes()
                       if t <= at + CLOCK_TOLERANCE and began <= thaw + CLOCK_TOLERANCE]
        during = [(k, t) for k, t in during
                  if k == "sigstop" or began <= t <= at + CLOCK_TOLERANCE]  # fmt: skip
        if during:
            return max(during, key=lambda kt: kt[1])
        if proc is not None and run.links.slow_at(proc.slot, at):
            return "slow_link", None  # a slot slow all run long
        return None, None

    def false_positive(
        self, job_id: str, execution: dict[str, Any], crash: dict[str, Any], cause: str | None
    ) -> None:
        """A job taken from a worker that was alive and well. The liveness probe must only
        take a gone worker's jobs (docs/design/protocol.md step 11), startup reconciliation only
        a gone or stale namesake's (a frozen one may be stale). One round of liveness reclaims
        right after the runner terminated a worker's sessions is expected: its session,
        so its lock, did die."""
        proc = self.run.by_id(crash.get("worker_id"))
        at = parse_ts(crash.get("detected_at")) or 0.0
        how = crash.get("detected_by")
        if proc is None or (how == "liveness_lock" and cause in PG_FAULTS):
            return
        gone = proc.killed_at or proc.exited_at or math.inf
        if at + CLOCK_TOLERANCE >= gone:
            return  # it was dead (or exiting) by then
        if how == "reconciliation" and proc.frozen_during(at):
            return  # stopped: stale, fair game
        last = max((t for t in proc.terminated_backends_at if t <= at), default=None)
        note = (
            f"; its sessions were terminated at {datetime.fromtimestamp(last):%H:%M:%S.%f}"
            if last is not None
            else ""
        )
        if len(self.run.anomalies) < 50:
            self.run.anomalies.append(
                f"{how} false positive: job {job_id} execution "
                f"{execution['execution_id']} (started {execution['started_at']}) "
                f"reclaimed at {crash.get('detected_at')} from live worker "
                f"#{proc.number} ({proc.id}; {self.history(proc)}){note}"
            )
        self.false_positives += 1

    def failover_crash(
        self, job_id: str, job: dict[str, Any], e: dict[str, Any], crash: dict[str, Any]
    ) -> None:
        """An attempt counted (crashed) because of a failover. With synchronous replication
        none should be (the worker gives up what it cannot finish: `interrupted`, not
        counted), so each is an anomaly there; asynchronous, a lost finish is reclaimed so."""
        entry = {
            "job": job_id, "task": job["task"], "execution": e["execution_id"],
            "worker": crash.get("worker_id"), "started_at": e["started_at"],
            "detected_by": crash.get("detected_by"), "detected_at": crash.get("detected_at"),
            "reason": crash.get("reason"),
        }  # fmt: skip
        self.failover_crashes.append(entry)
        pair = self.run.links.pair
        if pair is not None and pair.synchronous and len(self.run.anomalies) < 50:
            self.run.anomalies.append(f"an attempt counted for a synchronous failover: {entry}")

    def slow_link_reclaim(
        self, job_id: str, execution: dict[str, Any], crash: dict[str, Any], cause: str | None
    ) -> None:
        """A job taken (lease expired, or its worker deemed silent) from a live worker whose
        only trouble was a slow link: its heartbeats should have kept it (an anomaly)."""
        proc = self.run.by_id(crash.get("worker_id"))
        at = parse_ts(crash.get("detected_at")) or 0.0
        if proc is None or cause not in (None, "slow_link"):
            return
        if at + CLOCK_TOLERANCE >= (proc.killed_at or proc.exited_at or math.inf):
            return
        if not self.run.links.slow_at(proc.slot, at):
            return
        if len(self.run.anomalies) < 50:
            self.run.anomalies.append(
                f"{crash.get('detected_by')} on a slow link: job {job_id} execution "
                f"{execution['execution_id']} (started {execution['started_at']}) reclaimed at "
                f"{crash.get('detected_at')} from live worker #{proc.number} ({proc.id}; "
                f"{self.history(proc)})"
            )
        self.false_positives += 1

    def history(self, proc: WorkerProc) -> str:
        """What the runner did to a worker, by wall-clock time."""

        def hms(t: float) -> str:
            return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]

        parts = [f"started {hms(proc.started_at)}"]
        parts += [f"stopped {hms(t)}" for t in proc.frozen_at]
        parts += [f"sessions terminated {hms(t)}" for t in proc.terminated_backends_at]
        parts += [f"twin started {hms(t)}" for t in proc.twinned_at]
        for f in self.run.faults:
            if f.worker == proc.number and f.kind in ("sigterm", "kill_child"):
                parts.append(f"{f.kind} {hms(f.at)}")
        for kind in ("partition", "slow_link"):
            for span in self.run.links.spans(proc.slot, kind):
                if span.worker == proc.number:
                    end = "" if span.end == math.inf else f" to {hms(span.end)}"
                    parts.append(f"{kind} {hms(span.start)}{end}")
        if proc.killed_at:
            parts.append(f"killed {hms(proc.killed_at)}")
        elif proc.exited_at:
            parts.append(f"exited {hms(proc.exited_at)}")
        return ", ".join(parts)
