"""The chaos runner's oracle (`tests/soak/chaos.py`, step 6): docs/design/protocol.md's
invariants I1-I6 checked against the database after the run, effects exactly once against the
ledger, at-least-once and fencing against the side file the attempts wrote, crash hooks,
pipelines' dependencies (result-passing and replayed ones: `chaos_pipes`), results
between a commit and a return (`chaos_commits`), rate limits, queue pauses
(`chaos_pauses`), each fairness key's order (`chaos_fair`), and the workers' registry;
the hostile family adds its own (`chaos_hostile.HostileFamily.check`). A violation fails
the run."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from heartq.errors import JobNotFound
from tests.soak import chaos_fair
from tests.soak.chaos_causes import CrashCauses
from tests.soak.chaos_commits import check_after_commit, taken
from tests.soak.chaos_config import (
    CLOCK_TOLERANCE,
    DETECTORS,
    LEDGER_KINDS,
    OUTCOMES,
    TERMINAL,
    parse_ts,
    within,
)
from tests.soak.chaos_pipes import check_replays, check_result_chains
from tests.soak.chaos_tasks import LIMITED_LIMIT, RATE_KEY, RATE_LIMIT, RATE_PERIOD, SNOOZE_BOUND

if TYPE_CHECKING:
    from tests.soak.chaos_run import ChaosRun


SNOOZE_ROUNDING = 0.002
"""Seconds a run after a snooze may seem to start early: the end of the snooze and the
start after it are read as ISO times to the millisecond (the claim itself never takes a
job before its `run_at`, set by the same statement as that end)."""

class Checker:
    """docs/design/protocol.md's invariants and the other checks, read from the database, the side
    file and the ledger after the run (the figures: `chaos_report`)."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.v = run.violations
        self.jobs: dict[str, dict[str, Any]] = {}
        self.results_lost: list[str] = []
        self.inversions: list[tuple[float, str]] = []
        self.ledger: dict[str, Any] = {}
        self.crash_hooks: dict[str, int] = {}
        self.pipelines: dict[str, int] = {}
        self.result_chains: dict[str, int] = {}
        self.after_commit: dict[str, int] = {}
        self.replays: dict[str, int] = {}
        self.rate: dict[str, int] = {}
        self.limited: dict[str, int] = {}
        self.pauses: dict[str, float] = {}
        self.fair: dict[str, Any] = {}
        self.losses: Counter[str] = Counter()
        """What asynchronous failovers lost inside their loss windows (counted, not failed)."""
        self.lost_ids: set[str] = set()
        self.crashes = CrashCauses(run)

    def fail(self, text: str) -> None:
        if len(self.v) < 200:
            self.v.append(text)
        elif len(self.v) == 200:
            self.v.append("... more violations left out")

    def check(self, drained: bool) -> None:
        run = self.run
        store = run.store
        # I6: the set of ids enqueued is the set in the database, nothing lost or added.
        listed = {j["id"] for j in store.list_jobs(limit=10_000_000)}
        enqueued = set(run.enqueued)
        if len(enqueued) != len(run.enqueued):
            self.fail("I6: enqueue returned a duplicate id")
        if listed != enqueued:
            # asynchronous failovers: an enqueue acknowledged inside a loss window may be gone
            windows = run.links.loss_windows()
            self.lost_ids = {j for j in enqueued - listed if within(run.acked_at.get(j), windows)}
            self.losses["acknowledged_enqueues"] = len(self.lost_ids)
            lost, extra = sorted(enqueued - listed - self.lost_ids), sorted(listed - enqueued)
            if lost or extra:
                self.fail(f"I6: ids differ: lost {lost[:10]} ({len(lost)}), extra {extra[:10]}")
        for job_id in run.enqueued:
            if job_id in self.lost_ids:
                continue
            try:
                self.jobs[job_id] = store.get_job(job_id)
            except JobNotFound:
                self.fail(f"I6: job {job_id} not found")
        # I1 during the run: no job of a gone worker stayed running past the bound.
        for key, text in run.zombies.items():
            self.fail(f"I1: {text}{self.zombie_end(key)}")
        if not drained:
            self.fail(f"I1: not drained within {run.config.drain_timeout:g} s")
        workers = {w["id"]: w for w in store.list_workers(include_all=True)}
        for job_id, job in self.jobs.items():
            self.check_job(job_id, job, drained, workers)
        self.check_side_file()
        self.check_crash_hooks()
        self.check_dependencies()
        self.result_chains = check_result_chains(self)
        self.after_commit = check_after_commit(self)
        self.replays = check_replays(self)
        self.check_rate_limit()
        self.check_concurrency_limit()
        run.pauses.check(self)
        chaos_fair.check(self)
        if run.config.backend == "sqlite":
            chaos_fair.check_counts(self)
        self.check_ledger()
        self.check_workers(workers)
        if run.hostile is not None:
            run.hostile.check(self)
        if run.horizons is not None:
            run.horizons.check(self)
        self.crashes.explain(self.jobs)

    def zombie_end(self, key: tuple[str, int]) -> str:
        """How a zombie's attempt left `running` in the end, as the database tells it: by
        which detection, found by which worker, how long after its worker died. The
        monitor only saw it still running; this says which reclaim came late (a run
        leaves nothing else to tell it by once its schema is dropped)."""
        job = self.jobs.get(key[0])
        execs = [e for e in (job or {}).get("executions", []) if e["execution_id"] == key[1]]
        if not execs or execs[0]["outcome"] is None:
            return "; never ended"
        crash = execs[0].get("crash") or {}
        at, died = parse_ts(crash.get("detected_at")), self.run.zombie_deaths.get(key)
        if at is None or died is None:
            return f"; ended {execs[0]['outcome']}"
        finder = self.run.by_id(crash.get("detector"))
        by = f"worker #{finder.number}" if finder is not None else crash.get("detector")
        return (f"; ended {execs[0]['outcome']} {at - died:.1f} s after the death, "
                f"{crash.get('detected_by')} found by {by}")  # fmt: skip

    def check_job(
        self, job_id: str, job: dict[str, Any], drained: bool, workers: dict[str, Any]
    ) -> None:
        run = self.run
        status = job["status"]
        execs = job["executions"]
        kind = run.kind_of[job_id]
        where = f"job {job_id} ({job['task']}, {status})"
        # I1: a blocked job is not stuck only while a dead job holds it (its root, which an
        # operator may replay); anything else not ended after the drain is stuck.
        if status == "blocked":
            holder = job.get("blocked_by") or {}
            if self.jobs.get(holder.get("id", ""), {}).get("status") != "dead":
                self.fail(f"I1: {where} blocked, but no dead job holds it: {holder}")
        elif status not in TERMINAL:
            if drained:
                self.fail(f"I1: {where} not terminal after draining")
            elif status == "running":
                proc = run.by_id(job["worker_id"])
                if proc is None or proc.killed_at is not None:
                    self.fail(f"I1: {where} running under a gone worker {job['worker_id']}")
            elif status not in ("queued", "waiting"):
                self.fail(f"I1: {where} has an unknown status")
        # I2/I3: execution ids strictly increase; at most one open execution, the current
        # one; each execution starts after the previous one ended (one owner at a time).
        ids = [e["execution_id"] for e in execs]
        if ids != sorted(set(ids)):
            self.fail(f"I2: {where} execution ids not strictly increasing: {ids}")
        if execs and job["execution_id"] != ids[-1]:
            self.fail(f"I2: {where} execution_id {job['execution_id']} is not the last {ids}")
        open_execs = [e for e in execs if e["outcome"] is None or e["ended_at"] is None]
        if status == "running":
            if len(open_execs) != 1 or open_execs[0]["execution_id"] != job["execution_id"]:
                self.fail(f"I2: {where} open executions {[e['execution_id'] for e in open_execs]}")
        elif open_execs:
            self.fail(f"I2: {where} has open executions {[e['execution_id'] for e in open_execs]}")
        for before, after in itertools.pairwise(execs):
            ended, started = parse_ts(before["ended_at"]), parse_ts(after["started_at"])
            if (
                run.config.backend == "postgres"
                and ended is not None
                and started is not None
                and ended - CLOCK_TOLERANCE <= started < ended
            ):
                # PostgreSQL dates both by now(), the start of their transactions: a claim
                # whose transaction began just before the requeue's, and whose statement
                # saw the requeue committed, is dated a few ms earlier (counted)
                self.inversions.append((ended - started, f"{job_id}/{after['execution_id']}"))
                continue
            if ended is None or started is None or started < ended:
                self.fail(
                    f"I2: {where} execution {after['execution_id']} started at "
                    f"{after['started_at']} before {before['execution_id']} ended "
                    f"({before['ended_at']})"
                )
        succeeded = [e for e in execs if e["outcome"] == "succeeded"]
        if status == "succeeded":
            last = execs[-1] if execs else None
            result = job["result"] or {}
            if len(succeeded) != 1 or last is None or last["outcome"] != "succeeded":
                self.fail(f"I3: {where} succeeded executions {len(succeeded)}, last {last}")
            elif job["result_lost"] is not None and kind in LEDGER_KINDS:
                # its transaction committed, then its worker died before saving the result
                # (the ledger check says whether its effect is there, once; `chaos_commits`
                # that its readers were told)
                self.results_lost.append(job_id)
            elif job["result"] is None and kind in LEDGER_KINDS:
                self.fail(f"I3: {where} has no result, and does not say it lost it")
            elif (
                result.get("job") != job_id
                or result.get("eid") != last["execution_id"]
                or result.get("wid") != last["worker_id"]
            ):
                self.fail(
                    f"I3: {where} result {result} is not from its succeeded execution "
                    f"{last['execution_id']} on {last['worker_id']}"
                )
        elif succeeded:
            self.fail(f"I3: {where} has a succeeded execution but is {status}")
        elif job["result"] is not None:
            self.fail(f"I3: {where} has a result {job['result']}")
        # I4: every closed execution has an outcome; a crashed or interrupted one its crash
        # context.
        for e in execs:
            if e["outcome"] is not None and e["outcome"] not in OUTCOMES:
                self.fail(f"I4: {where} execution {e['execution_id']} outcome {e['outcome']}")
            if e["outcome"] in ("crashed", "interrupted"):
                crash = e["crash"] or {}
                missing = [k for k in ("worker_id", "detected_at", "detected_by", "reason")
                           if not crash.get(k)]  # fmt: skip
                if missing or crash.get("detected_by") not in DETECTORS:
                    self.fail(
                        f"I4: {where} execution {e['execution_id']} crash context {crash} "
                        f"lacks {missing or 'a known detected_by'}"
                    )
        # I5: attempts are the counted executions (released and interrupted ones are not
        # counted), at most max_retries + 1; a dead job has its reason and spent its
        # retries (or was Permanent, or interrupted past the separate limit).
        # A replayed job's attempts count again from its replay (its history is kept).
        since = run.replays.since(job_id)
        uncounted = ("released", "interrupted", "snoozed")
        counted = [e for e in execs if e["outcome"] not in uncounted and e["execution_id"] > since]
        if job["attempts"] != len(counted):
            self.fail(f"I5: {where} attempts {job['attempts']} but {len(counted)} counted runs")
        if job["attempts"] > job["max_retries"] + 1:
            self.fail(f"I5: {where} attempts {job['attempts']} > max_retries + 1")
        if status == "dead":
            reason = job["dead_reason"] or ""
            if not reason:
                self.fail(f"I5: {where} has no dead_reason")
            elif job["attempts"] != job["max_retries"] + 1 and not reason.startswith(
                ("permanent failure", "interrupted ")
            ):
                self.fail(f"I5: {where} dead after {job['attempts']} attempts: {reason}")
        self.check_snoozes(job_id, job, where)
        # What each kind may end as (the tasks' own contract).
        if (
            status == "cancelled"
            and job_id not in run.cancel_asked
            and not (run.deps_of.get(job_id) and self.dependency_cancelled(job_id))
        ):
            self.fail(f"{where} cancelled but nobody asked")
        if kind in ("chaos_permanent", "chaos_timeout") and status == "succeeded":
            self.fail(f"{where} succeeded, which its task never does")
        attempt_returned = (job["result"] or {}).get("att", 0)
        if job["result_lost"] is not None:  # lost after the commit: the side file says
            attempt_returned = run.side.starts.get((job_id, job["execution_id"]), {}).get("att", 0)
        if (
            kind == "chaos_flaky"
            and status == "succeeded"
            and (attempt_returned <= run.args_of[job_id]["fail_times"])
        ):
            self.fail(f"{where} succeeded on an attempt that raises")
        if kind in ("chaos_long", "chaos_proc_long") and status == "succeeded":
            # Fencing of checkpoints: the attempt that succeeded wrote the last one, so a
            # checkpoint written later by a fenced-out attempt would show here.
            result, checkpoint = job["result"] or {}, job["checkpoint"] or {}
            if job["result_lost"] is not None:  # lost after the commit: the last step's
                if checkpoint.get("step") != run.args_of[job_id]["steps"]:
                    self.fail(f"I3: {where} checkpoint {checkpoint} is not the last step")
            elif result.get("resumed_from", 0) < result.get("steps", 0) and (
                checkpoint.get("eid") != result.get("eid")
                or checkpoint.get("step") != result.get("steps")
            ):
                self.fail(f"I3: {where} checkpoint {checkpoint} not from its last attempt")

    def check_snoozes(self, job_id: str, job: dict[str, Any], where: str) -> None:
        """Snoozes: the job's count is its snoozed executions since its last replay, at
        most its task's bound; a snooze past the bound is a failed attempt, and only past
        it; nothing ran again before the delay its task asked for; a `chaos_snoozy` that
        succeeded was handed the count it had (`ctx.snoozes`, read by the claim) and had
        snoozed as many times as it was told."""
        since = self.run.replays.since(job_id)
        execs = [e for e in job["executions"] if e["execution_id"] > since]
        snoozed = [e for e in execs if e["outcome"] == "snoozed"]
        kind = self.run.kind_of[job_id]
        bound = SNOOZE_BOUND if kind == "chaos_snoozy" else 0
        if job["snoozes"] != len(snoozed) or job["snoozes"] > bound:
            self.fail(f"snoozes: {where} counts {job['snoozes']}, ran {len(snoozed)} snoozed "
                      f"(bound {bound})")  # fmt: skip
        if kind != "chaos_snoozy":
            return
        args = self.run.args_of[job_id]
        before = 0
        for e in execs:
            said = (e["error"] or "").startswith("snoozed for")
            if e["outcome"] == "failed" and said and before < bound:
                self.fail(f"snoozes: {where} execution {e['execution_id']} failed a "
                          f"snooze within its bound ({before} of {bound})")  # fmt: skip
            before += e["outcome"] == "snoozed"
        for prev, after in itertools.pairwise(execs):
            ended, started = parse_ts(prev["ended_at"]), parse_ts(after["started_at"])
            if (prev["error"] or "").startswith("snoozed for") and ended and started:
                early = ended + args["snooze_s"] - SNOOZE_ROUNDING - started
                if early > 0:
                    self.fail(f"snoozes: {where} execution {after['execution_id']} started "
                              f"{early:.3f} s before its snooze ended")  # fmt: skip
        if job["status"] == "succeeded" and job["result_lost"] is None:
            handed = (job["result"] or {}).get("snoozes")
            if handed != job["snoozes"] or handed != min(args["snoozes"], bound):
                self.fail(f"snoozes: {where} was handed {handed} snoozes, counts "
                          f"{job['snoozes']}, was told {args['snoozes']}")  # fmt: skip
        if job["status"] == "succeeded" and args["snoozes"] > bound:
            self.fail(f"snoozes: {where} succeeded, though it snoozes past its bound")

    def dependency_failed(self, job_id: str) -> list[str]:
        """Those of the job's dependencies that ended dead or cancelled, or are blocked."""
        deps = self.run.deps_of.get(job_id, [])
        failed = ("dead", "cancelled", "blocked")
        return [d for d in deps if self.jobs.get(d, {}).get("status") in failed]

    def dependency_cancelled(self, job_id: str) -> list[str]:
        """Those of the job's dependencies that ended cancelled."""
        deps = self.run.deps_of.get(job_id, [])
        return [d for d in deps if self.jobs.get(d, {}).get("status") == "cancelled"]

    def check_dependencies(self) -> None:
        """Jobs that wait for jobs: none ran before its dependencies succeeded, a
        cancelled dependency cancels what waits for it, a dead or blocked one blocks it
        (the pipelines block on failure, heartq's default), and only those; every
        callback got every result once."""
        run = self.run
        tolerance = CLOCK_TOLERANCE if run.config.backend == "postgres" else 0.0
        counts: Counter[str] = Counter()
        for job_id, deps in run.deps_of.items():
            job = self.jobs.get(job_id)
            if job is None or any(d not in self.jobs for d in deps):
                continue  # I6 said so already
            where = f"job {job_id} ({job['task']}, {job['status']})"
            counts["groups" if run.kind_of[job_id] == "chaos_fan_in" else "chain_steps"] += 1
            failed = self.dependency_failed(job_id)
            execs = job["executions"]
            if failed and execs:
                self.fail(f"dependencies: {where} ran though {failed[0]} ended "
                          f"{self.jobs[failed[0]]['status']}")  # fmt: skip
            started = parse_ts(execs[0]["started_at"]) if execs else None
            for dep in deps if started is not None else []:
                ended = [parse_ts(e["ended_at"]) for e in self.jobs[dep]["executions"]
                         if e["outcome"] == "succeeded"]  # fmt: skip
                if not ended or ended[0] is None:
                    self.fail(f"dependencies: {where} ran, but {dep} has no succeeded attempt")
                elif started is not None and started < ended[0] - tolerance:
                    self.fail(f"dependencies: {where} started at {execs[0]['started_at']}, "
                              f"before {dep} succeeded")  # fmt: skip
            asked = job_id in run.cancel_asked
            cancelled = self.dependency_cancelled(job_id)
            if cancelled and not asked:
                counts["cancelled_by_a_cancelled_dependency"] += 1
                if job["status"] != "cancelled" or not (job["error"] or "").startswith(
                    "dependency_failed"
                ):
                    self.fail(f"dependencies: {where} after {cancelled[0]} ended cancelled: "
                              f"{job['error']!r}")  # fmt: skip
            elif failed and not asked:
                counts["blocked_by_a_dead_dependency"] += 1
                if job["status"] != "blocked":
                    self.fail(f"dependencies: {where} after {failed[0]} ended "
                              f"{self.jobs[failed[0]]['status']}: not blocked")  # fmt: skip
            elif not failed and job["status"] == "blocked":
                self.fail(f"dependencies: {where} blocked, but no dependency died")
            elif not cancelled and (job["error"] or "").startswith("dependency_failed"):
                self.fail(f"dependencies: {where} says {job['error']!r}, no dependency failed")
            if run.kind_of[job_id] == "chaos_fan_in" and job["status"] == "succeeded":
                counts["callbacks_succeeded"] += 1
                if job["result"] is None:
                    continue  # lost after its commit: the ledger holds its effect to once
                # every member's result, from its succeeded attempt, or the lost-result
                # marker exactly where it is lost: never None in its place
                expected = [taken(self, d) for d in deps]
                got = job["result"].get("got")
                if not isinstance(got, list) or got != expected or None in got:
                    self.fail(f"dependencies: {where} received {got}, "
                              f"expected {expected}")  # fmt: skip
                told = sum(1 for g in got or [] if g and g[0] == "lost")
                counts["callbacks_told_a_result_was_lost"] += bool(told)
                counts["lost_results_told_to_callbacks"] += told
        self.pipelines = dict(sorted(counts.items()))

    def check_rate_limit(self) -> None:
        """Rate limits across the fleet: at most `RATE_LIMIT` attempts of the rated jobs
        start in any `RATE_PERIOD` seconds (every attempt is a start: crashed, released
        and interrupted ones too), by the database's clock, whoever claimed them."""
        starts = sorted(
            t
            for job_id, job in self.jobs.items()
            if self.run.kind_of[job_id] == "chaos_rated"
            for e in job["executions"]
            if (t := parse_ts(e["started_at"])) is not None
        )
        busiest = 0
        for i, start in enumerate(starts):
            within = sum(1 for t in starts[i : i + RATE_LIMIT + 1] if t < start + RATE_PERIOD)
            busiest = max(busiest, within)
            if within > RATE_LIMIT:
                self.fail(f"rate limit: {within} starts of {RATE_KEY} within {RATE_PERIOD:g} s "
                          f"from {start:.3f} (limit {RATE_LIMIT})")  # fmt: skip
                break
        self.rate = {"starts": len(starts), "busiest_window": busiest, "limit": RATE_LIMIT}

    def check_concurrency_limit(self) -> None:
        """Concurrency limits across the fleet: at no moment more than `LIMITED_LIMIT`
        attempts of one key's jobs (`chaos_limited`) between their start and their end,
        by the database's clock, whoever claimed them (an attempt of a crashed worker
        counts until its reclaim ends it). An end dated up to `CLOCK_TOLERANCE` after a
        start it made room for is not an overlap on PostgreSQL (`now()` is its
        transaction's start); SQLite dates both inside the write lock."""
        tolerance = CLOCK_TOLERANCE if self.run.config.backend == "postgres" else 0.0
        changes: dict[str, list[tuple[float, int]]] = {}
        attempts = 0
        for job_id, job in self.jobs.items():
            if self.run.kind_of[job_id] != "chaos_limited":
                continue
            for e in job["executions"]:
                started, ended = parse_ts(e["started_at"]), parse_ts(e["ended_at"])
                if started is None or ended is None:
                    continue  # an attempt that never ended: I1 said so already
                attempts += 1
                key = changes.setdefault(job["concurrency_key"], [])
                key += [(started, 1), (max(started, ended - tolerance), -1)]
        busiest = 0
        for key, moments in sorted(changes.items()):
            running = 0
            for at, change in sorted(moments):  # at one moment, an end before a start
                running += change
                busiest = max(busiest, running)
                if running > LIMITED_LIMIT:
                    self.fail(f"concurrency limit: {running} attempts of {key} ran at "
                              f"{at:.3f} (limit {LIMITED_LIMIT})")  # fmt: skip
                    break
        self.limited = {"attempts": attempts, "busiest": busiest, "limit": LIMITED_LIMIT}

    def check_side_file(self) -> None:
        """At-least-once and fencing, from what the attempts themselves wrote."""
        side = self.run.side
        execs = {
            (job_id, e["execution_id"]): e
            for job_id, job in self.jobs.items()
            for e in job["executions"]
        }
        windows = self.run.links.claim_windows()
        for key, doc in side.starts.items():
            e = execs.get(key)
            if key[0] in self.lost_ids:
                self.losses["attempts_of_lost_jobs"] += 1
            elif e is None and within(doc.get("t"), windows):
                self.losses["claims"] += 1  # its claim did not reach the standby
            elif e is None:
                self.fail(f"I3: attempt {key} ran but the database never issued it")
            elif e["worker_id"] != doc["wid"] and within(doc.get("t"), windows):
                # its claim was lost and the job claimed again under the same execution
                # id by another worker, whose id in the fence shuts this attempt out
                # (design/database-bad-days.md, "A failover that forgets a claim")
                self.losses["execution_ids_issued_again"] += 1
            elif e["worker_id"] != doc["wid"]:
                self.fail(f"I3: attempt {key} ran on {doc['wid']}, issued to {e['worker_id']}")
        for job_id, job in self.jobs.items():
            if job["status"] == "succeeded":
                key = (job_id, job["execution_id"])
                how = side.ends.get(key, {}).get("how")
                # a worker killed after its task's transaction committed leaves its result
                # lost (or, handed to the commit, saved with it), and its attempt no end
                # line, or the error its child met telling the dead parent
                # (BrokenPipeError); the ledger check holds its effect to once. Handed: by
                # its arguments, not only its `committed` line (written by the attempts
                # the plan kills, `kill`): a handing attempt killed with its worker for
                # another one's after-commit kill wrote neither line
                lost = job["result_lost"] is not None and self.run.kind_of[job_id] in LEDGER_KINDS
                handed = bool(side.committed.get(key, {}).get("hand")) or bool(
                    self.run.args_of[job_id].get("hand")
                )
                if key not in side.starts or (how != "return" and not lost and not handed):
                    self.fail(f"I3: job {job_id} result from attempt {key} that never "
                              f"returned (result lost: {job['result_lost']!r})")  # fmt: skip

    def check_crash_hooks(self) -> None:
        """Crash hooks: each call names an execution the database closed `crashed`, held
        by the worker it names, and none is told twice (the reclaim's fence decides who
        tells). Some crashes go untold (a finder killed between its commit and its hook):
        counted, not failed."""
        execs = {
            (job_id, e["execution_id"]): e
            for job_id, job in self.jobs.items()
            for e in job["executions"]
        }
        windows = self.run.links.loss_windows()
        told: Counter[tuple[str, int]] = Counter()
        for doc in self.run.side.crashes:
            key = (doc["job"], int(doc["eid"]))
            told[key] += 1
            e = execs.get(key)
            if (e is None or e["outcome"] != "crashed") and within(doc.get("t"), windows):
                self.losses["crash_hooks_of_lost_reclaims"] += 1
            elif e is None or e["outcome"] != "crashed":
                how = "unknown" if e is None else e["outcome"]
                self.fail(f"crash hook: told of {key}, an execution {how}, not crashed")
            elif e["worker_id"] != doc["wid"]:
                self.fail(f"crash hook: {key} held by {e['worker_id']}, told {doc['wid']}")
        for key, n in told.items():
            if n > 1:
                self.fail(f"crash hook: told of {key} {n} times")
        crashed = [k for k, e in execs.items() if e["outcome"] == "crashed"]
        self.crash_hooks = {
            "told": len(told),
            "crashed_executions": len(crashed),
            "untold": sum(1 for k in crashed if k not in told),
        }

    def check_ledger(self) -> None:
        """Effects exactly once: a succeeded job of a kind that writes one has exactly one
        ledger row, written by the execution that succeeded; any other job has none."""
        run = self.run
        rows = run.ledger.rows()
        effects: dict[str, list[tuple[int, str | None]]] = defaultdict(list)
        for job_id, execution_id, worker_id in rows:
            effects[job_id].append((execution_id, worker_id))
        for job_id, found in sorted(effects.items()):
            job = self.jobs.get(job_id)
            if job is None:
                self.fail(f"ledger: an effect of job {job_id}, which was never enqueued")
                continue
            where = f"job {job_id} ({job['task']}, {job['status']})"
            eids = sorted(e for e, _ in found)
            if len(found) > 1:
                self.fail(f"ledger: {where} effect {len(found)} times, executions {eids}")
            if job["status"] != "succeeded":
                self.fail(f"ledger: {where} did not succeed but has effects of {eids}")
            elif run.kind_of[job_id] not in LEDGER_KINDS:
                self.fail(f"ledger: {where} has effects, which its task never writes")
            elif len(found) == 1:
                last = job["executions"][-1] if job["executions"] else {}
                if found[0] != (job["execution_id"], last.get("worker_id")):
                    self.fail(
                        f"ledger: {where} effect from execution {found[0]} but execution "
                        f"{job['execution_id']} on {last.get('worker_id')} succeeded"
                    )
        expected = [
            job_id
            for job_id, job in self.jobs.items()
            if job["status"] == "succeeded" and run.kind_of[job_id] in LEDGER_KINDS
        ]
        for job_id in expected:
            if job_id not in effects:
                self.fail(
                    f"ledger: job {job_id} ({run.kind_of[job_id]}) succeeded without its effect"
                )
        self.ledger = {
            "rows": len(rows),
            "jobs_with_effect": len(effects),
            "succeeded_jobs_of_ledger_kinds": len(expected),
            "duplicates": sum(1 for found in effects.values() if len(found) > 1),
            "results_lost_after_commit": len(self.results_lost),
            "results_lost_sample": self.results_lost[:10],
        }

    def check_workers(self, workers: dict[str, Any]) -> None:
        for proc in self.run.procs:
            row = workers.get(proc.id or "")
            if proc.id is None:
                continue
            if row is None:
                self.fail(f"worker #{proc.number} ({proc.id}) missing from the registry")
            elif row["status"] == "active":
                self.fail(f"worker #{proc.number} ({proc.id}) still active after stopping")
            elif row["running"] or row["claimed_ahead"]:
                held = row["running"] + row["claimed_ahead"]
                self.fail(f"worker #{proc.number} ({proc.id}) still holds {held} jobs")
