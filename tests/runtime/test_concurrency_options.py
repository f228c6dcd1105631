"""`concurrency_key=`/`concurrency_limit=` on the enqueue paths of the Python API, and a
task's declared template filled from each job's arguments (docs/INTERFACE.md)."""

from __future__ import annotations

import asyncio

import pytest

import heartq
from heartq.errors import ConfigError

# PostgreSQL takes a key's claim lock by the key's name alone (an advisory lock, which
# every schema of a database shares): tests in parallel processes that use the same key
# names ("k") in their own schemas would make each other's claims skip the key. One test
# process runs these files.
pytestmark = pytest.mark.one_at_a_time("key-locks")


def _limits(app: heartq.App, job_id: str) -> tuple[str | None, int | None]:
    job = app.store.get_job(job_id)
    return job["concurrency_key"], job["concurrency_limit"]


def test_every_python_path_stores_the_key_and_limit(app: heartq.App) -> None:
    @app.task(concurrency_key="tenant:{tenant}", concurrency_limit=2)
    def sync(tenant: str, n: int = 0) -> None:
        """Talks to one tenant's API, which takes two calls at a time."""

    @app.task
    def plain(n: int = 0) -> None:
        """No key."""

    assert _limits(app, sync.enqueue("acme")) == ("tenant:acme", 2)
    assert _limits(app, app.enqueue("sync", {"tenant": "x"})) == ("tenant:x", 2)
    ids = sync.enqueue_many([{"tenant": "a"}, {"tenant": "b"}])
    assert [_limits(app, i) for i in ids] == [("tenant:a", 2), ("tenant:b", 2)]
    # the enqueue's own key wins over the task's template
    chosen = sync.options(concurrency_key="shared", concurrency_limit=1).enqueue("acme")
    assert _limits(app, chosen) == ("shared", 1)
    assert _limits(app, plain.enqueue()) == (None, None)
    by_name = app.enqueue("elsewhere", {}, concurrency_key="k", concurrency_limit=3)
    assert _limits(app, by_name) == ("k", 3)
    with_key = plain.enqueue_with({"n": 1}, concurrency_key="k", concurrency_limit=1)
    assert _limits(app, with_key) == ("k", 1)
    found = asyncio.run(app.enqueue_async("plain", {}, concurrency_key="k", concurrency_limit=4))
    assert _limits(app, found) == ("k", 4)
    bound = plain.options(concurrency_key="k", concurrency_limit=5)
    assert _limits(app, asyncio.run(bound.enqueue_async(n=2))) == ("k", 5)
    many = asyncio.run(
        app.enqueue_many_async("plain", [{}], concurrency_key="k", concurrency_limit=6)
    )
    assert _limits(app, many[0]) == ("k", 6)
    # with a unique key too: the unique insert writes them
    unique = app.enqueue("plain", {}, unique_key="u", concurrency_key="k", concurrency_limit=7)
    assert _limits(app, unique) == ("k", 7)


def test_bad_options_are_refused_before_anything_is_stored(app: heartq.App) -> None:
    @app.task(concurrency_key="tenant:{tenant}", concurrency_limit=2)
    def sync(tenant: str = "") -> None:
        """A template over an argument a job may leave out is still filled."""

    with pytest.raises(ConfigError, match="together"):
        app.enqueue("sync", {}, concurrency_key="k")
    with pytest.raises(ConfigError, match="together"):
        app.enqueue("sync", {}, concurrency_limit=2)
    with pytest.raises(ConfigError, match="concurrency_limit"):
        app.enqueue("sync", {}, concurrency_key="k", concurrency_limit=0)
    with pytest.raises(ConfigError, match="concurrency_key"):
        app.enqueue("sync", {}, concurrency_key="", concurrency_limit=1)
    with pytest.raises(ConfigError, match="together"):
        app.task(concurrency_limit=2)(lambda: None)
    with pytest.raises(ConfigError, match="arguments"):
        app.task(name="positional", concurrency_key="t:{}", concurrency_limit=2)(lambda: None)
    assert app.store.list_jobs(limit=10) == []
    assert _limits(app, sync.enqueue()) == ("tenant:", 2)
