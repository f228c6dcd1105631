"""The chaos runner's fairness keys (`tests/soak/chaos.py`, step 3): a share of the
plan's standalone jobs (`--fair`) carry a fairness key, most of them one flooding key,
the rest a few others (one weighted 2), so claims take the keys in turn amid every
fault (docs/design/limits.md, "Fair shares"), on both backends.

What is checked (`check`): each key's jobs were first claimed in their own order, the
order a claim takes a key's jobs in (higher priority first, then enqueued first: the
runner enqueues from one process, one batch after the other, so its ids, like its
enqueues and PostgreSQL's ready log, follow the plan). For two jobs A and B of one queue
and key, A enqueued before B with a priority at least B's, A's first attempt must not
have been claimed after B's: when B was claimed A was queued and runnable, ahead of it.
Only first attempts count: a retry, a snooze or a reclaim puts a job back in line behind
the others, as it should. Each attempt's claim time is its execution's `started_at`, set
by the claim: on SQLite by its clock read under the one write lock, so claims are dated
in their order; on PostgreSQL by the claim statement's start, so two claims running at
once (one skipping the rows the other locked) may be dated up to `CLOCK_TOLERANCE` out
of their order: counted apart, not failed.

On PostgreSQL a job may also be passed over for longer: a claim locks (`SKIP LOCKED`)
entries of each lane it walks (as far as its turns could take) and its
limit of due jobs, takes its limit of them all, and leaves the others locked until it
commits; a claim running meanwhile passes over those and may take a later job of the
same key, and the job passed over waits for its key's next turn, a claim or several
later (`queries/ready_log.py`, `logged`; a run's witness: seed 72, 0.53 s). So a later job first
claimed before an earlier one by more than the tolerance is counted apart as passed
over (`passed_over`) when a claim of another worker was dated within
`CLOCK_TOLERANCE` of it (the claim that held the earlier one is such a claim: it ran
while this one walked, and took jobs of its own); failed when none was, as a claim
that ignored the key's order would be. A first claim inside a failover's window, where
a claim may be lost and issued again, is left out. With `--prefetch` a start records a
later time, so the check is left out then.

On SQLite also (`check_counts`): each key's kept count of its jobs in line is what the
jobs say, after every cancel, pause, retry and kill the run made.
"""

from __future__ import annotations

import bisect
import dataclasses
import random
from typing import TYPE_CHECKING, Any

from heartq.model import NewJob
from tests.soak.chaos_config import CLOCK_TOLERANCE, ChaosConfig, parse_ts, within

if TYPE_CHECKING:
    from tests.soak.chaos_checks import Checker

FLOOD = "flood"
KEYS = {FLOOD: 1.0, "acct-1": 2.0, "acct-2": 1.0, "acct-3": 1.0, "acct-4": 1.0}
"""The run's fairness keys and their weights."""
OTHERS = sorted(set(KEYS) - {FLOOD})
FLOOD_SHARE = 0.6
"""Of the keyed jobs, the flooding key's share; the others share the rest evenly."""
UNKEYED_KINDS = frozenset({"chaos_rated", "chaos_limited"})
"""Kinds left without a key: a job with a rate or a concurrency key goes to its own
claim, which takes no turns."""


def with_key(job: NewJob, config: ChaosConfig, rng: random.Random) -> NewJob:
    """`job` with a fairness key and its weight, for `config.fair` of the standalone jobs
    (none with a rate key). Drawn from its own stream (`rng`), so the rest of the plan is
    the same with keys or without."""
    draw, flood, other = rng.random(), rng.random(), rng.choice(OTHERS)
    if job.task in UNKEYED_KINDS or draw >= config.fair:
        return job
    key = FLOOD if flood < FLOOD_SHARE else other
    return dataclasses.replace(job, fair_key=key, fair_weight=KEYS[key])


def _first_claim(job: dict[str, Any]) -> float | None:
    execs = [e for e in job["executions"] if e["execution_id"] == 1]
    return parse_ts(execs[0]["started_at"]) if execs else None


def _claims(checker: Checker) -> tuple[list[float], list[str]]:
    """Every attempt's claim time (its `started_at`), in order, and its worker."""
    dated = sorted(
        (at, str(e["worker_id"]))
        for job in checker.jobs.values()
        for e in job["executions"]
        if (at := parse_ts(e["started_at"])) is not None
    )
    return [at for at, _ in dated], [worker for _, worker in dated]


def _concurrent(claims: tuple[list[float], list[str]], at: float, worker: str) -> bool:
    """Whether a worker other than `worker` claimed within `CLOCK_TOLERANCE` of `at`."""
    times, workers = claims
    lo = bisect.bisect_left(times, at - CLOCK_TOLERANCE)
    hi = bisect.bisect_right(times, at + CLOCK_TOLERANCE)
    return any(w != worker for w in workers[lo:hi])


def _first_worker(job: dict[str, Any]) -> str:
    execs = [e for e in job["executions"] if e["execution_id"] == 1]
    return str(execs[0]["worker_id"]) if execs else ""


def check(checker: Checker) -> None:
    """Each key's first claims in its own order (the module says why that is the rule)."""
    run = checker.run
    by_share: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {}
    for n, job_id in enumerate(run.enqueued):
        job = checker.jobs.get(job_id)
        if job is not None and job.get("fair_key") is not None:
            by_share.setdefault((job["queue"], job["fair_key"]), []).append((n, job))
    figures: dict[str, Any] = {"keys": len(by_share), "jobs": 0, "checked": False}
    figures["per_key"] = {f"{q}/{k}": len(jobs) for (q, k), jobs in sorted(by_share.items())}
    figures["jobs"] = sum(figures["per_key"].values())
    checker.fair = figures
    if run.config.prefetch:
        return  # a start claimed ahead is dated when it starts, not when claimed
    figures["checked"] = True
    postgres = run.config.backend == "postgres"
    tolerance = CLOCK_TOLERANCE if postgres else 0.0
    claims = _claims(checker) if postgres else ([], [])
    windows = run.links.claim_windows() + run.links.loss_windows()
    out_of_order = within_tolerance = passed_over = 0
    for (queue, key), jobs in by_share.items():
        # the latest first claim so far of the jobs enqueued before, per priority
        latest: dict[int, tuple[float, str]] = {}
        for _, job in jobs:  # in enqueue order
            claimed = _first_claim(job)
            if within(claimed, windows):
                continue  # its claim may have been lost and issued again
            priority = int(job["priority"])
            ahead = [latest[p] for p in latest if p >= priority]
            if claimed is not None and ahead:
                at, before = max(ahead)
                if at - tolerance > claimed and postgres and _concurrent(
                    claims, claimed, _first_worker(job)
                ):
                    passed_over += 1  # the earlier one held by a claim running meanwhile
                elif at - tolerance > claimed:
                    out_of_order += 1
                    checker.fail(
                        f"fair: job {job['id']} of key {key} (queue {queue}, priority "
                        f"{priority}) first claimed {at - claimed:.3f} s before job {before}, "
                        "enqueued before it with a priority as high"
                    )
                elif at > claimed:
                    within_tolerance += 1  # two PostgreSQL claims at once
            held = latest.get(priority)
            if claimed is not None and (held is None or claimed > held[0]):
                latest[priority] = (claimed, job["id"])
    figures["out_of_order"] = out_of_order
    figures["within_clock_tolerance"] = within_tolerance
    figures["passed_over"] = passed_over


# SQLite's count of each key's jobs in line (`heartq_fair_finishes.waiting`, kept by
# every statement that tags a job or takes one out of line) against the jobs themselves
# (also read by tests/conformance/test_sqlite_fair_reach.py).
COUNTED = """SELECT queue, priority, fair_key, waiting FROM heartq_fair_finishes
WHERE fair_key <> '' AND waiting > 0"""
IN_LINE = """SELECT queue, priority, fair_key, count(*) FROM heartq_jobs
WHERE status = 'queued' AND fair_tag IS NOT NULL GROUP BY 1, 2, 3"""


def check_counts(checker: Checker) -> None:
    """On SQLite, after the run: each key's kept count of its jobs in line is the number
    of its queued jobs that hold a tag (a count that drifted would give a key's next job
    a wrong place: behind jobs it no longer has, or ahead of its own). After `check`."""
    figures = checker.fair
    conn = checker.run.store.link.pool.get()  # type: ignore[attr-defined]
    counted = {tuple(row[:3]): row[3] for row in conn.execute(COUNTED).fetchall()}
    in_line = {tuple(row[:3]): row[3] for row in conn.execute(IN_LINE).fetchall()}
    figures["keys_in_line"] = len(in_line)
    if counted != in_line:
        checker.fail(f"fair: the keys' counts of jobs in line {counted} are not {in_line}")
