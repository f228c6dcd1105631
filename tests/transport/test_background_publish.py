"""An enqueue answers right after its commit whatever NATS does: its wake-ups are
published in the background (`heartq/transport/publisher.py`), tried again when they
fail, and sent before the program ends.

Before, the publish ran on the caller's thread and waited for the stream's ack up to 5 s:
with the server frozen (SIGSTOP: its socket open, no answer), an `enqueue_many` that had
committed took 5.0 s."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import heartq
from heartq.event_stream import EventStream
from heartq.transport.nats import NatsTransport
from tests import nats_harness

pytestmark = pytest.mark.slow


@pytest.fixture
def server() -> Iterator[nats_harness.PrivateNats]:
    with nats_harness.PrivateNats.running() as running:
        yield running


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def watcher(url: str, deployment: str) -> NatsTransport:
    """A transport of the deployment whose queue's consumer counts what was published."""
    transport = NatsTransport(url, lambda: deployment, EventStream())
    wait_for(lambda: transport.available, 10, "the server")
    transport.prepare(["default"], 60)
    return transport


def test_an_enqueue_answers_at_once_with_the_server_frozen(
    tmp_path: Path, server: nats_harness.PrivateNats
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    transport = f"{server.address}?{nats_harness.names()}"
    app = heartq.App(url, transport=transport)
    count = watcher(transport, app.store.link.deployment_id())
    try:
        app.enqueue("t", {"n": 0})
        wait_for(lambda: count.backlog("default") == 1, 10, "the first wake-up")
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        try:
            began = time.monotonic()
            app.enqueue_many("t", [{"n": n} for n in range(1, 101)])
            app.enqueue("t", {"n": 101})
            took = time.monotonic() - began
            assert took < 0.5, took  # 5.0 s before: the publish's ack awaited
            publisher = app.transport
            assert publisher is not None
            wait_for(lambda: publisher.catch_ups > 0, 10, "the publish to time out")
        finally:
            server.proc.send_signal(signal.SIGCONT)
        # Published once the server answers: by the publisher's retry (no sweeper here).
        wait_for(lambda: count.backlog("default") >= 102, 10, "every wake-up published")
    finally:
        app.close()
        count.delete_stream()
        count.close()


def test_wake_ups_are_sent_before_the_program_ends(
    tmp_path: Path, server: nats_harness.PrivateNats
) -> None:
    """A script that enqueues and exits without closing its app: its wake-ups go out
    before the interpreter ends (the publisher's thread is a daemon)."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    transport = f"{server.address}?{nats_harness.names()}"
    app = heartq.App(url, transport=transport)
    count = watcher(transport, app.store.link.deployment_id())
    script = textwrap.dedent(
        f"""
        import heartq
        app = heartq.App({url!r}, transport={transport!r})
        app.enqueue_many("t", [{{"n": n}} for n in range(50)])
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", script],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", done.stderr
        wait_for(lambda: count.backlog("default") == 50, 10, "the script's wake-ups")
    finally:
        app.close()
        count.delete_stream()
        count.close()


def test_after_a_failed_publish_the_sweeper_publishes_what_waits_at_once(
    tmp_path: Path, server: nats_harness.PrivateNats
) -> None:
    """Jobs whose wake-ups were never published wait for a sweep of jobs queued
    `republish_after` (60 s here); once a publish of the sweeper's process has failed,
    its next pass publishes every job runnable for a second instead."""
    from heartq.maintenance.sweeper import CATCH_UP_AFTER, Sweeper

    url = f"sqlite:///{tmp_path / 'q.db'}"
    plain = heartq.App(url)  # no transport: jobs in the database only
    ids = plain.enqueue_many("t", [{"n": n} for n in range(5)])
    enqueued = time.time()
    transport_url = f"{server.address}?{nats_harness.names()}&republish_after=60"
    transport = watcher(transport_url, plain.store.link.deployment_id())
    sweeper = Sweeper(transport, plain.store, ["default"])
    try:
        sweeper.run_once()
        sweeper.run_once()
        assert transport.backlog("default") == 0  # not waiting 60 s yet: not published
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        try:
            failed = lambda: not transport.publish([("not-a-job", "default")])  # noqa: E731
            wait_for(failed, 10, "a publish to fail")
        finally:
            server.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: time.time() - enqueued >= CATCH_UP_AFTER, 5, "the jobs to wait 1 s")
        sweeper.run_once()
        wait_for(lambda: transport.backlog("default") >= len(ids), 10, "the jobs' wake-ups")
    finally:
        plain.close()
        transport.delete_stream()
        transport.close()
