"""Two deployments on one NATS server never meet (docs/NATS.md, "Names").

Before schema v9 every deployment used the stream `HEARTQ` and the consumers
`HEARTQ_<queue>`: two queues on one server shared a consumer, so each worker acked the
other's wake-ups (its jobs then waited for a backstop claim or the sweeper, ~10 s), and a
worker needing a longer ack_wait than the consumer the other deployment made exited at
start. Here two real deployments (two SQLite files; on PostgreSQL, with
`HEARTQ_TEST_LAYER_BACKENDS`, two schemas of one database, each with a deployment id of
its own as tests/conformance/test_deployment.py shows) run real workers against one
server: with default settings their names differ, each runs its own jobs at transport
speed, and neither exits. The workers' settings differ on purpose (ack_wait 60 s and
240 s) so a shared consumer would show.

Latency is asserted loosely: under `LATE` (5 s) per job, where a stolen wake-up waits
for the backstop or the sweeper (10 s), so the figure a loaded 2-core machine cannot
break still tells the two apart (over 8 jobs per deployment).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import heartq
from tests import nats_harness, pg_harness

from .conftest import Harness, WorkerProc, parse_ts

pytestmark = pytest.mark.slow

SHORT: dict[str, str | None] = {"--poll-interval": "1", "--lease": "4", "--reclaim-interval": "1"}
"""Database polling only every second (a backstop claim every 10 s while the transport is
up); consumers made with ack_wait max(60, 2 x 5) = 60 s."""
LONG: dict[str, str | None] = {"--poll-interval": "1", "--lease": "90", "--reclaim-interval": "30"}
"""The default lease and reclaim interval (90 + 30 s): this worker needs ack_wait 240 s, so a
consumer the SHORT deployment made (60 s) would make it exit."""
ROUNDS = 8
LATE = 5.0


@pytest.fixture
def other(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    """A second deployment beside `harness`: another SQLite file, or on PostgreSQL another
    schema of the same database (two schemas are two deployments)."""
    with contextlib.ExitStack() as cleanup:
        directory = tmp_path / "other"
        directory.mkdir()
        if backend == "sqlite":
            url = f"sqlite:///{directory / 'heartq.db'}"
        else:
            server = request.getfixturevalue("pg_server_url")
            url = cleanup.enter_context(pg_harness.schema_url(server))
        second = Harness(directory, backend, url)
        cleanup.callback(second.close)
        yield second


@pytest.fixture
def address() -> Iterator[str]:
    with nats_harness.server_address() as found:
        yield found


def ready(harness: Harness, worker: WorkerProc) -> dict[str, Any]:
    """The worker's `transport_ready` event: its stream, subjects and consumers."""
    found = harness.wait_for(
        lambda: worker.events("transport_ready") or not worker.alive(),
        30,
        "the worker's consumers on NATS",
    )
    assert worker.alive(), worker.log_tail()
    event: dict[str, Any] = found[0]
    return event


def start_pair(
    url: str, first: Harness, second: Harness, polling: str = "1"
) -> tuple[WorkerProc, WorkerProc]:
    """A SHORT worker on `first`, then, once its consumers exist (it makes them before
    its first claim, so once it ran a job), a LONG one on `second`, polling its database
    every `polling` seconds."""
    a = first.start_worker("--transport", url, settings=SHORT)
    app = heartq.App(first.url, transport=url)
    try:
        first.wait_status(app.enqueue("quick"), "succeeded", 30)
    finally:
        app.close()
    b = second.start_worker("--transport", url, settings={**LONG, "--poll-interval": polling})
    return a, b


def latencies(harness: Harness, job_ids: list[str]) -> list[float]:
    """Enqueue-to-start of each job (the database's clock, millisecond resolution)."""
    jobs = [harness.job(job_id) for job_id in job_ids]
    return [parse_ts(j["executions"][0]["started_at"]) - parse_ts(j["created_at"]) for j in jobs]


def run_in_turn(url: str, deployments: list[Harness], timeout: float = 30) -> list[list[str]]:
    """`ROUNDS` rounds: one job enqueued in each deployment (through its transport), then
    both waited for; the ids per deployment."""
    apps = [heartq.App(h.url, transport=url) for h in deployments]
    ids: list[list[str]] = [[] for _ in deployments]
    try:
        for n in range(ROUNDS):
            made = [app.enqueue("quick", {"value": n}) for app in apps]
            for harness, job_id, mine in zip(deployments, made, ids, strict=True):
                harness.wait_status(job_id, "succeeded", timeout)
                mine.append(job_id)
    finally:
        for app in apps:
            app.close()
    return ids


def each_ran_promptly(url: str, deployments: list[Harness]) -> None:
    """Each deployment's jobs started through its own wake-ups, none waited for a
    backstop claim or the sweeper."""
    ran = run_in_turn(url, deployments)
    for harness, job_ids in zip(deployments, ran, strict=True):
        waited = latencies(harness, job_ids)
        assert max(waited) < LATE, waited


def test_default_names_differ_and_neither_steals_nor_exits(
    harness: Harness, other: Harness, address: str
) -> None:
    url = address  # as documented: no stream=, no prefix=
    try:
        a, b = start_pair(url, harness, other)
        second = ready(other, b)  # first: this is the worker that used to exit
        got = [ready(harness, a), second]
        ids = [harness.store.link.deployment_id(), other.store.link.deployment_id()]
        for event, deployment in zip(got, ids, strict=True):
            assert event["deployment"] == deployment
            assert event["stream"] == f"HEARTQ_{deployment}"
            assert event["subjects"] == f"heartq.{deployment}.>"
            assert event["consumers"] == [f"HEARTQ_{deployment}_default"]
        assert ids[0] != ids[1]

        each_ran_promptly(url, [harness, other])
        for worker in (a, b):
            assert worker.alive(), worker.log_tail()
            assert not worker.events("transport_unavailable"), worker.log_tail()
    finally:
        for deployment in (harness, other):
            nats_harness.delete_stream(url, deployment.store.link.deployment_id())


def test_a_stream_shared_on_purpose_keeps_subjects_and_consumers_apart(
    harness: Harness, other: Harness, address: str
) -> None:
    """`stream=` names one stream for both: each deployment adds its own subjects to it
    and binds consumers of its own."""
    url = f"{address}?stream=HQT_{uuid.uuid4().hex[:12]}"
    try:
        a, b = start_pair(url, harness, other)
        second, first = ready(other, b), ready(harness, a)
        assert first["stream"] == second["stream"]
        assert first["subjects"] != second["subjects"]
        assert set(first["consumers"]).isdisjoint(second["consumers"])

        each_ran_promptly(url, [harness, other])
        for worker in (a, b):
            assert worker.alive(), worker.log_tail()
            assert not worker.events("transport_unavailable"), worker.log_tail()
    finally:
        nats_harness.delete_stream(url)


def test_subjects_shared_on_purpose_leave_the_second_deployment_polling(
    harness: Harness, other: Harness, address: str
) -> None:
    """`stream=` and `prefix=` both shared: the same subjects on one work-queue stream,
    where NATS takes one consumer per subject. The second deployment's worker says why
    (`transport_unavailable`, in NATS's words) and polls its database: it does not exit,
    and its jobs still run."""
    url = f"{address}?{nats_harness.names()}"
    try:
        # the second refused, polling: every 0.2 s, as its rounds wait for each poll
        a, b = start_pair(url, harness, other, polling="0.2")
        refused = other.wait_for(
            lambda: b.events("transport_unavailable") or not b.alive(),
            30,
            "the second worker to be refused its consumer",
        )
        assert b.alive(), b.log_tail()
        assert "not unique" in refused[0]["error"], refused
        assert "HEARTQ_" + other.store.link.deployment_id() in refused[0]["error"], refused

        run_in_turn(url, [harness, other])  # the second by polling
        for worker in (a, b):
            assert worker.alive(), worker.log_tail()
    finally:
        nats_harness.delete_stream(url)
