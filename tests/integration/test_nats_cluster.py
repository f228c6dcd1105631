"""The NATS transport on a private three-node JetStream cluster (docs/NATS.md, "Running
on a cluster"): the transport URL's server list and the stream's replicas honoured.

Each test starts its own cluster (`tests/nats_harness.PrivateCluster`: three
`nats-server` processes on free ports, routes between them, removed after); never the
shared server on 4222, since nodes are killed and frozen here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import heartq
from heartq.events import Event
from heartq.transport.settings import NatsOptions
from tests import nats_harness

from .conftest import Harness
from .test_nats_transport import CALM, all_succeeded_once

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[nats_harness.PrivateCluster]:
    with nats_harness.PrivateCluster.running() as running:
        yield running


def test_a_server_list_and_three_replicas_are_honoured(
    harness: Harness, cluster: nats_harness.PrivateCluster
) -> None:
    """`nats://n1,n2,n3?replicas=3`: accepted, every node handed to the client, the
    stream made with three replicas; another app asking one replica is told in one line
    and uses the stream as it is."""
    names = nats_harness.names()
    url = f"{cluster.servers}?{names}&replicas=3"
    stream = NatsOptions.parse(url).stream
    assert stream is not None
    worker = harness.start_worker("--transport", url, settings=CALM)
    harness.wait_for(lambda: worker.events("transport_ready"), 20, "consumers bound")
    (ready,) = worker.events("transport_ready")
    assert ready["server"] == cluster.servers
    assert cluster.stream_replicas(stream) == 3
    app = heartq.App(harness.url, transport=url)
    try:
        app.enqueue_many("quick", [{"value": n} for n in range(20)])
    finally:
        app.close()
    all_succeeded_once(harness, 20, 30)
    assert not worker.events("transport_unavailable")

    heard: list[Event] = []
    other = heartq.App(harness.url, transport=f"{cluster.servers}?{names}&replicas=1")
    other.events.subscribe(heard.append, names=["transport_stream_mismatch"])
    try:
        other.enqueue("quick", {"value": 20})
    finally:
        other.close()
    (mismatch,) = heard
    assert mismatch.fields["stream"] == stream
    assert mismatch.fields["differences"] == ["replicas 3 (the transport URL says 1)"]
    all_succeeded_once(harness, 21, 30)
    assert cluster.stream_replicas(stream) == 3  # used as it is, not changed


def test_replicas_a_single_server_cannot_hold_are_refused_in_natss_words(
    harness: Harness,
) -> None:
    """`replicas=3` on one server: the stream cannot be made; the worker says why (NATS's
    reason) and runs its jobs from the database, it does not exit."""
    with nats_harness.PrivateNats.running() as server:
        url = f"{server.address}?{nats_harness.names()}&replicas=3"
        worker = harness.start_worker("--transport", url, settings=CALM)
        harness.wait_for(lambda: worker.events("transport_unavailable"), 20, "the refusal")
        (refused,) = worker.events("transport_unavailable")
        assert "NATS refused stream" in refused["error"], refused
        assert "replicas" in refused["error"], refused
        job_id = harness.enqueue("quick")
        harness.wait_status(job_id, "succeeded", 20)
        assert worker.alive()
