"""Chains and groups: pipelines of jobs, as plain Python over `depends_on`.

`task.s(...)` is a `Signature` (a task, its arguments, its enqueue options); `chain(...)`
runs steps one after the other, each step waiting for the previous one; `group(...)` runs
its members side by side, with an optional `callback` that waits for every member and
receives their results, in the members' order, as its first argument. A pipeline's
`enqueue()` stores every job of it in ONE transaction (all or nothing, in the caller's
with `connection=`) and returns a `Pipeline` of their ids.

Why nothing more is needed: each job's waiting, its release and a failure's cascade are
the store's (`store/sql/dependencies.py`), in the transaction that ends each dependency;
a callback is a job flagged `dependency_results`, whose worker reads its dependencies'
results before it calls the task. So a pipeline neither loses nor repeats a step,
whatever dies: there is no counter or chord state outside the jobs' own rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from heartq import arguments
from heartq.errors import ConfigError
from heartq.ids import new_job_id
from heartq.model import Pipeline
from heartq.options import EnqueueOptions, Options
from heartq.producer import EnqueuingApp, Made, RegisteredTask


class Signature:
    """A task with its arguments and enqueue options, to be enqueued as part of a
    pipeline (or alone): `task.s(1, b=2)`, `.set(queue="fast", priority=5)`. The
    arguments are checked against the task when the pipeline is enqueued (a callback's
    leave out its first parameter: the results)."""

    def __init__(
        self,
        task: RegisteredTask,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        options: EnqueueOptions | None = None,
    ) -> None:
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.options: EnqueueOptions = options or {}
        Options.given("Signature.set", self.options)  # checked now: says where

    def set(self, **options: Unpack[EnqueueOptions]) -> Signature:
        """This signature with these enqueue options (`heartq.options`) as well."""
        merged: dict[str, Any] = {**self.options, **options}
        return Signature(self.task, self.args, self.kwargs, merged)  # type: ignore[arg-type]

    def enqueue(self, app: EnqueuingApp | None = None, connection: Any = None) -> Pipeline:
        """Enqueue this one job (as a pipeline of one)."""
        return _enqueue(self, app, connection)

    def __repr__(self) -> str:
        return f"<Signature {self.task.name} args={self.args!r} kwargs={self.kwargs!r}>"


class Chain:
    """Steps run one after the other: each waits for the one before (a group step: for
    all its members, or for its callback when it has one)."""

    def __init__(self, steps: Sequence[Signature | Chain | Group]) -> None:
        if not steps:
            raise ConfigError("a chain needs at least one step")
        self.steps = tuple(_step(s) for s in steps)

    def enqueue(self, app: EnqueuingApp | None = None, connection: Any = None) -> Pipeline:
        """Store every job of the chain in one transaction (the caller's with
        `connection`); `app`: where (default: the app of its first task)."""
        return _enqueue(self, app, connection)


class Group:
    """Members run side by side; `callback` (optional) waits for every one of them and
    receives their results, in the members' order, as its first argument (None for a
    member that did not succeed, when the callback runs anyway: `.set(
    on_dependency_failure="run")`)."""

    def __init__(
        self, members: Sequence[Signature | Chain | Group], callback: Signature | None = None
    ) -> None:
        if not members:
            raise ConfigError("a group needs at least one member")
        if callback is not None and not isinstance(callback, Signature):
            raise ConfigError(f"a group's callback must be a task's signature, got {callback!r}")
        self.members = tuple(_step(m) for m in members)
        self.callback = callback

    def enqueue(self, app: EnqueuingApp | None = None, connection: Any = None) -> Pipeline:
        """Store every job of the group in one transaction (as `Chain.enqueue`)."""
        return _enqueue(self, app, connection)


def chain(*steps: Signature | Chain | Group) -> Chain:
    """`heartq.chain(a.s(1), b.s(2), c.s(3))`: b waits for a, c for b."""
    return Chain(steps)


def group(*members: Signature | Chain | Group, callback: Signature | None = None) -> Group:
    """`heartq.group(a.s(1), a.s(2), callback=b.s())`: the a jobs run side by side; b
    waits for both and is called with `[result of a(1), result of a(2)]` first."""
    return Group(members, callback)


def _step(step: Any) -> Signature | Chain | Group:
    if not isinstance(step, Signature | Chain | Group):
        raise ConfigError(
            f"a pipeline's steps are signatures (task.s(...)), chains or groups, got {step!r}"
        )
    return step


@dataclasses.dataclass
class _Part:
    """One job of a pipeline, before it is stored."""

    signature: Signature
    depends_on: list[str] = dataclasses.field(default_factory=list)
    results: bool = False
    id: str = dataclasses.field(default_factory=new_job_id)


def _layout(step: Signature | Chain | Group, after: list[str], parts: list[_Part]) -> list[str]:
    """Append the jobs of `step`, each waiting for `after` (its place in the pipeline),
    to `parts`; return its tail (what a following step waits for)."""
    if isinstance(step, Signature):
        part = _Part(step, depends_on=list(after))
        parts.append(part)
        return [part.id]
    if isinstance(step, Chain):
        for inner in step.steps:
            after = _layout(inner, after, parts)
        return after
    tails = [job_id for member in step.members for job_id in _layout(member, after, parts)]
    if step.callback is None:
        return tails
    part = _Part(step.callback, depends_on=tails, results=True)
    parts.append(part)
    return [part.id]


def _enqueue(
    step: Signature | Chain | Group, app: EnqueuingApp | None, connection: Any
) -> Pipeline:
    parts: list[_Part] = []
    tail = _layout(step, [], parts)
    target = app if app is not None else parts[0].signature.task.app
    args_list = [_args(part) for part in parts]
    made = [_made(target, part, args) for part, args in zip(parts, args_list, strict=True)]
    ids = target.producer.enqueue_pipeline(made, args_list, connection)
    return Pipeline(ids=tuple(ids), tail=tuple(tail))


def _args(part: _Part) -> dict[str, Any]:
    """The job's arguments: bound against its task (a callback's without its results)."""
    sig = part.signature
    task = sig.task
    if part.results:
        return arguments.bind_after_results(task.name, task.signature, sig.args, sig.kwargs)
    return task.bind(*sig.args, **sig.kwargs)


def _made(app: EnqueuingApp, part: _Part, args: dict[str, Any]) -> Made:
    """The part's job as the app's producer makes any job of its task (policy, options,
    checks), with its place in the pipeline: its id, what it waits for (its own
    `depends_on` option too) and whether it takes their results."""
    sig = part.signature
    options = Options.given("Signature.set", sig.options)
    made = app.producer.make(sig.task.name, [args], options, bound=True)
    (job,) = made.jobs
    placed = dataclasses.replace(
        job,
        id=part.id,
        depends_on=tuple(dict.fromkeys([*job.depends_on, *part.depends_on])),
        dependency_results=part.results,
    )
    return made._replace(jobs=[placed])
