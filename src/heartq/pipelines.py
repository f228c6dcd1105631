"""Chains and groups: pipelines of jobs, as plain Python over `depends_on`.

`task.s(...)` is a `Signature` (a task, its arguments, its enqueue options); `chain(...)`
runs steps one after the other, each step waiting for the previous one; `group(...)` runs
its members side by side (none at all: it is done as soon as it may start), with an
optional `callback` that waits for every member and receives their results, in the
members' order, as its first argument. A pipeline's `enqueue()` stores every job of it in
ONE transaction (all or nothing, in the caller's with `connection=`) and returns a
`Pipeline` of their ids.

A step receives the previous step's result only when it says so,
`task.s(...).takes_result()` (Celery's `s()` passes it and `si()` does not; here a plain
`s()` keeps meaning what it always did: a step that takes nothing it was not given). The
result is its first parameter: a signature's or chain's result as it is, a group's the
list of its members' results (with a callback: the callback's result). Each member of a
group after a step takes that step's result if it says so.

Why nothing more is needed: each job's waiting, its settling and a failure's cascade are
the store's (`store/sql/dependencies.py`), in the transaction that ends each dependency;
a job that takes results is flagged `dependency_results`, its edges say which results
it takes and how (`NewJob.results_of`, `one_result`), and its worker reads them, as the
fenced finish of each dependency saved them, before it calls the task. So a pipeline
neither loses nor repeats a step, whatever dies: there is no counter or chord state
outside the jobs' own rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from heartq import arguments
from heartq.errors import ConfigError
from heartq.ids import new_job_id
from heartq.model import Pipeline
from heartq.options import NOT_FOR_STEPS, EnqueueOptions, Options, StepOptions
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
        takes_result: bool = False,
    ) -> None:
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.options: EnqueueOptions = options or {}
        self.result_taken = takes_result
        refused = [name for name in NOT_FOR_STEPS if name in self.options]
        if refused:
            raise ConfigError(
                f"Signature.set() takes any enqueue option but {', '.join(NOT_FOR_STEPS)}, "
                f"got {refused[0]}: a step answered by the id of a job holding its key "
                "would not be stored, and the steps after it would wait for it for ever "
                "(enqueue that job alone, then the pipeline with .set(depends_on=[its id]))"
            )
        Options.given("Signature.set", self.options)  # checked now: says where

    def set(self, **options: Unpack[StepOptions]) -> Signature:
        """This signature with these enqueue options (`heartq.options`) as well: any
        but a unique key's (`NOT_FOR_STEPS`)."""
        merged: EnqueueOptions = {**self.options, **options}
        return Signature(self.task, self.args, self.kwargs, merged, self.result_taken)

    def takes_result(self) -> Signature:
        """This signature taking the previous step's result as its first argument (after
        `ctx`), before the arguments it was given: `chain(add.s(4, 4),
        add.s(8).takes_result())` runs `add(8, 8)`. The task must have a plain first
        parameter for it (`BadArguments` at enqueue), and the step a previous one
        (`ConfigError`)."""
        return Signature(self.task, self.args, self.kwargs, self.options, takes_result=True)

    def enqueue(self, app: EnqueuingApp | None = None, connection: Any = None) -> Pipeline:
        """Enqueue this one job (as a pipeline of one)."""
        return _enqueue(self, app, connection)

    def __repr__(self) -> str:
        taken = " takes_result" if self.result_taken else ""
        return f"<Signature {self.task.name} args={self.args!r} kwargs={self.kwargs!r}{taken}>"


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
    on_dependency_failure="run")`). A group of no members is done as soon as it may
    start: its callback runs then, with `[]`."""

    def __init__(
        self, members: Sequence[Signature | Chain | Group], callback: Signature | None = None
    ) -> None:
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
    waits for both and is called with `[result of a(1), result of a(2)]` first.
    `heartq.group(callback=b.s())`: b runs at once, with `[]`."""
    return Group(members, callback)


def _step(step: Any) -> Signature | Chain | Group:
    if not isinstance(step, Signature | Chain | Group):
        raise ConfigError(
            f"a pipeline's steps are signatures (task.s(...)), chains or groups, got {step!r}"
        )
    return step


@dataclasses.dataclass(frozen=True)
class _Before:
    """What a step of a pipeline follows: the jobs it waits for, and those whose results
    make the previous step's result (`one`: a single job's, passed as it is; otherwise
    the list of them: a group's). `begun`: there is a previous step (at a pipeline's
    start there is none, and no result to take)."""

    waits: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    one: bool = False
    begun: bool = False


@dataclasses.dataclass
class _Part:
    """One job of a pipeline, before it is stored: what it waits for, and, for a job
    that takes results, whose (`results_of`) and how (`one`)."""

    signature: Signature
    waits: tuple[str, ...]
    results_of: tuple[str, ...] | None = None
    one: bool = False
    id: str = dataclasses.field(default_factory=new_job_id)


def _layout(step: Signature | Chain | Group, before: _Before, parts: list[_Part]) -> _Before:
    """Append the jobs of `step`, following `before` (its place in the pipeline), to
    `parts`; return what a following step follows."""
    if isinstance(step, Signature):
        part = _Part(step, before.waits)
        if step.result_taken:
            if not before.begun:
                raise ConfigError(
                    f"{step!r} takes the previous step's result, but has no previous step"
                )
            part.results_of, part.one = before.results, before.one
        parts.append(part)
        return _Before((part.id,), (part.id,), one=True, begun=True)
    if isinstance(step, Chain):
        for inner in step.steps:
            before = _layout(inner, before, parts)
        return before
    ends = [_layout(member, before, parts) for member in step.members]
    waits = tuple(dict.fromkeys(w for end in ends for w in end.waits)) if ends else before.waits
    done = _Before(waits, tuple(r for end in ends for r in end.results), begun=True)
    if step.callback is None:
        return done
    part = _Part(step.callback, done.waits, results_of=done.results)
    parts.append(part)
    return _Before((part.id,), (part.id,), one=True, begun=True)


def _enqueue(
    step: Signature | Chain | Group, app: EnqueuingApp | None, connection: Any
) -> Pipeline:
    parts: list[_Part] = []
    tail = _layout(step, _Before(), parts).waits
    if not parts:  # empty groups only: nothing to run, done at once
        return Pipeline(ids=(), tail=())
    target = app if app is not None else parts[0].signature.task.app
    args_list = [_args(part) for part in parts]
    made = [_made(target, part, args) for part, args in zip(parts, args_list, strict=True)]
    ids = target.producer.enqueue_pipeline(made, args_list, connection)
    return Pipeline(ids=tuple(ids), tail=tail)


def _args(part: _Part) -> dict[str, Any]:
    """The job's arguments: bound against its task (one that takes results, without
    them: the worker adds them; `BadArguments` if it has no parameter to take them)."""
    sig = part.signature
    task = sig.task
    if part.results_of is not None:
        what = arguments.PREVIOUS_RESULT if sig.result_taken else arguments.DEPENDENCY_RESULTS
        return arguments.bind_after_results(task.name, task.signature, sig.args, sig.kwargs, what)
    return task.bind(*sig.args, **sig.kwargs)


def _made(app: EnqueuingApp, part: _Part, args: dict[str, Any]) -> Made:
    """The part's job as the app's producer makes any job of its task (policy, options,
    checks), with its place in the pipeline: its id, what it waits for (its own
    `depends_on` option too, whose results it never takes) and whose results it takes:
    those first, in their order, which is the order the worker passes them in."""
    sig = part.signature
    options = Options.given("Signature.set", sig.options)
    made = app.producer.make(sig.task.name, [args], options, bound=True, step=True)
    (job,) = made.jobs
    taken = part.results_of or ()
    placed = dataclasses.replace(
        job,
        id=part.id,
        depends_on=tuple(dict.fromkeys([*taken, *part.waits, *job.depends_on])),
        dependency_results=part.results_of is not None,
        results_of=part.results_of,
        one_result=part.one,
    )
    return made._replace(jobs=[placed])
