"""A job that waits (a retry's backoff, a delay) starts when it falls due, not at the next
poll, through a real worker process (`heartq/worker/wakeups.py`).

The worker polls every 20 s here: a wake-up missed shows as a start up to 20 s late,
never as a few milliseconds a loaded machine adds; so each start is held to within
`ON_TIME` of its due time (the database's `run_at`), a bound wide enough for a busy
2-core machine and twenty times narrower than the poll. (At the default 1 s poll the
same jobs started up to a poll late: a 0.5 s delay after 1.0 s, `delay=3` after 3.9-4.0 s.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import on_every_backend

from .conftest import STEADY, Harness, only_on, parse_ts
from .worker_tasks import TASKS_SOURCE

pytestmark = pytest.mark.slow

POLL = "20"
"""The workers' poll interval, seconds: far past every due time here."""
ON_TIME = 1.0
"""At most this late after its due time a job starts (the poll is 20 times longer)."""
DELAY = 0.5

DUE_TASKS = '''

@app.task
def fail_once(ctx):
    """Fails its first attempt: its retry waits out the backoff the job was given."""
    started(ctx)
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return ident(ctx)


@app.task
def enqueue_later(ctx, delay):
    """Enqueues `quick` with a delay, from the worker's own process."""
    return quick.options(delay=delay).enqueue()
'''


def _worker(harness: Harness) -> None:
    """A worker polling every 20 s. Its first claim finds what the test enqueued before
    (on SQLite nothing else would tell it of the test's enqueues)."""
    harness.path("tasks.py").write_text(TASKS_SOURCE + DUE_TASKS)
    harness.start_worker(settings={**STEADY, "--poll-interval": POLL})


def _late(job: dict[str, Any]) -> float:
    """How long after its due time (`run_at`: a delay's end, a retry's backoff's) the
    job's last attempt started."""
    return parse_ts(job["executions"][-1]["started_at"]) - parse_ts(job["run_at"])


@on_every_backend
def test_a_retry_starts_when_its_backoff_ends(harness: Harness) -> None:
    """The worker saved the retry's wait itself (its completer): it wakes for it."""
    job_id = harness.enqueue("fail_once", max_retries=1, retry_backoff=DELAY)
    _worker(harness)
    done = harness.wait_status(job_id, "succeeded", 10)
    first, second = done["executions"]
    assert first["outcome"] == "failed"
    waited = parse_ts(done["run_at"]) - parse_ts(first["ended_at"])
    assert 0.25 <= waited <= 0.75, waited  # the backoff, jitter and all
    assert -0.05 <= _late(done) <= ON_TIME, (done["run_at"], second["started_at"])


@on_every_backend
def test_a_job_a_task_enqueues_with_a_delay_starts_when_due(harness: Harness) -> None:
    """Enqueued in the worker's own process: the app's producer tells the worker when
    it falls due."""
    parent = harness.enqueue("enqueue_later", {"delay": DELAY})
    _worker(harness)
    child = harness.wait_status(parent, "succeeded", 10)["result"]
    done = harness.wait_status(child, "succeeded", 10)
    assert parse_ts(done["run_at"]) - parse_ts(done["created_at"]) == pytest.approx(DELAY, abs=0.01)
    assert -0.05 <= _late(done) <= ON_TIME, (done["run_at"], done["executions"])


@only_on("postgres")
def test_a_job_another_process_enqueues_with_a_delay_starts_when_due(harness: Harness) -> None:
    """Enqueued by another process (the test's): its NOTIFY on the schema's due channel
    says when it falls due. (On SQLite nothing tells a worker of another process's
    commit: such a job, delayed or not, is found at the next poll.)"""
    _worker(harness)
    # Claimed in its first round or woken by a NOTIFY: either way it listens by now.
    harness.wait_status(harness.enqueue("quick"), "succeeded", 10)
    for delay in (DELAY, 3.0):
        job_id = harness.enqueue("quick", delay=delay)
        done = harness.wait_status(job_id, "succeeded", delay + 10)
        assert -0.05 <= _late(done) <= ON_TIME, (delay, done["run_at"], done["executions"])
