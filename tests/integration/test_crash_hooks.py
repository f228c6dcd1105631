"""Crash hooks through real worker processes killed with real signals: an attempt whose
worker was SIGKILLed is told once, by the worker that found it; an attempt whose process
pool child died is told by the child's parent. The hook records into a file of the test's
directory, with the pid of the process that ran it. The store's side (which attempts
are crashes) is tests/conformance/test_crash_hooks.py."""

from __future__ import annotations

import json
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from heartq.model import NewJob
from tests.conftest import on_every_backend

from .conftest import RECONCILIATION_ONLY, STEADY, Harness

pytestmark = pytest.mark.slow

CRASH_HOOK = '''

@app.hooks.crash
def record_crash(info):
    """Each crash this process was told of, one JSON line."""
    line = {
        "pid": os.getpid(),
        "job_id": info.job_id,
        "task": info.task,
        "queue": info.queue,
        "attempt": info.attempt,
        "execution_id": info.execution_id,
        "worker_id": info.worker_id,
        "args": dict(info.args),
        "meta": dict(info.meta),
        "started_at": None if info.started_at is None else info.started_at.isoformat(),
        "detected_by": info.detected_by,
        "reason": info.reason,
        "signal": info.crash.get("signal"),
        "status": str(info.status),
        "will_retry": info.will_retry,
        "dead_reason": info.dead_reason,
    }
    with open(HERE / "crashes.jsonl", "a") as out:
        out.write(json.dumps(line) + "\\n")
'''


def _with_crash_hook(harness: Harness) -> Path:
    with open(harness.dir / "tasks.py", "a") as tasks:
        tasks.write(CRASH_HOOK)
    return harness.dir / "crashes.jsonl"


def _told(record: Path) -> list[dict[str, Any]]:
    """The calls recorded so far: whole lines only (a hook may be writing one now)."""
    if not record.exists():
        return []
    text = record.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def _enqueue(harness: Harness, task: str, args: dict[str, Any], **options: Any) -> str:
    job = NewJob(task=task, args_json=json.dumps(args), retry_backoff=0.0, **options)
    return harness.store.enqueue([job])[0]


def test_a_killed_workers_attempt_is_told_once_by_the_worker_that_found_it(
    harness: Harness,
) -> None:
    record = _with_crash_hook(harness)
    doomed = harness.start_worker(settings=STEADY)
    job_id = _enqueue(harness, "hold_first", {"seconds": 60}, meta_json='{"tenant": "acme"}')
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 20, "attempt 1 to start")
    finder = harness.start_worker(settings=STEADY)

    doomed.kill()
    harness.wait_status(job_id, "succeeded", 30)  # attempt 2, on the finder
    harness.wait_for(lambda: _told(record), 10, "the crash hook to run")
    finder.signal(signal.SIGTERM)
    assert finder.wait_exit(20) == 0

    (told,) = _told(record)  # once, and only where the crash was found
    assert told["pid"] == finder.pid
    assert (told["job_id"], told["task"], told["queue"]) == (job_id, "hold_first", "default")
    assert (told["attempt"], told["execution_id"]) == (1, 1)
    assert told["worker_id"] == doomed.id
    assert told["args"] == {"seconds": 60}
    assert told["meta"] == {"tenant": "acme"}
    crashed = harness.job(job_id)["executions"][0]
    assert crashed["outcome"] == "crashed"
    assert told["detected_by"] == crashed["crash"]["detected_by"]
    assert told["detected_by"] in {"liveness_lock", "stale_worker", "lease_expired"}
    assert told["reason"] == crashed["crash"]["reason"]
    started = datetime.fromisoformat(told["started_at"]).timestamp()
    assert abs(started - datetime.fromisoformat(crashed["started_at"]).timestamp()) < 0.01
    assert (told["status"], told["will_retry"], told["dead_reason"]) == ("queued", True, None)


def test_a_dead_childs_attempt_is_told_by_its_parent(harness: Harness) -> None:
    record = _with_crash_hook(harness)
    worker = harness.start_worker("--pool", "process", "--concurrency", "2", settings=STEADY)
    retried = _enqueue(harness, "crash_child_first", {"how": "kill"}, max_retries=3)
    buried = _enqueue(harness, "crash_child_first", {"how": "kill"}, max_retries=0)

    harness.wait_status(retried, "succeeded", 30)
    harness.wait_status(buried, "dead", 30)
    harness.wait_for(lambda: len(_told(record)) >= 2, 10, "the crash hooks to run")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(20) == 0

    told = {line["job_id"]: line for line in _told(record)}
    assert len(_told(record)) == 2 and set(told) == {retried, buried}
    for line in told.values():
        assert line["pid"] == worker.pid  # the parent: the child is gone
        assert line["worker_id"] == worker.id
        assert (line["detected_by"], line["signal"]) == ("child_exit", "SIGKILL")
        assert line["attempt"] == 1
    assert (told[retried]["status"], told[retried]["will_retry"]) == ("queued", True)
    assert (told[buried]["status"], told[buried]["will_retry"]) == ("dead", False)
    assert told[buried]["dead_reason"] == harness.job(buried)["dead_reason"]


@on_every_backend  # at startup on SQLite, after the grace on PostgreSQL
def test_a_restarted_worker_tells_what_its_dead_incarnation_held(harness: Harness) -> None:
    """Reconciliation: at startup on SQLite (a free lock file is a gone process), from
    the pending reconciliation once the grace passed on PostgreSQL; either way in the
    new incarnation, once."""
    record = _with_crash_hook(harness)
    first = harness.start_worker("--name", "pod-1", settings=RECONCILIATION_ONLY)
    job_id = _enqueue(harness, "hold_first", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 20, "attempt 1 to start")
    first.kill()

    second = harness.start_worker("--name", "pod-1", settings=RECONCILIATION_ONLY)
    harness.wait_status(job_id, "succeeded", 20)
    harness.wait_for(lambda: _told(record), 10, "the crash hook to run")
    second.signal(signal.SIGTERM)
    assert second.wait_exit(20) == 0

    (told,) = _told(record)
    assert (told["pid"], told["job_id"], told["worker_id"]) == (second.pid, job_id, first.id)
    assert (told["detected_by"], told["status"]) == ("reconciliation", "queued")
