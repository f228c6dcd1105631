"""The chaos runner's stream of jobs: `--jobs` jobs of mixed kinds, drawn from the seed,
with pipelines (groups with their callback, chains; result-passing chains and
blocked-and-replayed pipelines, `chaos_pipes`) among them (`tests/soak/chaos.py`,
step 3; the hostile family's share: `chaos_hostile.mix_hostile`; fairness keys on a
share of the standalone jobs: `chaos_fair`)."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

from heartq.ids import new_job_id
from heartq.model import NewJob
from tests.soak.chaos_commits import mark
from tests.soak.chaos_config import LEDGER_KINDS, ChaosConfig
from tests.soak.chaos_fair import with_key
from tests.soak.chaos_pipes import make_replayed, make_result_chain
from tests.soak.chaos_tasks import (
    LIMITED_KEYS,
    LIMITED_LIMIT,
    PROC_QUEUE,
    RATE_KEY,
    RATE_LIMIT,
    RATE_PERIOD,
    SNOOZE_BOUND,
)

KIND_WEIGHTS: dict[str, float] = {
    "chaos_short": 40,
    "chaos_rated": 6,
    "chaos_limited": 3,  # a draw is a burst of 3-6 (`LIMITED_BURST`)
    "chaos_long": 14,
    "chaos_flaky": 12,
    "chaos_async": 8,
    "chaos_permanent": 5,
    "chaos_timeout": 4,
    "chaos_silent": 3,
    "chaos_child_crash": 6,
    "chaos_proc_long": 8,
    "chaos_snoozy": 5,
}

LIMITED_BURST = (3, 6)
"""How many `chaos_limited` jobs of one key a draw enqueues together, at least and at most:
queued behind each other, so claims meet a key at its limit with more of its jobs
runnable (one job a draw, the check saw 3-5 such attempts a run)."""


def make_job(kind: str, n: int, rng: random.Random, key: str | None = None) -> NewJob:
    """One job of `kind` (arguments and retry policy drawn from `rng`; `key`: a
    `chaos_limited` job's concurrency key, else drawn)."""
    args: dict[str, Any] = {"n": n}
    max_retries = 5
    limits: dict[str, Any] = {}  # a rate or a concurrency key, with its limit
    if kind == "chaos_short":
        args["ms"] = rng.randint(0, 30)
    elif kind == "chaos_rated":
        args["ms"] = rng.randint(0, 30)
        limits = {"rate_key": RATE_KEY, "rate_limit": RATE_LIMIT, "rate_period": RATE_PERIOD}
    elif kind == "chaos_limited":  # long enough that a key's jobs queue up behind it
        args["ms"] = rng.randint(200, 600)
        key = key or rng.choice(LIMITED_KEYS)
        limits = {"concurrency_key": key, "concurrency_limit": LIMITED_LIMIT}
    elif kind in ("chaos_long", "chaos_proc_long"):
        args["steps"] = rng.randint(4, 10)
        args["step_s"] = round(rng.uniform(0.08, 0.25), 3)
    elif kind == "chaos_flaky":
        args["fail_times"] = rng.randint(1, 2)
    elif kind == "chaos_snoozy":
        # within its task's bound (then it succeeds), or past it: its snoozes then fail
        # its attempts until it is dead
        args["snoozes"] = rng.choice((1, 2, SNOOZE_BOUND, SNOOZE_BOUND + 10))
        args["snooze_s"] = round(rng.uniform(0.02, 0.3), 3)
        max_retries = 2
    elif kind == "chaos_async":
        args["ms"] = rng.randint(10, 100)
    elif kind == "chaos_timeout":
        max_retries = 1
    elif kind == "chaos_permanent":
        max_retries = 3
    if kind in LEDGER_KINDS:
        # some effects keep their transaction open a little, so faults land inside it
        long_kind = kind in ("chaos_long", "chaos_proc_long")
        if rng.random() < (0.5 if long_kind else 0.1):
            args["hold_ms"] = rng.randint(2, 20) if long_kind else rng.randint(1, 5)
    return NewJob(
        task=kind,
        args_json=json.dumps(args),
        queue=PROC_QUEUE if kind in ("chaos_child_crash", "chaos_proc_long") else "default",
        priority=rng.randint(0, 2),
        max_retries=max_retries,
        retry_backoff=0.05,
        retry_backoff_max=0.5,
        **limits,
    )


def make_limited_burst(size: int, n: int, rng: random.Random) -> list[NewJob]:
    """`size` `chaos_limited` jobs of one concurrency key, enqueued together."""
    key = rng.choice(LIMITED_KEYS)
    return [make_job("chaos_limited", n + i, rng, key) for i in range(size)]


MEMBER_WEIGHTS: dict[str, float] = {
    "chaos_short": 30,
    "chaos_flaky": 12,
    "chaos_long": 10,
    "chaos_async": 8,
    "chaos_proc_long": 6,
    "chaos_child_crash": 3,
    "chaos_permanent": 2,
}
"""The kinds of a group's members and a chain's steps: mostly ones that succeed (after
retries, crashes and checkpoints), a few that end dead and so block what waits."""


def job_plan(config: ChaosConfig) -> list[NewJob]:
    """`config.jobs` jobs, dependencies before what waits for them (a batch of the plan
    holds a pipeline's callback only with or after its members)."""
    rng = random.Random(f"jobs-{config.seed}")
    fair_rng = random.Random(f"fair-{config.seed}")  # its own stream: the plan is the same
    kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
    plan: list[NewJob] = []
    while len(plan) < config.jobs:
        left, n = config.jobs - len(plan), len(plan)
        draw = rng.random()
        share = config.pipelines
        if left >= 3 and draw < share * 0.35:
            plan += make_group(rng.randint(2, min(5, left - 1)), n, rng)
        elif left >= 2 and draw < share * 0.6:
            plan += make_chain(rng.randint(2, min(4, left)), n, rng)
        elif left >= 2 and draw < share * 0.8:
            plan += make_result_chain(rng.randint(2, min(5, left)), n, rng)
        elif left >= 2 and draw < share:
            plan += make_replayed(rng.randint(2, min(4, left)), n, rng)
        else:
            kind = rng.choices(kinds, weights)[0]
            if kind == "chaos_limited":
                plan += make_limited_burst(min(left, rng.randint(*LIMITED_BURST)), n, rng)
            else:
                plan.append(with_key(make_job(kind, n, rng), config, fair_rng))
    return plan


def _member(n: int, rng: random.Random, depends_on: tuple[str, ...] = ()) -> NewJob:
    """A group's member or a chain's step: some hand their result to their commit, some
    are killed between the commit and the return (`chaos_commits.mark`)."""
    kinds, weights = list(MEMBER_WEIGHTS), list(MEMBER_WEIGHTS.values())
    job = make_job(rng.choices(kinds, weights)[0], n, rng)
    return mark(dataclasses.replace(job, id=new_job_id(), depends_on=depends_on), rng)


def make_group(size: int, n: int, rng: random.Random) -> list[NewJob]:
    """`size` members and their callback (`chaos_fan_in`), which waits for them all and
    receives their results."""
    members = [_member(n + i, rng) for i in range(size)]
    args: dict[str, Any] = {"n": n + size}
    if rng.random() < 0.2:
        args["hold_ms"] = rng.randint(1, 5)
    callback = NewJob(
        task="chaos_fan_in",
        args_json=json.dumps(args),
        priority=rng.randint(0, 2),
        max_retries=5,
        retry_backoff=0.05,
        retry_backoff_max=0.5,
        id=new_job_id(),
        depends_on=tuple(m.id for m in members if m.id),
        dependency_results=True,
    )
    return [*members, callback]


def make_chain(size: int, n: int, rng: random.Random) -> list[NewJob]:
    """`size` steps, each waiting for the one before."""
    steps: list[NewJob] = []
    for i in range(size):
        before = (steps[-1].id,) if steps and steps[-1].id else ()
        steps.append(_member(n + i, rng, before))
    return steps
