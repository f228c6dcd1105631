"""Unique keys at enqueue: jobs of one batch that share a key, and jobs that met a holder.

A job with a `unique_key` is stored only while no other job holds the key (queued,
waiting or running, or finished within its `unique_for`); otherwise the enqueue answers
the holder's id (the store decides, in the statement that would insert it). Two things
the store cannot tell its caller are decided here, around it:

- A batch (`enqueue_many`) whose jobs share a key: only the first could be stored, and
  the others would answer its id. That is what the caller meant when the jobs are the
  same job (one key for the whole batch of one job's repeats); when they differ (other
  arguments, another queue), the others' differences would be dropped without a word,
  so the batch is refused before anything is stored.
- Whether an id answered is the job just made or a holder: the app gives each job its id
  before storing it, so an answer that differs is a holder's. With `on_conflict="raise"`
  the caller hears of it (`heartq.AlreadyEnqueued`); the default answers quietly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from heartq.errors import AlreadyEnqueued, ConfigError
from heartq.model import NewJob
from heartq.options import Options


def refuse_collisions(jobs: Sequence[NewJob]) -> None:
    """`ConfigError` for a batch in which jobs that differ share a unique key."""
    first: dict[str, tuple[int, NewJob]] = {}
    for n, job in enumerate(jobs):
        if job.unique_key is None:
            continue
        same = dataclasses.replace(job, id=None)
        if job.unique_key not in first:
            first[job.unique_key] = (n, same)
        elif first[job.unique_key][1] != same:
            raise ConfigError(
                f"jobs {first[job.unique_key][0]} and {n} of the batch share unique key "
                f"{job.unique_key!r} but differ (arguments {first[job.unique_key][1].args_json} "
                f"and {job.args_json}): only one could be stored; nothing was"
            )


def check_conflicts(jobs: Sequence[NewJob], ids: Sequence[str], options: Options) -> None:
    """After the store answered `ids` for `jobs` (made with their own ids): with
    `on_conflict="raise"`, `AlreadyEnqueued` for the first job that met a holder of its
    key (a job a batch repeats answers the id of its first, which is not a holder)."""
    if options.chosen.get("on_conflict") != "raise":
        return
    made = {job.id for job in jobs}
    for job, job_id in zip(jobs, ids, strict=True):
        if job.unique_key is not None and job_id != job.id and job_id not in made:
            raise AlreadyEnqueued(job_id, job.unique_key, ids)
