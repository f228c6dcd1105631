"""heartq.testing: your tasks tested through heartq's real code path (docs/TESTING.md).

- `drain(app)`: every due job run by a real worker in this process; returns a
  `DrainReport` of what ran and how each attempt ended (`run_retries_now=True`: retries
  due at once, so each job runs until it succeeds or is dead).
- `run(task, *args, **kwargs)`: one attempt of one job, with a real `JobContext`; its
  result, or what its code raised. `run_attempt(n, task, ...)`: that attempt as its nth
  (a task's last-attempt branch).
- `enqueued(app)`, `assert_enqueued`, `assert_not_enqueued`, `expect_enqueued`: what is
  in the queue, read from its database, with failures that list it.
- `use_fresh_queue(app)`, `fresh_queue_url()`: an app on an empty queue (a temporary
  SQLite file, or a new PostgreSQL schema) for a test's length.
- the pytest plugin (`heartq.testing.plugin`, loaded by pytest through the package's
  entry point): fixtures `heartq_app`, `heartq_app_for`, `heartq_url`, option
  `--heartq-url`.

`import heartq` does not import it: a program that does not test pays nothing for it.
"""

from heartq.testing.assertions import (
    assert_enqueued,
    assert_not_enqueued,
    enqueued,
    expect_enqueued,
)
from heartq.testing.drain import AttemptFailed, DrainTimeout, drain, run, run_attempt
from heartq.testing.queues import fresh_queue_url, use_fresh_queue
from heartq.testing.records import Attempt, DrainReport, EnqueuedJob, JobRun

__all__ = [
    "Attempt",
    "AttemptFailed",
    "DrainReport",
    "DrainTimeout",
    "EnqueuedJob",
    "JobRun",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "enqueued",
    "expect_enqueued",
    "fresh_queue_url",
    "run",
    "run_attempt",
    "use_fresh_queue",
]
