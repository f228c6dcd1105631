"""Rate limits from the Python API to a running worker: `@app.task(rate_limit=...)` and
`rate_key=` on every enqueue path, bad specs refused in one line, and a worker that
neither polls while a limit holds nor waits its whole poll interval when a start frees
up sooner (docs/design/limits.md, "Rate limits")."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import heartq
from heartq.errors import ConfigError
from heartq.model import Claim
from tests.support import wait_for

from .conftest import WorkerThread

# PostgreSQL takes a key's claim lock by the key's name alone (an advisory lock, which
# every schema of a database shares): tests in parallel processes that use the same key
# names ("k") in their own schemas would make each other's claims skip the key. One test
# process runs these files.
pytestmark = pytest.mark.one_at_a_time("key-locks")


def _rate(app: heartq.App, job_id: str) -> tuple[str | None, str | None]:
    job = app.store.get_job(job_id)
    return job["rate_key"], job["rate_limit"]


def test_every_python_path_stores_the_key_and_limit(app: heartq.App) -> None:
    @app.task(rate_limit="100/m")
    def whole(n: int = 0) -> None:
        """One limit for the task: its key is its name."""

    @app.task(rate_limit="10/s", rate_key="customer:{customer}")
    def per_customer(customer: str, n: int = 0) -> None:
        """A limit per customer."""

    @app.task
    def plain(n: int = 0) -> None:
        """No limit of its own."""

    assert _rate(app, whole.enqueue()) == ("whole", "100/m")
    assert _rate(app, per_customer.enqueue("acme")) == ("customer:acme", "10/s")
    assert _rate(app, app.enqueue("per_customer", {"customer": "x"})) == ("customer:x", "10/s")
    ids = per_customer.enqueue_many([{"customer": "a"}, {"customer": "b"}])
    assert [_rate(app, i) for i in ids] == [("customer:a", "10/s"), ("customer:b", "10/s")]
    # the enqueue's key takes the task's limit, or its own
    assert _rate(app, whole.options(rate_key="shared").enqueue()) == ("shared", "100/m")
    chosen = per_customer.options(rate_key="k", rate_limit="3/10s").enqueue("acme")
    assert _rate(app, chosen) == ("k", "3/10s")
    assert _rate(app, plain.enqueue()) == (None, None)
    found = asyncio.run(app.enqueue_async("plain", {}, rate_key="k", rate_limit="5/h"))
    assert _rate(app, found) == ("k", "5/h")
    bound = plain.options(rate_key="k", rate_limit="1/1.5h")
    assert _rate(app, asyncio.run(bound.enqueue_async(n=2))) == ("k", "1/90m")
    # with a unique key too, and with a concurrency key: both are kept
    unique = app.enqueue(
        "whole", {}, unique_key="u", concurrency_key="c", concurrency_limit=1
    )
    job = app.store.get_job(unique)
    assert (job["rate_key"], job["rate_limit"], job["concurrency_key"]) == ("whole", "100/m", "c")


def test_an_enqueue_by_name_takes_the_declared_limit(app: heartq.App) -> None:
    """A program without the task's code (the command line, a web server) gets the
    limit its workers declared, with the key template filled from the job's arguments."""

    @app.task(rate_limit="2/s", rate_key="tenant:{tenant}")
    def sync(tenant: str) -> None:
        """Talks to one tenant's API."""

    app.store.declare_tasks([sync.policy], "w-test")
    producer = heartq.App(app.url)
    try:
        assert _rate(producer, producer.enqueue("sync", {"tenant": "t1"})) == ("tenant:t1", "2/s")
        with pytest.raises(TypeError, match="'tenant'"):
            producer.enqueue("sync", {})
    finally:
        producer.close()


def test_bad_limits_are_refused_in_one_line_before_anything_is_stored(app: heartq.App) -> None:
    @app.task
    def plain() -> None:
        """No limit of its own."""

    spaced = ("5/ s", " 10/m", "10 /s", "10/m ", "3/10 s")  # written without spaces, or refused
    for spec in ("100 per minute", "0/s", "10/0.01s", "5/2d", "", "1/25h", "٣/s", *spaced):
        with pytest.raises(ConfigError) as caught:
            app.task(name=f"bad{len(spec)}", rate_limit=spec)(lambda: None)
        assert "\n" not in str(caught.value) and "rate_limit" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        app.task(name="spaced", rate_limit="5/ s")(lambda: None)
    assert str(caught.value) == (
        "spaced: rate_limit '5/ s' is not N/PERIOD: write it like '10/s', '100/m', '5/h' or "
        "'3/10s' (starts per period; units s, m, h; no spaces)"
    )
    with pytest.raises(ConfigError, match="rate_key needs a rate_limit"):
        app.task(name="keyed", rate_key="k:{x}")(lambda x: None)
    with pytest.raises(ConfigError, match="arguments"):
        app.task(name="positional", rate_limit="1/s", rate_key="k:{}")(lambda: None)
    with pytest.raises(ConfigError, match="needs a rate_key"):
        app.enqueue("plain", {}, rate_limit="1/s")
    with pytest.raises(ConfigError, match="declares none"):
        app.enqueue("plain", {}, rate_key="k")
    with pytest.raises(ConfigError, match="is not N/PERIOD"):
        app.enqueue("plain", {}, rate_key="k", rate_limit="fast")
    with pytest.raises(ConfigError, match="rate_key"):
        app.enqueue("plain", {}, rate_key="", rate_limit="1/s")
    assert app.store.list_jobs(limit=10) == []


class ClaimCounter:
    """Counts the claims a worker's store answers (instrumentation of the real store:
    every claim still runs against the database)."""

    def __init__(self, app: heartq.App, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self._lock = threading.Lock()
        real = app.store.claim

        def counted(*args: Any, **kwargs: Any) -> Claim:
            answer = real(*args, **kwargs)
            with self._lock:
                self.count += 1
            return answer

        monkeypatch.setattr(app.store, "claim", counted)


def test_an_idle_worker_does_not_poll_while_the_limit_holds(
    app: heartq.App,
    run_worker: Callable[..., WorkerThread],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every queued job is held back for a minute: the worker claims once per poll
    interval, as an idle worker with nothing queued does, never in a loop."""

    @app.task(rate_limit="1/m")
    def once_a_minute() -> None:
        """The key's one start per minute."""

    claims = ClaimCounter(app, monkeypatch)
    first, *held = [once_a_minute.enqueue() for _ in range(3)]
    with run_worker(app, poll_interval=1.0):
        wait_for(lambda: app.get_job(first)["status"] == "succeeded", what="the first start")
        since, start = claims.count, time.monotonic()
        wait_for(lambda: claims.count >= since + 4, timeout=30, what="four more claims")
        elapsed = time.monotonic() - start
    assert elapsed >= 2.0, f"4 claims in {elapsed:.2f} s while every job is held back"
    assert [app.get_job(i)["status"] for i in held] == ["queued", "queued"]


def test_a_worker_wakes_when_a_start_frees_up_before_its_poll(
    app: heartq.App,
    run_worker: Callable[..., WorkerThread],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two starts a second and a 30 s poll interval: six jobs start in about 2 s (polling
    alone would take a minute), two by two, with a few claims, not a loop."""

    @app.task(rate_limit="2/s")
    def limited() -> None:
        """Two starts a second."""

    claims = ClaimCounter(app, monkeypatch)
    with run_worker(app, poll_interval=30.0):
        ids = limited.enqueue_many([{} for _ in range(6)])
        wait_for(
            lambda: all(app.get_job(i)["status"] == "succeeded" for i in ids),
            timeout=20,
            what="six jobs limited to 2/s",
        )
    starts = sorted(
        execution["started_at"] for i in ids for execution in app.get_job(i)["executions"]
    )
    seconds = [_epoch(s) for s in starts]
    assert seconds[-1] - seconds[0] < 10.0, starts
    for start in seconds:
        assert sum(1 for s in seconds if start <= s < start + 1.0) <= 2, starts
    assert claims.count < 30, f"{claims.count} claims for six jobs"


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
