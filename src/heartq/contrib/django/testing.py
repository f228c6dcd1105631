"""`heartq.testing` in a Django project's tests: a heartq backend on a fresh queue per
test, from Django's `TestCase` and `TransactionTestCase` and from pytest-django.

    from heartq import testing
    from heartq.contrib.django.testing import fresh_queue, heartq_task

    class SignupTests(TestCase):
        def setUp(self):
            self.queue = self.enterContext(fresh_queue())      # the backend `default`

        def test_signup_sends_the_welcome_email(self):
            self.client.post("/signup/", {"email": "ada@example.org"})
            testing.assert_enqueued(heartq_task(tasks.email_users), app=self.queue)

    def test_with_pytest_django(heartq_django_app): ...      # the plugin's fixture

A test's queue is never Django's test database (SQLite's is in memory, which workers
cannot share, and a `TestCase`'s transaction never commits): it is a queue of its own, a
SQLite file or a schema on the PostgreSQL server `HEARTQ_TEST_URL` names
(`heartq.testing.fresh_queue_url`), and enqueues go there at once, not at a commit.
`testing.drain(queue)` runs its jobs in threads of the test's process, each with its own
database connection: what a `TestCase` wrote in its transaction is not visible to them,
so a test whose tasks read the test's rows is a `TransactionTestCase` (pytest-django:
`transactional_db`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heartq.app import App, Task
from heartq.testing.queues import ENV_TEST_URL, fresh_queue_url

if TYPE_CHECKING:
    from heartq.contrib.django.backend import HeartqBackend


@contextlib.contextmanager
def fresh_queue(
    backend: str = "default", server: str | None = None, directory: Path | None = None
) -> Iterator[App]:
    """The heartq backend `backend` on a new, empty queue for the block (on `server`,
    else `HEARTQ_TEST_URL`'s, else a SQLite file, in `directory` if given), every
    enqueue written there at once; its app, for `heartq.testing`'s functions. The
    backend's own queue is back afterwards, and the fresh one removed."""
    queue = _backend(backend).queue
    where = server if server is not None else os.environ.get(ENV_TEST_URL)
    with fresh_queue_url(where, directory) as url:
        previous = queue.override_url, queue.at_once
        queue.override_url, queue.at_once = url, True
        try:
            yield queue.ready_app()
        finally:
            queue.override_url, queue.at_once = previous
            queue.app.close()


def heartq_task(task: Any) -> Task[Any, Any]:
    """The heartq task a Django task runs as (named after its function's path), for
    `heartq.testing`: `testing.run(heartq_task(tasks.email_users), ...)`,
    `testing.assert_enqueued(heartq_task(tasks.email_users), ...)`."""
    queue = _backend(task.backend).queue
    queue.ready_app()  # its URL as it is now (a test's fresh queue), or why it cannot be
    return queue.register(task)


def _backend(alias: str) -> HeartqBackend:
    from heartq.contrib.django.backend import HeartqBackend
    from heartq.contrib.django.compat import task_backends

    backend = task_backends[alias]
    if not isinstance(backend, HeartqBackend):
        raise TypeError(f"TASKS[{alias!r}] is not a heartq backend")
    return backend
