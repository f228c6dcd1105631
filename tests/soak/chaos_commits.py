"""Results between a task's commit and its return, under the chaos runner
(`tests/soak/chaos.py`, steps 3, 4 and 6; docs/design/pipelines.md, "Effects exactly once").

- The plan (`mark`): the pipelines' members and steps of the kinds that can
  (`HANDING_KINDS`) hand their result to their transaction's commit (`hand`, half of
  them: `ctx.commit_result`), and some (`KILL_SHARE`) are killed between the commit and
  the return (`kill`: the task appends a `committed` line to the side file, then waits).
- The runner (`AfterCommitKills.poll`, ten times a second through the chaos and the
  drain): the worker of each attempt that wrote a `committed` line is SIGKILLed at once,
  as the `sigkill` fault kills (a `sigkill` fault, `after_commit` in its detail, its slot
  restarted), if it still runs under the runner's watch (not frozen, retiring or being
  stopped: then the task returns after its wait).
- The checker (`check_after_commit`, with `chaos_checks` and `chaos_pipes`): a succeeded
  job has its result or says it lost it (`result_lost`), never neither; a result handed
  to the commit is never lost, its worker killed or not; `app.result()` raises
  `heartq.ResultLost` for every lost result and returns every handed one whose worker
  was killed after the commit; and every callback and result-passing step received
  each result it takes, from the attempt that succeeded, or the lost-result marker
  exactly where that result is lost, never None in its place.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from typing import TYPE_CHECKING, Any

import heartq
from heartq.model import NewJob

if TYPE_CHECKING:
    from tests.soak.chaos_checks import Checker
    from tests.soak.chaos_run import ChaosRun

HANDING_KINDS = frozenset(
    {"chaos_short", "chaos_flaky", "chaos_long", "chaos_async", "chaos_proc_long",
     "chaos_child_crash", "chaos_add"}
)  # fmt: skip
"""The kinds whose task takes `hand` and `kill` (`chaos_tasks.effect`)."""
HAND_SHARE = 0.5
KILL_SHARE = 0.15


def mark(job: NewJob, rng: random.Random) -> NewJob:
    """`job` (a pipeline's member or step), given `hand` and `kill` as drawn."""
    if job.task not in HANDING_KINDS:
        return job
    args = json.loads(job.args_json)
    if rng.random() < HAND_SHARE:
        args["hand"] = True
    if rng.random() < KILL_SHARE:
        args["kill"] = True
    return dataclasses.replace(job, args_json=json.dumps(args))


class AfterCommitKills:
    """The runner's side: kill the worker of each attempt that committed and waits."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.seen: set[tuple[str, int]] = set()
        self.killed: dict[tuple[str, int], bool] = {}
        """The attempts whose worker was killed after their commit: whether it handed."""

    def poll(self) -> None:
        run = self.run
        run.side.poll()
        for key, doc in list(run.side.committed.items()):
            if key in self.seen:
                continue
            self.seen.add(key)
            proc = run.by_id(doc["wid"])
            if proc is None or proc.state != "running" or not proc.alive():
                run.skipped["kill_after_commit"] += 1
                continue
            detail = {"after_commit": key[0], "eid": key[1], "hand": bool(doc.get("hand"))}
            run.process_faults.sigkill(proc, detail)
            self.killed[key] = bool(doc.get("hand"))


def taken(checker: Checker, job_id: str) -> Any:
    """What a callback or a step must have received of `job_id`'s result, as its task
    names it: `[job, eid]` of the attempt that succeeded, `["lost", job]` for a result
    lost after its commit (`heartq.LostResult`), None for none (never right)."""
    job = checker.jobs[job_id]
    if job["result_lost"] is not None:
        return ["lost", job_id]
    result = job["result"]
    return None if result is None else [job_id, result.get("eid")]


def check_after_commit(checker: Checker) -> dict[str, int]:
    """Handed results are never lost; lost ones say so, to `app.result()` too."""
    run = checker.run
    counts: Counter[str] = Counter()
    kills = run.commits.killed
    lost = [j for j, job in checker.jobs.items() if job["status"] == "succeeded"
            and job["result_lost"] is not None]  # fmt: skip
    kept = []
    for (job_id, eid), handed in kills.items():
        counts["killed_after_commit_handed" if handed else "killed_after_commit"] += 1
        job = checker.jobs.get(job_id)
        if job is None or not handed or job["execution_id"] != eid:
            continue
        if job["result_lost"] is not None or job["result"] is None:
            checker.fail(f"results: job {job_id} handed its result to the commit of "
                         f"execution {eid}, but lost it: {job['result_lost']!r}")  # fmt: skip
        else:
            kept.append(job_id)
    for job_id, job in checker.jobs.items():
        if job["status"] == "succeeded" and run.args_of[job_id].get("hand"):
            counts["succeeded_handed"] += 1
            if job["result_lost"] is not None:
                checker.fail(f"results: job {job_id} handed its result to the commit, "
                             f"yet it is lost: {job['result_lost']}")  # fmt: skip
    counts["lost"] = len(lost)
    counts["handed_kept_through_a_kill"] = len(kept)
    app = heartq.App(run.url)
    try:
        for job_id in lost:
            try:
                got = app.result(job_id, timeout=10)
            except heartq.ResultLost as exc:
                counts["app_result_raised_result_lost"] += 1
                if exc.job_id != job_id or exc.reason != checker.jobs[job_id]["result_lost"]:
                    checker.fail(f"results: app.result({job_id}) raised {exc}")
            else:
                checker.fail(f"results: app.result({job_id}), a lost result, returned {got!r}")
        for job_id in kept:
            got = app.result(job_id, timeout=10)
            if got != checker.jobs[job_id]["result"]:
                checker.fail(f"results: app.result({job_id}) returned {got!r}, not its result")
            counts["app_result_returned_handed"] += 1
    finally:
        app.close()
    return dict(sorted(counts.items()))
