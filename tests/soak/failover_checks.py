"""The failover runner's checks (tests/soak/failover.py): the invariants on what the
promoted standby holds once the run drained, and the figures and their report.

`Checker.check` reads the run's records (the enqueuer's log of acknowledged and failed
enqueues, the tasks' side file of acknowledged completions, each worker's events, the
commands' answers) against the new primary's jobs, executions and ledger rows: I1
(terminal), I2 (execution ids increasing, none open, each started after the previous
ended, up to `CLOCK_TOLERANCE` of `now()` inversion), I3 (a succeeded job's one succeeded
execution is its last, its result and its one ledger row come from it), I4 (known
outcomes, crash context), I5 (attempts = counted executions <= max_retries + 1), I6
(every job was enqueued); synchronous replication also: nothing acknowledged lost, no
attempt counted for the failover. `format_report` prints the figures.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from heartq.model import STORED_OUTCOMES, TERMINAL_STATUSES, DetectedBy
from tests.soak.chaos_config import parse_ts
from tests.soak.failover_tasks import LEDGER, TASK

if TYPE_CHECKING:
    from tests.soak.failover import FailoverRun

TERMINAL = {str(s) for s in TERMINAL_STATUSES}
OUTCOMES = {str(o) for o in STORED_OUTCOMES}
DETECTORS = {str(d) for d in DetectedBy}
NOT_COUNTED = ("released", "interrupted", "snoozed")
CLOCK_TOLERANCE = 0.25
"""Seconds an execution may be dated before the previous one ended: PostgreSQL dates both
by `now()`, the start of their transactions (as in tests/soak/chaos.py)."""



def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "min": round(ordered[0], 3),
        "p50": round(statistics.median(ordered), 3),
        "max": round(ordered[-1], 3),
    }


class Checker:
    """The invariants on what the promoted standby holds, and the figures."""

    def __init__(self, run: FailoverRun) -> None:
        self.run = run
        self.v = run.violations
        self.inversions = 0

    def fail(self, text: str) -> None:
        if len(self.v) < 100:
            self.v.append(text)

    def check(self, drained: bool) -> dict[str, Any]:
        run = self.run
        sync = run.config.synchronous
        lines = run.enqueued()
        acked = {x["id"]: x for x in lines if "id" in x}
        tried = {x["n"] for x in lines}
        ids = [r[0] for r in run.sql("SELECT id FROM jobs")]
        jobs = {job_id: run.store.get_job(job_id) for job_id in ids}
        ledger: dict[str, list[tuple[int, str]]] = {}
        runs: dict[str, str] = {}
        rows = run.sql(f"SELECT job_id, execution_id, worker_id, run FROM {LEDGER}")
        for job_id, eid, wid, nonce in rows:
            ledger.setdefault(job_id, []).append((eid, wid))
            runs[nonce] = job_id
        if not drained:
            self.fail(f"I1: not drained within {run.config.drain_timeout:g} s")
        # I6: nothing in the database that was not enqueued; what was acknowledged is
        # there (synchronous), or its loss is measured (asynchronous).
        for job in jobs.values():
            n = job["meta"].get("n")
            if job["task"] == TASK and n is not None and n not in tried:
                self.fail(f"I6: job {job['id']} (n={n}) was never enqueued")
        lost = sorted(set(acked) - set(jobs))
        if sync and lost:
            self.fail(f"I6: {len(lost)} acknowledged enqueues lost: {lost[:5]}")
        unfinished = sorted(i for i in acked if i in jobs and jobs[i]["status"] != "succeeded")
        if sync and unfinished:
            self.fail(f"acknowledged jobs that did not succeed: {unfinished[:5]}")
        for job_id, job in jobs.items():
            self.check_job(job_id, job, ledger.get(job_id, []))
        stray = sorted(set(ledger) - set(jobs))
        if stray:
            self.fail(f"effects: ledger rows of jobs not in the database: {stray[:5]}")
        # Completions a task saw committed that the new primary does not have, and what
        # became of their jobs there.
        lost_completions: Counter[str] = Counter()
        for line in run.committed():
            if line["run"] in runs:
                continue
            job = jobs.get(line["job"])
            fate = "job lost" if job is None else f"job {job['status']}"
            if job is not None and job["status"] == "succeeded":
                fate = "ran again, succeeded"
            lost_completions[fate] += 1
        if sync and lost_completions:
            self.fail(f"acknowledged completions lost: {dict(lost_completions)}")
        if sync and run.results_lost:
            self.fail(f"results saved and lost: {run.results_lost[:5]}")
        crashed = Counter(
            (e["crash"] or {}).get("detected_by")
            for job in jobs.values()
            for e in job["executions"]
            if e["outcome"] == "crashed"
        )
        if sync and crashed:
            self.fail(f"attempts counted for the failover (crashed): {dict(crashed)}")
        deactivated = [e for w in run.workers for e in w.events("worker_deactivated")]
        if deactivated:
            self.fail(f"live workers taken for dead: {[e.get('deactivated') for e in deactivated]}")
        for number, alive in getattr(run, "alive_at_end", {}).items():
            if not alive:
                self.fail(f"worker {number} died: {run.tail(run.workers[number])}")
        for command in run.commands:
            if command["rc"] != 0:
                self.fail(f"`{command['command']}` failed: {command['stderr']}")
        for number, record in enumerate(run.failovers):
            if record["workers_not_carried_on"] or record["locks_not_back"]:
                self.fail(
                    f"failover {number + 1}: workers that did not claim "
                    f"{record['workers_not_carried_on']}, locks not back {record['locks_not_back']}"
                )
        statuses = Counter(job["status"] for job in jobs.values())
        outcomes = Counter(e["outcome"] for job in jobs.values() for e in job["executions"])
        errors = [x for x in lines if "error" in x]
        firsts = {
            key: summary([f[key] for f in run.failovers if f[key] is not None])
            for key in ("first_claim", "first_finish", "first_enqueue_acked")
        }
        firsts["every_worker_first_claim"] = summary(
            [t for f in run.failovers for t in f["every_worker_first_claim"].values()]
        )
        firsts["every_lock_back"] = summary(
            [t for f in run.failovers for t in f["every_lock_back"].values()]
        )
        return {
            "ok": not self.v,
            "violations": list(self.v),
            "config": {
                k: v for k, v in asdict(run.config).items() if k not in ("workdir", "verbose")
            },
            "failovers": run.failovers,
            "carry_on": firsts,
            "enqueues": {
                "acknowledged": len(acked),
                "failed": len(errors),
                "acknowledged_lost": len(lost),
                "errors": Counter(x["error"].split(":")[-1].strip() for x in errors),
            },
            "jobs": len(jobs),
            "statuses": dict(statuses),
            "executions": dict(outcomes),
            "crashed_by_detected_by": dict(crashed),
            "completions_acknowledged": len(run.committed()),
            "completions_lost": dict(lost_completions),
            "results_lost": len(run.results_lost),
            "ledger_rows": sum(len(rows) for rows in ledger.values()),
            "i2_inversions": self.inversions,
            "wake_after_failover": run.wake,
            "commands": [{k: c[k] for k in ("command", "rc", "seconds")} for c in run.commands],
        }

    def check_job(self, job_id: str, job: dict[str, Any], effects: list[tuple[int, str]]) -> None:
        where = f"job {job_id} ({job['status']})"
        execs = job["executions"]
        if job["status"] not in TERMINAL:
            self.fail(f"I1: {where} not terminal after the drain")
        ids = [e["execution_id"] for e in execs]
        if ids != sorted(set(ids)) or (execs and job["execution_id"] != ids[-1]):
            self.fail(f"I2: {where} executions {ids}, job's {job['execution_id']}")
        if [e for e in execs if e["outcome"] is None or e["ended_at"] is None]:
            self.fail(f"I2: {where} has open executions")
        for before, after in itertools.pairwise(execs):
            ended, started = parse_ts(before["ended_at"]), parse_ts(after["started_at"])
            if ended is None or started is None or started < ended - CLOCK_TOLERANCE:
                self.fail(
                    f"I2: {where} execution {after['execution_id']} began before the last ended"
                )
            elif started < ended:
                self.inversions += 1
        succeeded = [e for e in execs if e["outcome"] == "succeeded"]
        result = job["result"] or {}
        if job["status"] == "succeeded":
            last = execs[-1] if execs else None
            if len(succeeded) != 1 or last is None or last["outcome"] != "succeeded":
                self.fail(f"I3: {where} succeeded executions {len(succeeded)}")
            elif (
                job["task"] == TASK
                and job["result"] is None
                and effects == [(last["execution_id"], last["worker_id"])]
            ):
                # its transaction committed, the result saved after it did not survive
                self.run.results_lost.append(job_id)
            elif job["task"] == TASK and (
                result.get("job") != job_id
                or result.get("eid") != last["execution_id"]
                or result.get("wid") != last["worker_id"]
            ):
                self.fail(f"I3: {where} result {result} not from execution {last}")
            elif job["task"] == TASK and effects != [(last["execution_id"], last["worker_id"])]:
                self.fail(f"effects: {where} ledger rows {effects}, not one from {last}")
        elif succeeded or job["result"] is not None or effects:
            self.fail(f"I3: {where} has a succeeded execution, a result or an effect")
        for e in execs:
            if e["outcome"] not in OUTCOMES:
                self.fail(f"I4: {where} execution {e['execution_id']} outcome {e['outcome']}")
            if e["outcome"] in ("crashed", "interrupted"):
                crash = e["crash"] or {}
                if crash.get("detected_by") not in DETECTORS or not crash.get("detected_at"):
                    self.fail(f"I4: {where} execution {e['execution_id']} crash {crash}")
        counted = [e for e in execs if e["outcome"] not in NOT_COUNTED]
        if job["attempts"] != len(counted) or job["attempts"] > job["max_retries"] + 1:
            self.fail(f"I5: {where} attempts {job['attempts']}, counted {len(counted)}")
        if job["status"] == "dead" and not job["dead_reason"]:
            self.fail(f"I5: {where} has no dead_reason")


def format_report(fig: dict[str, Any]) -> str:
    c = fig["config"]
    mode = "synchronous" if c["synchronous"] else "asynchronous"
    lines = [
        f"failover runner: {mode} replication, {c['workers']} workers x {c['concurrency']}, "
        f"{c['failovers']} failover(s), outage {c['outage']:g} s, cut {c['cut']:g} s, "
        f"settings {c['settings'] or 'heartq defaults'}",
        f"carry on after the promotion (s): {json.dumps(fig['carry_on'])}",
        f"enqueues: {json.dumps(fig['enqueues'], default=dict)}",
        f"jobs {fig['jobs']}: {fig['statuses']}; executions {fig['executions']}; crashed by "
        f"{fig['crashed_by_detected_by']}; completions acknowledged "
        f"{fig['completions_acknowledged']}, lost {fig['completions_lost']}; results lost after "
        f"the commit {fig['results_lost']}; ledger rows "
        f"{fig['ledger_rows']}; I2 inversions {fig['i2_inversions']}",
        f"wake-up after the failover: {fig['wake_after_failover']}",
        f"commands: {fig['commands']}",
        f"wall {fig.get('wall')} s: " + ("every check held" if fig["ok"] else "VIOLATIONS:"),
    ]
    lines += [f"  - {v}" for v in fig["violations"]]
    return "\n".join(lines)
