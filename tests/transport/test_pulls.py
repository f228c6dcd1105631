"""A worker's pulls tell an empty queue from silence (`heartq/transport/puller.py`,
`consuming.py`): JetStream answers an empty pull (408) within its wait, a frozen server
answers nothing, and each is bounded by the pull's wait and a short grace, never the 5 s
of a JetStream call. nats-py's `fetch` answered both with an empty list: a worker on a
SIGSTOPped node saw an empty queue for the whole freeze."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator

import pytest

from heartq.event_stream import EventStream
from heartq.transport.health import Unanswered
from heartq.transport.nats import NatsTransport
from heartq.transport.puller import PULL_GRACE
from tests import nats_harness

pytestmark = pytest.mark.slow

WAIT = 0.3


def wait_for(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def server() -> Iterator[nats_harness.PrivateNats]:
    with nats_harness.PrivateNats.running() as running:
        yield running


@pytest.fixture
def worker_side(server: nats_harness.PrivateNats) -> Iterator[NatsTransport]:
    """A transport whose consumer of queue `default` is bound, as a worker's is."""
    transport = NatsTransport(
        f"{server.address}?{nats_harness.names()}", lambda: "d1", EventStream()
    )
    wait_for(lambda: transport.available, 10, "the server")
    transport.prepare(["default"], 60)
    try:
        yield transport
    finally:
        transport.close()


def timed(fetch: Callable[[], object]) -> tuple[float, object]:
    began = time.monotonic()
    try:
        got = fetch()
    except Unanswered as exc:
        got = exc
    return time.monotonic() - began, got


def test_an_empty_queue_answers_a_frozen_server_does_not(
    server: nats_harness.PrivateNats, worker_side: NatsTransport
) -> None:
    fetch = lambda: worker_side.fetch("default", 4, WAIT)  # noqa: E731
    took, got = timed(fetch)
    assert got == [] and took < WAIT + PULL_GRACE, (took, got)  # answered: nothing waits
    assert worker_side.publish([("j1", "default")])
    took, got = timed(fetch)
    assert isinstance(got, list) and len(got) == 1 and took < WAIT, (took, got)
    worker_side.ack(got)
    assert worker_side.health() is None

    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        took, slow = timed(fetch)  # once: a slow answer, the database claims this round
        assert isinstance(slow, Unanswered) and slow.reason == "slow", slow
        assert took < WAIT + PULL_GRACE + 0.2, took
        assert worker_side.health() is None
        took, silent = timed(fetch)  # twice running: silent, until the watch finds it good
        assert isinstance(silent, Unanswered) and silent.reason == "silent", silent
        assert took < WAIT + PULL_GRACE + 0.2, took
        trouble = worker_side.health()  # and the client left the server that is silent
        assert trouble is not None and trouble[0] in ("silent", "disconnected"), trouble
        took, refused = timed(fetch)  # while unhealthy: refused at once, no pull
        assert isinstance(refused, Unanswered) and took < 0.05, (took, refused)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: worker_side.health() is None, 10, "the watch to find the consumer good")
    assert timed(fetch)[1] == []


def test_a_deleted_consumer_is_said_and_made_again(worker_side: NatsTransport) -> None:
    names = worker_side.names
    _js, admin = worker_side.jetstream()
    worker_side.call(admin.delete_consumer(names.stream, names.durable("default")))
    _took, gone = timed(lambda: worker_side.fetch("default", 4, WAIT))
    assert isinstance(gone, Unanswered), gone  # no answer on one server, 503 on a cluster
    assert gone.reason in ("slow", "no_responders", "refused"), gone
    wait_for(lambda: worker_side.health() is None, 10, "the consumer made again")
    assert worker_side.publish([("j2", "default")])
    got: list[object] = []

    def delivered() -> bool:
        answer = timed(lambda: worker_side.fetch("default", 4, WAIT))[1]
        got.extend(answer if isinstance(answer, list) else [])
        return bool(got)

    wait_for(delivered, 10, "the wake-up through the new consumer")
    assert len(got) == 1, got
