"""Calls that can never work are refused at the door: a worker declares its tasks'
parameters, and an enqueue by name (a program without the task code) is checked against
them, as an enqueue through the task itself is checked against its function; a task not
declared yet warns the caller through Python's `warnings`. Both backends, a real worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import heartq
from heartq.arguments import describe, refusal
from heartq.model import TaskParameter, TaskPolicy


@pytest.fixture
def producer(app: heartq.App) -> Iterator[heartq.App]:
    """Another program on the same queue that does not import the task code."""
    other = heartq.App(app.url)
    yield other
    other.close()


def register_crunch(app: heartq.App) -> heartq.Task[Any, Any]:
    @app.task
    def crunch(ctx: heartq.JobContext, name: str, n: int = 1, *, scale: float = 1.0) -> None: ...

    @app.task
    def loose(name: str, **extra: Any) -> None: ...

    return crunch


def test_a_worker_declares_its_tasks_parameters(
    app: heartq.App, run_worker: Callable[..., Any]
) -> None:
    register_crunch(app)
    with run_worker(app):
        pass  # it declares its tasks as it starts
    declared = app.store.task_policies()
    assert declared["crunch"].parameters == (  # its ctx is not an argument
        TaskParameter("name", "positional_or_keyword"),
        TaskParameter("n", "positional_or_keyword", has_default=True),
        TaskParameter("scale", "keyword_only", has_default=True),
    )
    assert declared["loose"].parameters == (
        TaskParameter("name", "positional_or_keyword"),
        TaskParameter("extra", "var_keyword"),
    )


def test_an_enqueue_by_name_is_checked_against_the_declared_parameters(
    app: heartq.App, producer: heartq.App, run_worker: Callable[..., Any]
) -> None:
    crunch = register_crunch(app)
    with run_worker(app):
        pass
    refused = [
        ({"name": "x", "nmae": "y"}, r"task 'crunch': got an unexpected keyword argument 'nmae'"),
        ({"n": 2}, r"task 'crunch': missing a required argument: 'name'"),
        ({"name": "x", "ctx": 1}, r"unexpected keyword argument 'ctx'"),
    ]
    for args, message in refused:
        with pytest.raises(heartq.BadArguments, match=message) as caught:
            producer.enqueue("crunch", args)
        assert isinstance(caught.value, TypeError)  # what calling the function raises
    with pytest.raises(TypeError, match="'nmae'"):  # a batch: all of it, or nothing
        producer.enqueue_many("crunch", [{"name": "a"}, {"name": "b", "nmae": "b"}])
    with pytest.raises(TypeError, match="'nmae'"):
        asyncio.run(producer.enqueue_async("crunch", {"name": "b", "nmae": "b"}))
    with pytest.raises(TypeError, match="'nmae'"):
        asyncio.run(producer.enqueue_many_async("crunch", [{"name": "b", "nmae": "b"}]))
    # The task object binds with the same check: too many by position.
    with pytest.raises(heartq.BadArguments, match="too many positional arguments"):
        crunch.enqueue("x", 2, 3)
    assert app.store.list_jobs() == []  # nothing of any of these was stored

    fits = producer.enqueue("crunch", {"name": "x", "n": 2, "scale": 0.5})
    anything = producer.enqueue("loose", {"name": "x", "colour": "red", "size": 3})
    assert producer.get_job(fits)["args"] == {"name": "x", "n": 2, "scale": 0.5}
    assert producer.get_job(anything)["args"] == {"name": "x", "colour": "red", "size": 3}


def test_every_missing_and_unexpected_argument_is_named(
    app: heartq.App, producer: heartq.App
) -> None:
    """Python's `bind` names the first thing wrong only: `{"x": 1, "z": 2}` for `x, y`
    said `y` was missing and never named the stray `z`. The one check (`bind`, and
    `refusal`, the worker's question) names all of both, however the job is enqueued."""

    @app.task
    def pair(x: int, y: int) -> None: ...

    app.store.declare_tasks(
        [TaskPolicy("pair", "default", 0, 3, 5.0, 60.0, parameters=describe(pair.signature))], "w"
    )
    both = "task 'pair': missing a required argument: 'y'; got an unexpected keyword argument 'z'"
    with pytest.raises(heartq.BadArguments) as by_task:
        pair.enqueue(x=1, z=2)  # type: ignore[call-arg]
    with pytest.raises(heartq.BadArguments) as by_name:  # checked against the declaration
        producer.enqueue("pair", {"x": 1, "z": 2})
    assert str(by_task.value) == str(by_name.value) == both
    assert str(refusal("pair", pair.signature, {"x": 1, "z": 2})) == both
    assert str(refusal("pair", pair.signature, {"a": 1, "b": 2})) == (
        "task 'pair': missing required arguments: 'x', 'y'; got unexpected keyword "
        "arguments 'a', 'b'"
    )
    with pytest.raises(heartq.BadArguments, match="multiple values for argument 'x'"):
        pair.enqueue(1, x=1)  # type: ignore[misc]  # not a name missing: Python's own words
    assert app.store.list_jobs() == []


def test_a_declaration_without_parameters_is_not_checked(
    app: heartq.App, producer: heartq.App
) -> None:
    """Declared by a worker of a version before parameters were declared: unknown, so
    the enqueue is stored as it was before (a job that cannot bind is dead at its first
    attempt instead: test_cannot_run.py)."""
    register_crunch(app)
    old = dataclasses.replace(app.tasks["crunch"].policy, parameters=None)
    app.store.declare_tasks([old], "old-worker")
    job_id = producer.enqueue("crunch", {"nmae": "y"})
    assert producer.get_job(job_id)["args"] == {"nmae": "y"}


def not_declared(heard: pytest.WarningsRecorder) -> list[warnings.WarningMessage]:
    """The task-not-declared warnings recorded: `pytest.warns` records every warning,
    and one from elsewhere may land in the block (a `ResourceWarning` from asyncio's
    base_events.py, for an event loop the garbage collector finalized there, was seen
    on a loaded machine)."""
    return [w for w in heard if issubclass(w.category, heartq.TaskNotDeclaredWarning)]


def test_the_caller_is_warned_of_a_task_not_declared(
    app: heartq.App, producer: heartq.App, run_worker: Callable[..., Any]
) -> None:
    with pytest.warns(heartq.TaskNotDeclaredWarning) as heard:
        job_id = producer.enqueue("report", {"day": 1})
    [warning] = not_declared(heard)
    assert warning.filename == __file__  # the caller's line, not heartq's
    assert str(warning.message).startswith(
        "task 'report' is not declared yet (no worker has started with it): queue 'default', "
        "max_retries 3, backoff 5.0s hold until a worker declares it"
    )
    assert isinstance(warning.message, heartq.TaskNotDeclaredWarning)
    assert warning.message.task == "report"
    assert producer.get_job(job_id)["status"] == "queued"  # stored all the same

    with pytest.warns(heartq.TaskNotDeclaredWarning, match="the 2 jobs take") as heard:
        producer.enqueue_many("report", [{"day": 1}, {"day": 2}])
    assert [w.filename for w in not_declared(heard)] == [__file__]

    async def from_a_coroutine() -> str:
        return await producer.enqueue_async("report", {"day": 3})

    with pytest.warns(heartq.TaskNotDeclaredWarning) as heard:
        asyncio.run(from_a_coroutine())
    assert [w.filename for w in not_declared(heard)] == [__file__]

    @app.task
    def report(day: int) -> None: ...

    with run_worker(app):
        pass  # declared now: nobody is warned any more
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        producer.enqueue("report", {"day": 4})


def test_strict_tasks_refuse_instead_of_warning(producer: heartq.App) -> None:
    strict = heartq.App(producer.url, strict_tasks=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(heartq.TaskNotDeclared):
                strict.enqueue("report")
    finally:
        strict.close()
    assert producer.store.list_jobs() == []
