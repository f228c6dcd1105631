"""A pool stops the code of an attempt whose end was decided before the code started.

The supervisor may end an attempt (a timeout, a forced cancel, a lost lease) while its
pool is still starting the code: a child process being forked, or a coroutine the event
loop has not stepped yet. The pool's stop finds nothing then; the code must still be
stopped once it starts. Found by tests/runtime/test_timeouts.py: a process-pool child
started after its 0.5 s deadline was never told nor killed, and ran its task out.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import heartq
from heartq.event_stream import EventStream
from heartq.lifecycle.fate import AttemptEnd
from heartq.model import ClaimedJob, Outcome
from heartq.worker.attempt import RunningJob
from heartq.worker.ledger import Ledger
from heartq.worker.pools import AsyncPool
from heartq.worker.process_pool import ProcessPool

HANGS = '''
"""Tasks that overrun their timeout and never look at their ctx."""

import asyncio
import threading

import heartq

app = heartq.App()


@app.task(timeout=0.5)
def hangs():
    threading.Event().wait(60)


@app.task(timeout=0.5)
async def hangs_async():
    await asyncio.Event().wait()
'''


@pytest.mark.parametrize("pool", ["process", "async"])
def test_code_whose_end_came_before_it_started_is_stopped(
    pool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor may end an attempt while its pool is still starting the code: a
    child process being forked (slow on a loaded machine; a claim's batch starts its
    children one after another), or a coroutine the event loop has not stepped yet. The
    pool's stop then finds nothing to stop; the code must still be stopped once it
    starts, not run on (for ever, here) after its outcome was decided: a child left
    running could still complete its job in `ctx.transaction()` before the timeout is
    saved. (Without it, a process-pool child told nothing ran its 10 s task out.)"""
    name = f"hang_tasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(HANGS)
    monkeypatch.syspath_prepend(str(tmp_path))
    tasks = __import__(name)
    ledger = Ledger("test-worker", concurrency=1, events=EventStream())
    limit = 1 << 20
    if pool == "process":
        task = tasks.app.tasks["hangs"]
        ledger.pool = ProcessPool(ledger, f"{name}:app", limit, f"sqlite:///{tmp_path}/q.db")
    else:
        task = tasks.app.tasks["hangs_async"]
        ledger.pool = AsyncPool(ledger, limit)
    job = ClaimedJob(
        id="job-1",
        task=task.name,
        queue="default",
        args={},
        attempt=1,
        execution_id=1,
        max_retries=0,
        retry_backoff=0.0,
        retry_backoff_max=0.0,
        checkpoint=None,
        lease_expires_at=0.0,
    )
    run = RunningJob(
        job,
        task,
        None,  # type: ignore[arg-type]  # the store: these tasks never write
        claim_sent_at=time.monotonic(),
        trust_window=60.0,
        max_payload_bytes=limit,
    )
    reported: list[Outcome] = []  # the forced end, then the code's own
    code_ended = threading.Event()
    real_ended, real_force = ledger.attempt_ended, ledger.force

    def force(forced: RunningJob, end: AttemptEnd) -> None:
        reported.append(end.outcome)
        real_force(forced, end)

    def attempt_ended(ended: RunningJob, end: AttemptEnd) -> None:  # its pool: the code ended
        reported.append(end.outcome)
        real_ended(ended, end)
        code_ended.set()

    ledger.attempt_ended = attempt_ended  # type: ignore[method-assign]
    ledger.force = force  # type: ignore[method-assign]
    ledger.claimed(run)
    ledger.force(run, AttemptEnd(Outcome.TIMED_OUT, error="timed out after 0.5 s"))
    ledger.pool.start([run])
    try:
        assert code_ended.wait(20), f"the code of an attempt ended {reported} still runs"
    finally:
        ledger.pool.close()
    assert reported[0] is Outcome.TIMED_OUT
    assert run.ended is not None and run.ended.outcome is Outcome.TIMED_OUT


def test_a_process_pool_hands_its_children_the_url_with_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child opens the store for its task's `ctx.transaction()` with the URL its pool
    got: the one given, password and all (`Link.given_url`), never the redacted one that
    logs print (`Link.url`), with which a server that checks passwords refuses it."""
    seen: list[str] = []

    class Recording:
        def __init__(self, ledger: Any, app_ref: str, limit: int, url: str, **_: Any) -> None:
            seen.append(url)

    monkeypatch.setattr("heartq.worker.process_pool.ProcessPool", Recording)
    url = "postgresql://app:s3cret@127.0.0.1:5432/q?schema=jobs"  # nothing is opened
    app = heartq.App(url)
    worker = heartq.Worker(app, pool="process", app_ref="tasks:app")
    worker._make_pool()
    assert seen == [url] and "s3cret" not in app.store.link.url
