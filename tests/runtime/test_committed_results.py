"""A task hands its result to its transaction's commit (`ctx.commit_result`): the result
lands with the effects and the job's completion, in one transaction; and a result lost
all the same says so, `ResultLost` from `app.result()` and a `heartq.LostResult` to a
callback, never a bare None (docs/design/pipelines.md, "Effects exactly once"). In-process pools
here, on both backends (a task's transaction on the queue's own database); a real worker
killed between the commit and the return: tests/integration/test_lost_results.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

import heartq
from tests.conftest import on_every_backend

from .test_transactional_completion import Effects, effects  # noqa: F401 (a fixture)

pytestmark = on_every_backend


def test_the_result_lands_with_the_commit_before_the_task_returns(
    app: heartq.App,
    effects: Effects,  # noqa: F811
    run_worker: Callable[..., Any],
) -> None:
    """`app.result()` returns the handed result while the task's code still runs after
    its block: nothing is saved after the commit, nothing can be lost there."""
    insert = effects.sql("INSERT INTO {table} VALUES ({p}, {p})")
    go_on = threading.Event()

    @app.task
    def pay(ctx: heartq.JobContext, order_id: int) -> dict[str, Any]:
        with ctx.transaction() as conn:
            conn.execute(insert, (order_id, ctx.execution_id))
            paid = ctx.commit_result({"paid": order_id})
        go_on.wait(30)  # the worker may die here: the result is in already
        return paid

    @app.task
    async def pay_async(ctx: heartq.JobContext, order_id: int) -> dict[str, Any]:
        async with ctx.transaction() as conn:
            conn.execute(insert, (order_id, ctx.execution_id))
            return ctx.commit_result({"paid": order_id, "async": True})

    try:
        with run_worker(app):
            job_id = pay.enqueue(order_id=1)
            assert app.result(job_id, timeout=15) == {"paid": 1}
            assert app.get_job(job_id)["status"] == "succeeded"
            assert not go_on.is_set()  # the task has not returned
            go_on.set()
            assert app.result(pay_async.enqueue(order_id=2), timeout=15) == {
                "paid": 2, "async": True
            }  # fmt: skip
    finally:
        go_on.set()
    assert effects.count(1) == 1 and effects.count(2) == 1
    assert app.get_job(job_id)["result_lost"] is None


def test_what_cannot_be_handed_is_refused_at_once(
    app: heartq.App,
    effects: Effects,  # noqa: F811
    run_worker: Callable[..., Any],
) -> None:
    """A value that cannot be stored is refused inside the block (it rolls back, the
    task's writes with it); outside the block there is no commit to hand it to."""
    insert = effects.sql("INSERT INTO {table} VALUES ({p}, {p})")
    refused: list[str] = []

    @app.task(max_retries=0)
    def hands_a_set(ctx: heartq.JobContext) -> None:
        with ctx.transaction() as conn:
            conn.execute(insert, (1, ctx.execution_id))
            ctx.commit_result({1, 2})

    @app.task
    def hands_outside(ctx: heartq.JobContext) -> int:
        try:
            ctx.commit_result(1)
        except RuntimeError as exc:
            refused.append(str(exc))
        with ctx.transaction() as conn:
            conn.execute(insert, (2, ctx.execution_id))
            return ctx.commit_result(2)

    with run_worker(app):
        with pytest.raises(heartq.JobDead, match="PayloadError"):
            app.result(hands_a_set.enqueue(), timeout=15)
        assert app.result(hands_outside.enqueue(), timeout=15) == 2
    assert effects.count(1) == 0 and effects.count(2) == 1
    assert refused and "inside the block" in refused[0]


def test_code_that_fails_after_the_commit_keeps_the_handed_result(
    app: heartq.App,
    effects: Effects,  # noqa: F811
    run_worker: Callable[..., Any],
) -> None:
    insert = effects.sql("INSERT INTO {table} VALUES ({p}, {p})")

    @app.task(max_retries=3)
    def fails_after(ctx: heartq.JobContext, hand: bool) -> None:
        with ctx.transaction() as conn:
            conn.execute(insert, (int(hand), ctx.execution_id))
            if hand:
                ctx.commit_result("handed")
        raise RuntimeError("after the commit")

    with run_worker(app):
        kept = fails_after.enqueue(hand=True)
        lost = fails_after.enqueue(hand=False)
        assert app.result(kept, timeout=15) == "handed"
        with pytest.raises(heartq.ResultLost, match="RuntimeError: after the commit") as error:
            app.result(lost, timeout=15)
    assert error.value.job_id == lost
    assert effects.count(1) == 1 and effects.count(0) == 1  # once each: never retried
    for job_id in (kept, lost):
        assert [e["outcome"] for e in app.get_job(job_id)["executions"]] == ["succeeded"]


def test_a_callback_tells_a_lost_result_from_a_value(
    app: heartq.App,
    effects: Effects,  # noqa: F811
    run_worker: Callable[..., Any],
) -> None:
    """A group's members: one returns None on purpose, one hands its result to the
    commit, one loses its result (its code fails after the commit). The callback gets
    None, the value and a `LostResult` (a dict, JSON: it can pass it on), in order; the
    step after it reads the marker back from JSON and still tells it."""
    insert = effects.sql("INSERT INTO {table} VALUES ({p}, {p})")

    @app.task
    def member(ctx: heartq.JobContext, how: str) -> Any:
        with ctx.transaction() as conn:
            conn.execute(insert, (len(how), ctx.execution_id))
            if how == "hands":
                return ctx.commit_result({"handed": True})
        if how == "loses":
            raise RuntimeError("lost after the commit")
        return None

    @app.task
    def callback(results: list[Any]) -> list[Any]:
        kinds = [type(r).__name__ for r in results]
        return [kinds, [heartq.is_lost_result(r) for r in results], results]

    @app.task
    def after(previous: list[Any]) -> list[bool]:
        return [heartq.is_lost_result(r) for r in previous[2]]

    members = [member.s("none"), member.s("hands"), member.s("loses")]
    pipeline = heartq.chain(
        heartq.group(*members, callback=callback.s()), after.s().takes_result()
    ).enqueue()
    ids = pipeline.ids
    with run_worker(app):
        kinds, told, results = app.result(ids[3], timeout=30)
        assert app.result(pipeline.last, timeout=30) == [False, False, True]
    assert kinds == ["NoneType", "dict", "LostResult"] and told == [False, False, True]
    lost = results[2]
    assert set(lost) == {"$heartq", "job_id", "reason"} and lost["$heartq"] == "lost_result"
    assert lost["job_id"] == ids[2] and "RuntimeError: lost after the commit" in lost["reason"]
    assert results[:2] == [None, {"handed": True}]


def test_the_marker_is_json_and_told_by_its_shape() -> None:
    marker = heartq.LostResult("job-1", "its worker stopped")
    assert isinstance(marker, dict) and marker.job_id == "job-1"
    assert marker.reason == "its worker stopped"
    again = json.loads(json.dumps([marker]))[0]
    assert type(again) is dict and heartq.is_lost_result(again)
    assert again == {"$heartq": "lost_result", "job_id": "job-1", "reason": "its worker stopped"}
    for value in (None, {}, {"$heartq": "lost_result"}, {**again, "more": 1}, "lost_result"):
        assert not heartq.is_lost_result(value)
    import pickle

    assert pickle.loads(pickle.dumps(marker)) == marker
    assert type(pickle.loads(pickle.dumps(marker))) is heartq.LostResult
