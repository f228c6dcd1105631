"""Pipelines that pass results (`Signature.takes_result`), groups that may be empty, and
`depends_on` a succeeded job since pruned, through the client API and a real worker
(`heartq.testing.drain`), on both backends (docs/design/pipelines.md, "Jobs that wait for jobs")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import heartq
from heartq.maintenance.pruner import Pruner
from heartq.testing import drain
from tests.conftest import on_every_backend

pytestmark = on_every_backend  # the store's edges and its trace differ by dialect

DAY = 86400.0


def _tasks(app: heartq.App) -> dict[str, Any]:
    @app.task(max_retries=0)
    def add(x: int, y: int = 0) -> int:
        return x + y

    @app.task
    def total(results: list[Any], label: str = "sum") -> str:
        return f"{label}={sum(r or 0 for r in results)} of {results}"

    @app.task
    async def echo(value: Any, tag: str = "") -> Any:
        return [tag, value] if tag else value

    @app.task
    def keyword_only(*, label: str) -> str:
        return label

    return {"add": add, "total": total, "echo": echo, "odd": keyword_only}


def _order(app: heartq.App, first: str, then: str) -> None:
    """`then` started after `first` ended."""
    assert app.get_job(first)["finished_at"] <= app.get_job(then)["started_at"]


def test_a_chain_passes_each_result_to_the_step_that_takes_it(app: heartq.App) -> None:
    """Celery's `add.s(4, 4) | add.s(8) | add.s(16) == 32`, with the taking said."""
    add = _tasks(app)["add"]
    pipeline = heartq.chain(
        add.s(4, 4), add.s(8).takes_result(), add.s(16).takes_result()
    ).enqueue()
    first, second, third = pipeline.ids
    stored = app.get_job(second)
    assert stored["args"] == {"y": 8} and stored["dependency_results"]  # 8 comes at run time
    assert [d["id"] for d in stored["depends_on"]] == [first]
    drain(app)
    assert app.result(pipeline.last, timeout=5) == 32
    assert [app.result(i, timeout=5) for i in pipeline.ids] == [8, 16, 32]
    _order(app, first, second)
    _order(app, second, third)


def test_a_step_that_does_not_take_the_result_is_given_none(app: heartq.App) -> None:
    """A plain `s()` keeps meaning what it was given (Celery's `si()`)."""
    add = _tasks(app)["add"]
    pipeline = heartq.chain(add.s(4, 4), add.s(8)).enqueue()
    assert not app.get_job(pipeline.last)["dependency_results"]
    drain(app)
    assert app.result(pipeline.last, timeout=5) == 8


def test_a_group_after_a_step_gives_each_member_the_result(app: heartq.App) -> None:
    t = _tasks(app)
    members = heartq.group(
        t["add"].s(10).takes_result(), t["add"].s(5), t["echo"].s(tag="m").takes_result()
    )
    pipeline = heartq.chain(t["add"].s(1, 2), members, t["echo"].s().takes_result()).enqueue()
    first, a, b, c, last = pipeline.ids
    drain(app)
    assert [app.result(i, timeout=5) for i in (a, b, c)] == [13, 5, ["m", 3]]
    # a step after a group without a callback takes the list of the members' results
    assert app.result(last, timeout=5) == [13, 5, ["m", 3]]
    for member in (a, b, c):
        _order(app, first, member)
        _order(app, member, last)


def test_callbacks_pass_results_on_and_take_a_step_s_result(app: heartq.App) -> None:
    t = _tasks(app)
    chord = heartq.group(
        t["add"].s(1).takes_result(), t["add"].s(2).takes_result(), callback=t["total"].s()
    )
    pipeline = heartq.chain(
        t["add"].s(10, 0), chord, t["echo"].s(tag="after").takes_result()
    ).enqueue()
    *_, callback, last = pipeline.ids
    drain(app)
    assert app.result(callback, timeout=5) == "sum=23 of [11, 12]"
    assert app.result(last, timeout=5) == ["after", "sum=23 of [11, 12]"]
    _order(app, callback, last)


def test_a_callback_s_own_dependencies_are_waited_for_not_passed(app: heartq.App) -> None:
    t = _tasks(app)
    other = t["add"].enqueue(100)
    pipeline = heartq.group(
        t["add"].s(1), t["add"].s(2), callback=t["total"].s().set(depends_on=[other])
    ).enqueue()
    assert [d["id"] for d in app.get_job(pipeline.last)["depends_on"]] == [
        *pipeline.ids[:2],
        other,
    ]
    drain(app)
    assert app.result(pipeline.last, timeout=5) == "sum=3 of [1, 2]"
    _order(app, other, pipeline.last)


def test_taking_a_result_is_checked_at_enqueue(app: heartq.App) -> None:
    t = _tasks(app)
    before = len(app.store.list_jobs())
    with pytest.raises(heartq.BadArguments) as refused:
        heartq.chain(t["add"].s(1), t["odd"].s(label="x").takes_result()).enqueue()
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith("task 'keyword_only' cannot take the previous step's result: ")
    with pytest.raises(heartq.BadArguments, match="unexpected keyword argument 'z'"):
        heartq.chain(t["add"].s(1), t["add"].s(z=1).takes_result()).enqueue()
    with pytest.raises(heartq.BadArguments, match="multiple values for argument 'x'"):
        heartq.chain(t["add"].s(1), t["add"].s(x=1).takes_result()).enqueue()
    with pytest.raises(heartq.ConfigError, match="has no previous step"):
        heartq.chain(t["add"].s(1).takes_result(), t["add"].s(2)).enqueue()
    with pytest.raises(heartq.ConfigError, match="has no previous step"):
        heartq.group(t["add"].s(1).takes_result()).enqueue()
    with pytest.raises(heartq.ConfigError, match="has no previous step"):
        t["add"].s(1).takes_result().enqueue()
    assert len(app.store.list_jobs()) == before
    taken = t["add"].s(1).takes_result().set(priority=3)  # set() keeps it
    assert taken.result_taken and "takes_result" in repr(taken)


def test_an_empty_group_s_callback_runs_with_no_results(app: heartq.App) -> None:
    t = _tasks(app)
    alone = heartq.group(callback=t["total"].s(label="none")).enqueue()
    assert len(alone.ids) == 1 and app.get_job(alone.last)["status"] == "queued"
    after = heartq.chain(t["add"].s(1, 2), heartq.group(callback=t["total"].s())).enqueue()
    first, callback = after.ids
    assert [d["id"] for d in app.get_job(callback)["depends_on"]] == [first]
    drain(app)
    assert app.result(alone.last, timeout=5) == "none=0 of []"
    assert app.result(callback, timeout=5) == "sum=0 of []"  # it waited, took nothing
    _order(app, first, callback)


def test_an_empty_group_without_a_callback_is_done_at_once(app: heartq.App) -> None:
    t = _tasks(app)
    nothing = heartq.group().enqueue()  # no app to find, nothing to store
    assert nothing == heartq.Pipeline(ids=(), tail=())
    with pytest.raises(IndexError) as no_last:  # it says why, not "tuple index out of range"
        _ = nothing.last
    assert str(no_last.value) == (
        "this pipeline stored no job (an empty group without a callback is done at once): it "
        "has no last job to wait for; its result, for a step after it, is []"
    )
    assert heartq.chain(heartq.group(), heartq.group()).enqueue().ids == ()
    then = t["add"].options(depends_on=nothing).enqueue(7)
    assert app.get_job(then)["status"] == "queued"
    # as a chain's step: the next step waits for the step before it, and takes []
    pipeline = heartq.chain(
        t["add"].s(1, 2), heartq.group(), t["echo"].s().takes_result(), t["add"].s(5)
    ).enqueue()
    first, empty_taken, last = pipeline.ids
    assert [d["id"] for d in app.get_job(empty_taken)["depends_on"]] == [first]
    ends_with_empty = heartq.chain(t["add"].s(4), heartq.group()).enqueue()
    assert ends_with_empty.tail == ends_with_empty.ids  # what follows waits for add(4)
    # an empty member of a group adds nothing to the group's results
    nested = heartq.chain(
        t["add"].s(1),
        heartq.group(t["add"].s(2).takes_result(), heartq.group()),
        t["echo"].s().takes_result(),
    ).enqueue()
    drain(app)
    assert app.result(then, timeout=5) == 7
    assert app.result(empty_taken, timeout=5) == []
    assert app.result(last, timeout=5) == 5
    _order(app, first, empty_taken)
    assert app.result(nested.last, timeout=5) == [3]


def test_depends_on_a_pruned_success_is_met_a_missing_id_is_not(app: heartq.App) -> None:
    """RQ counts a deleted finished dependency as met; heartq keeps a trace of pruned
    successes, so only an id that never named a succeeded job is refused."""
    t = _tasks(app)
    old, doomed = t["add"].enqueue(1), t["add"].enqueue(2)
    app.cancel(doomed)
    drain(app)
    later = app.store.clock() + 8 * DAY
    assert app.store.prune(7 * DAY, 7 * DAY, now=later).jobs == 2
    with pytest.raises(heartq.JobNotFound):
        app.get_job(old)
    then = app.enqueue("add", {"x": 3}, depends_on=[old])
    stored = app.get_job(then)
    assert stored["status"] == "queued"  # met at once
    assert stored["depends_on"] == [
        {"id": old, "task": None, "status": None, "ended": "succeeded", "holds": False}
    ]
    callback = heartq.group(t["add"].s(5), callback=t["total"].s().set(depends_on=old)).enqueue()
    with pytest.raises(heartq.DependencyNotFound) as never:
        app.enqueue("add", {"x": 4}, depends_on=[old, "no-such-job"])
    assert never.value.job_ids == ["no-such-job"]
    with pytest.raises(heartq.DependencyNotFound):  # pruned, but it was cancelled
        app.enqueue("add", {"x": 4}, depends_on=[doomed])
    drain(app)
    assert app.result(then, timeout=5) == 3
    assert app.result(callback.last, timeout=5) == "sum=5 of [5]"


def test_the_pruner_keeps_the_trace_for_the_app_s_success_trace_retention(
    app: heartq.App,
) -> None:
    """The setting reaches the prune a worker's maintenance runs: 0 keeps no trace."""
    t = _tasks(app)
    kept = t["add"].enqueue(1)
    drain(app)
    Pruner(app.store, replace(app.settings, job_retention=0.001), app.events).run_once()
    assert app.get_job(app.enqueue("add", {"x": 1}, depends_on=[kept]))["status"] == "queued"
    dropped = t["add"].enqueue(2)
    drain(app)
    settings = replace(app.settings, job_retention=0.001, success_trace_retention=0)
    Pruner(app.store, settings, app.events).run_once()
    with pytest.raises(heartq.DependencyNotFound):
        app.enqueue("add", {"x": 2}, depends_on=[dropped])
