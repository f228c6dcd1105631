"""The chaos runner's result-passing and blocked-and-replayed pipelines: how the plan
makes them, how the runner replays their dead roots during the run, and what the checker
holds them to (`tests/soak/chaos.py`, steps 3 and 6).

- A result-passing chain: `chaos_add` steps, each (after the first, which is given the
  chain's start) taking the previous step's result (`dependency_results`, `one_result`,
  as `task.s(...).takes_result()` makes them) and returning its value plus its own `k`.
  The checker computes each step's value from the plan alone (the start plus every `k`
  up to it) and compares it with the stored result: a result lost, repeated or taken
  from another step shows as a wrong value. Each step also names the attempt whose
  result it took, which must be the previous step's succeeded execution (fencing: never
  an attempt fenced out).
- A blocked-and-replayed pipeline: a `chaos_fixable` root, which raises until the
  runner fixes it, and `chaos_add` steps after it (a chain, sometimes a second branch
  from the root). The root ends dead and blocks them all; the runner, `replay_after`
  seconds (drawn with the plan; None for some, which stay dead) after it first sees the
  root dead, fixes it (its marker file) and replays it (`Store.replay_dead`, what
  `app.replay` and `heartq dlq replay` call), noting which jobs it blocked then. The
  checker: every job a replay found blocked was released and ran to its end (or was
  cancelled by a `cancel` fault, or waits for another dead job), a replayed root ran
  again and succeeded (unless faults spent its retries), no root succeeded unfixed, and
  none the plan replays was left dead.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heartq.ids import new_job_id
from heartq.model import NewJob
from tests.soak.chaos_commits import mark, taken
from tests.soak.chaos_config import TERMINAL, TRANSIENT, first_line

if TYPE_CHECKING:
    from tests.soak.chaos_checks import Checker
    from tests.soak.chaos_run import ChaosRun


def _job(task: str, args: dict[str, Any], rng: random.Random, **extra: Any) -> NewJob:
    return NewJob(
        task=task,
        args_json=json.dumps(args),
        priority=rng.randint(0, 2),
        max_retries=extra.pop("max_retries", 5),
        retry_backoff=0.05,
        retry_backoff_max=0.5,
        id=new_job_id(),
        **extra,
    )


def _step(n: int, rng: random.Random, after: str | None, start: int = 0) -> NewJob:
    """A `chaos_add` step: taking `after`'s result, or (None) given the chain's start."""
    args: dict[str, Any] = {"n": n, "k": rng.randint(1, 1000), "ms": rng.randint(0, 40)}
    if rng.random() < 0.2:
        args["fail_times"] = 1
    if rng.random() < 0.15:
        args["hold_ms"] = rng.randint(1, 5)
    if after is None:
        args["prev"] = {"value": start}
        return mark(_job("chaos_add", args, rng), rng)
    return mark(_job(
        "chaos_add", args, rng,
        depends_on=(after,), dependency_results=True, results_of=(after,), one_result=True,
    ), rng)  # fmt: skip


def make_result_chain(size: int, n: int, rng: random.Random) -> list[NewJob]:
    """`size` `chaos_add` steps, each taking the previous one's result."""
    steps = [_step(n, rng, None, start=rng.randint(0, 10_000))]
    for i in range(1, size):
        steps.append(_step(n + i, rng, steps[-1].id))
    return steps


def make_replayed(size: int, n: int, rng: random.Random) -> list[NewJob]:
    """A `chaos_fixable` root and `size - 1` steps after it, taking results: a chain,
    its last step from 3 jobs on sometimes a second branch from the root."""
    replay_after = None if rng.random() < 0.2 else round(rng.uniform(0.5, 3.0), 2)
    args = {"n": n, "start": rng.randint(0, 10_000), "k": rng.randint(1, 1000),
            "replay_after": replay_after}  # fmt: skip
    root = _job("chaos_fixable", args, rng, max_retries=2)
    jobs = [root]
    for i in range(1, size):
        branch = i == size - 1 and size >= 3 and rng.random() < 0.5
        jobs.append(_step(n + i, rng, root.id if branch else jobs[-1].id))
    return jobs


@dataclass
class Replay:
    """One replay the runner made: the root's last execution id before it (those after
    are the replayed run's), when, and the jobs the root held blocked then."""

    last_eid: int
    at: float
    blocked: list[str] = field(default_factory=list)


class Replays:
    """The runner's side: fix and replay the dead roots that the plan replays."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.fixed_dir = Path(run.dir) / "fixed"
        self.fixed_dir.mkdir(exist_ok=True)
        self.seen_dead: dict[str, float] = {}
        self.done: dict[str, Replay] = {}
        self.ended: set[str] = set()
        """Roots to replay that ended otherwise (cancelled): nothing to replay."""

    def _due(self) -> list[str]:
        run = self.run
        return [
            j for j in run.enqueued
            if run.kind_of[j] == "chaos_fixable" and j not in self.done and j not in self.ended
            and run.args_of[j].get("replay_after") is not None
        ]  # fmt: skip

    def pending(self) -> bool:
        """A root still to replay (the drain waits for it)."""
        return bool(self._due())

    def poll(self) -> None:
        """Replay each root dead for its `replay_after` seconds (skipped while the server
        is down: the next poll tries again)."""
        run = self.run
        for job_id in self._due():
            if run.pg_down:
                return
            try:
                job = run.store.get_job(job_id)
                if job["status"] == "dead":
                    seen = self.seen_dead.setdefault(job_id, time.monotonic())
                    if time.monotonic() - seen >= run.args_of[job_id]["replay_after"]:
                        self.replay(job_id, job)
                elif job["status"] in TERMINAL:
                    self.ended.add(job_id)
            except TRANSIENT as exc:
                run.say(f"replay of {job_id} to be retried: {first_line(exc)}")
                return

    def replay(self, job_id: str, job: dict[str, Any]) -> None:
        run = self.run
        below = self.descendants(job_id)
        blocked = [
            d for d in below
            if (dj := run.store.get_job(d))["status"] == "blocked"
            and (dj.get("blocked_by") or {}).get("id") == job_id
        ]  # fmt: skip
        (self.fixed_dir / job_id).touch()
        with run.links.db_lock:
            if run.pg_down:
                return
            replayed = run.store.replay_dead([job_id])
        if replayed != [job_id]:
            run.violations.append(f"replay: {job_id} was dead, but replay_dead gave {replayed}")
        self.done[job_id] = Replay(int(job["execution_id"]), time.time(), blocked)
        run.say(f"replay: {job_id} fixed and replayed, {len(blocked)} jobs it blocked")

    def descendants(self, job_id: str) -> list[str]:
        """The jobs that wait for `job_id`, directly or not."""
        found: list[str] = []
        frontier = [job_id]
        while frontier:
            parent = frontier.pop()
            for child, deps in self.run.deps_of.items():
                if parent in deps and child not in found:
                    found.append(child)
                    frontier.append(child)
        return found

    def since(self, job_id: str) -> int:
        """The execution id after which `job_id`'s attempts are counted (its replay's)."""
        replay = self.done.get(job_id)
        return replay.last_eid if replay else 0


def check_result_chains(checker: Checker) -> dict[str, int]:
    """Every `chaos_add` step that succeeded took the previous step's result from its
    succeeded attempt, once: its value is the plan's (the start plus each `k` so far)."""
    run, jobs = checker.run, checker.jobs
    counts: Counter[str] = Counter()
    for job_id, job in jobs.items():
        if run.kind_of[job_id] != "chaos_add":
            continue
        counts["steps"] += 1
        deps = run.deps_of.get(job_id, [])
        if not deps:
            counts["chains_started"] += 1
        if job["status"] != "succeeded" or job["result"] is None:
            continue
        where = f"result chain: job {job_id} ({job['status']})"
        result = job["result"]
        got, want_got = result.get("got"), None
        if deps:
            dep = jobs.get(deps[0])
            if dep is None:
                continue
            succeeded = [e["execution_id"] for e in dep["executions"]
                         if e["outcome"] == "succeeded"]  # fmt: skip
            want_got = taken(checker, deps[0])
            if want_got is not None and want_got[0] != "lost":
                want_got = [deps[0], succeeded[-1] if succeeded else None]
            elif want_got is not None:
                counts["previous_result_lost_after_commit_told"] += 1
        if got != want_got:
            checker.fail(f"{where} took the result of {got}, not of {want_got}, the "
                         "previous step's succeeded attempt (or the lost-result marker "
                         "where that result is lost)")  # fmt: skip
        if deps and lost_before(checker, deps[0]):
            counts["steps_after_a_result_lost_after_commit"] += 1
            continue  # the chain's value is lost with the result; the ledger holds it once
        expected = planned_value(run, job_id)
        counts["steps_checked"] += 1
        if result.get("value") != expected:
            checker.fail(f"{where} value {result.get('value')}, the plan's is {expected}")
        elif not any(job_id in d for d in run.deps_of.values()):
            counts["last_steps_with_the_planned_value"] += 1
    return dict(sorted(counts.items()))


def lost_before(checker: Checker, job_id: str) -> bool:
    """`job_id` or a step before it succeeded with its result lost after its commit
    (its worker died before saving it): the steps after it took the lost-result marker,
    the value is gone."""
    while True:
        job = checker.jobs.get(job_id)
        if job is None or job["result_lost"] is not None:
            return True
        deps = checker.run.deps_of.get(job_id, [])
        if not deps:
            return False
        job_id = deps[0]


def planned_value(run: ChaosRun, job_id: str) -> int:
    """The value a step returns if every step before it passed its result once: the
    start (given, or a fixable root's), plus every `k` from the root to it."""
    args = run.args_of[job_id]
    deps = run.deps_of.get(job_id, [])
    if run.kind_of[job_id] == "chaos_fixable":
        return int(args["start"]) + int(args["k"])
    if not deps:
        return int(args["prev"]["value"]) + int(args["k"])
    return planned_value(run, deps[0]) + int(args["k"])


def check_replays(checker: Checker) -> dict[str, int]:
    """A replayed root ran again and succeeded (or faults spent its retries), every job
    it held blocked was released and ran to its end (or is accounted for by a `cancel`
    fault or another dead job), none remains blocked by it; no root succeeded unfixed,
    and none the plan replays was left dead."""
    run, jobs, replays = checker.run, checker.jobs, checker.run.replays
    counts: Counter[str] = Counter()
    for job_id, job in jobs.items():
        if run.kind_of[job_id] != "chaos_fixable":
            continue
        counts["roots"] += 1
        where = f"replay: root {job_id} ({job['status']})"
        replay = replays.done.get(job_id)
        if replay is None:
            if job["status"] == "succeeded":
                checker.fail(f"{where} succeeded, though never fixed")
            elif job["status"] == "dead" and run.args_of[job_id].get("replay_after") is not None:
                checker.fail(f"{where} left dead: the runner never replayed it")
            elif job["status"] == "dead":
                counts["left_dead_by_plan"] += 1
            continue
        counts["replayed"] += 1
        after = [e for e in job["executions"] if e["execution_id"] > replay.last_eid]
        if not after and job["status"] != "cancelled":
            checker.fail(f"{where} replayed, but it never ran again")
        if job["status"] == "dead":
            if any(e["outcome"] == "failed" for e in after):
                checker.fail(f"{where} replayed and fixed, yet an attempt failed")
            counts["died_again_by_faults"] += 1
            continue
        if job["status"] != "succeeded":
            continue
        counts["replayed_and_succeeded"] += 1
        counts["blocked_when_replayed"] += len(replay.blocked)
        for d in replay.blocked:
            release_of(checker, d, job_id, replay, counts)
    for job_id in run.enqueued:
        job = jobs.get(job_id)
        holder = ((job or {}).get("blocked_by") or {}).get("id")
        if job is not None and job["status"] == "blocked" and holder in replays.done:
            if jobs.get(holder, {}).get("status") == "succeeded":
                checker.fail(f"replay: job {job_id} still blocked by {holder}, which was "
                             "replayed and succeeded")  # fmt: skip
        elif (
            job is not None
            and job["status"] == "blocked"
            and jobs.get(holder or "", {}).get("status") == "dead"  # else I1 fails it
        ):
            counts["blocked_at_end_by_a_dead_job"] += 1
    return dict(sorted(counts.items()))


def release_of(
    checker: Checker, job_id: str, holder: str, replay: Replay, counts: Counter[str]
) -> None:
    """A job the replay of `holder` found blocked: released, and ran to its end."""
    run = checker.run
    job = checker.jobs.get(job_id)
    if job is None:
        checker.fail(f"replay: job {job_id}, blocked by {holder} when replayed, is lost")
        return
    where = f"replay: job {job_id} ({job['status']}), blocked by {holder} when replayed,"
    cancelled = job_id in run.cancel_asked or checker.dependency_cancelled(job_id)
    now_held_by = (job.get("blocked_by") or {}).get("id")
    if job["status"] == "cancelled" and cancelled:
        counts["released_then_cancelled_by_a_fault"] += 1
    elif (
        job["status"] == "blocked"
        and now_held_by not in (None, holder)
        and checker.jobs.get(now_held_by or "", {}).get("status") == "dead"
    ):
        counts["released_then_blocked_by_another"] += 1
    elif job["status"] not in TERMINAL or job["status"] == "cancelled":
        checker.fail(f"{where} was not released to run to its end")
    elif not job["executions"]:
        checker.fail(f"{where} ended without running")
    else:
        counts["released_and_ran"] += 1
