"""The NATS transport on a private three-node JetStream cluster (docs/NATS.md, "Running
on a cluster"): the transport URL's server list and the stream's replicas honoured, and
the faults a cluster has (a node frozen, the stream leader's node killed) under steady
load: the workers claim from the database while NATS does not deliver, say so, and
every job runs once, its effect written once.

Each test starts its own cluster (`tests/nats_harness.PrivateCluster`: three
`nats-server` processes on free ports, routes between them, removed after); never the
shared server on 4222, since nodes are killed and frozen here. The long runs (a node
frozen 10 s, a leader lost) are `heavy`; the default suite has a short freeze."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import pytest

import heartq
from heartq.events import Event
from heartq.transport.settings import NatsOptions
from tests import nats_harness

from .conftest import Harness, WorkerProc, parse_ts
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


POLL = float(CALM["--poll-interval"] or 1)
"""The workers' poll interval: without NATS a job waits up to this for its claim."""


class Load:
    """Enqueues `ledger_write` jobs at a steady pace on a thread of the test's (`rate`
    a second, every fifth call an `enqueue_many` of 10), keeping each call's duration;
    each job writes one row (job, execution) into `table` in its transaction."""

    def __init__(self, harness: Harness, transport: str, table: str, rate: float = 20) -> None:
        self.app = heartq.App(harness.url, transport=transport)
        self.table = table
        self.rate = rate
        self.calls: list[tuple[float, float, int]] = []
        """(began, seconds, jobs) of each enqueue call, by the monotonic clock."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.app.close()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            began = time.monotonic()
            if n % 5:
                self.app.enqueue("ledger_write", {"table": self.table})
                count = 1
            else:
                self.app.enqueue_many("ledger_write", [{"table": self.table}] * 10)
                count = 10
            self.calls.append((began, time.monotonic() - began, count))
            self._stop.wait(1 / self.rate)

    def slowest(self, since: float, at_least: int = 1) -> float:
        """The longest enqueue call of `at_least` jobs that began after `since`."""
        return max((s for b, s, n in self.calls if b >= since and n >= at_least), default=0)


def ledger(harness: Harness) -> str:
    name = "effects"
    harness.sql(f"CREATE TABLE {name} (job_id text NOT NULL, execution_id integer NOT NULL)")
    return name


def waits(harness: Harness, since: float, until: float) -> list[float]:
    """Enqueue-to-start (the database's clock) of the jobs created between the two
    wall-clock times."""
    rows = harness.sql(
        "SELECT j.created_at, min(e.started_at) FROM heartq_jobs AS j "
        "JOIN heartq_executions AS e ON e.job_id = j.id GROUP BY j.id"
    )
    return [float(s) - float(c) for c, s in rows if since <= float(c) <= until]


def every_effect_once(harness: Harness, table: str) -> int:
    """Every job succeeded with one execution, its row written once; how many jobs."""
    count = int(harness.sql("SELECT count(*) FROM heartq_jobs")[0][0])
    all_succeeded_once(harness, count, 90)
    rows = harness.sql(f"SELECT job_id, count(*) FROM {table} GROUP BY job_id")
    assert len(rows) == count, (len(rows), count)
    assert all(int(n) == 1 for _job, n in rows), [r for r in rows if int(r[1]) != 1][:5]
    return count


def said_degraded(worker: WorkerProc, since: float) -> list[dict[str, object]]:
    """What the worker said of NATS not delivering after the wall-clock time `since`:
    `transport_degraded`, or `transport_unavailable` (its client left a server that
    answered nothing, before a second silent pull made it degraded)."""
    said = [
        e
        for name in ("transport_degraded", "transport_unavailable")
        for e in worker.events(name)
        if parse_ts(str(e["ts"])) >= since
    ]
    return sorted(said, key=lambda e: parse_ts(str(e["ts"])))


def from_database(worker: WorkerProc, since: float) -> float:
    """When the worker first claimed from the database after `since` (wall clock; inf:
    never)."""
    claims = [
        parse_ts(str(e["ts"]))
        for e in worker.events("job_claimed", via="database")
        if parse_ts(str(e["ts"])) >= since
    ]
    return min(claims, default=float("inf"))


def freeze_the_workers_node(
    harness: Harness,
    cluster: nats_harness.PrivateCluster,
    seconds: float,
    workers: int,
    after: float = 1.0,
) -> tuple[float, float, Load]:
    """`workers` workers all on node n1 (listed first, `randomize=false`), the load's
    app on n2; n1 frozen `seconds` under the load, which goes on `after` seconds more.
    The freeze's wall-clock start and end, and the load (finished)."""
    names = f"{nats_harness.names()}&replicas=3&randomize=false"
    n1, n2, n3 = (node.address for node in cluster.nodes)
    on_n1 = f"{n1},{n2},{n3}?{names}"
    table = ledger(harness)
    started = [
        harness.start_worker("--transport", on_n1, settings=CALM, wait=False)
        for _ in range(workers)
    ]
    for worker in started:
        harness.wait_started(worker)
        harness.wait_for(lambda w=worker: w.events("transport_ready"), 20, "consumers bound")
    with Load(harness, f"{n2},{n3},{n1}?{names}", table) as load:
        harness.wait_for(lambda: len(load.calls) > 10, 20, "the load to run")
        frozen_at = time.time()
        cluster.node("n1").freeze()
        harness.wait_for(lambda: time.time() > frozen_at + seconds, seconds + 5, "the freeze")
        cluster.node("n1").thaw()
        thawed_at = time.time()
        harness.wait_for(lambda: time.time() > thawed_at + after, after + 5, "the load after")
    return frozen_at, thawed_at, load


@pytest.mark.long(11)
def test_a_short_freeze_its_workers_claim_from_the_database_and_say_so(
    harness: Harness, cluster: nats_harness.PrivateCluster
) -> None:
    """The node both workers are connected to frozen 3 s (SIGSTOP: its sockets open,
    nothing answered): they run jobs from the database within about a second, say so
    (`transport_degraded`), and every job runs once. Before: they saw an empty queue
    for the whole freeze, claimed from the database only at their 10 s backstop, and
    said nothing."""
    frozen_at, thawed_at, _load = freeze_the_workers_node(harness, cluster, 3, workers=2)
    for worker in harness.workers:
        said = said_degraded(worker, frozen_at)
        assert said, worker.log_tail()
        assert parse_ts(str(said[0]["ts"])) - frozen_at < 2.5, said[0]
    assert min(from_database(w, frozen_at) for w in harness.workers) - frozen_at < 1.5
    during = waits(harness, frozen_at, thawed_at)
    assert during and max(during) < POLL + 1.5, sorted(during)[-5:]
    every_effect_once(harness, "effects")


def starts_stalled(harness: Harness, since: float, until: float) -> float:
    """The longest stretch without a job starting between the two wall-clock times."""
    rows = harness.sql("SELECT started_at FROM heartq_executions ORDER BY started_at")
    starts = [since, *(float(s) for (s,) in rows if since <= float(s) <= until), until]
    return max(b - a for a, b in itertools.pairwise(starts))


@pytest.mark.heavy
@pytest.mark.long(21)
@pytest.mark.timeout(240)
def test_a_node_frozen_10_s_its_workers_run_jobs_from_the_database(
    harness: Harness, cluster: nats_harness.PrivateCluster
) -> None:
    """Three workers on the node frozen 10 s under steady load: each claims from the
    database within about a second and says so, no job waits much longer than it would
    without NATS, jobs keep starting, every job runs once and writes its effect once.
    Before: completions stopped 9.9 s, nothing was said, some jobs waited 18-24 s."""
    frozen_at, thawed_at, load = freeze_the_workers_node(harness, cluster, 10, 3, after=5)
    for worker in harness.workers:
        said = said_degraded(worker, frozen_at)
        assert said and parse_ts(str(said[0]["ts"])) - frozen_at < 2.5, worker.log_tail()
    # The first database claims (by whichever worker: one may find the others took all).
    assert min(from_database(w, frozen_at) for w in harness.workers) - frozen_at < 1.5
    during = waits(harness, frozen_at - 1, thawed_at + 5)
    assert max(during) < POLL + 2.0, sorted(during)[-5:]
    assert starts_stalled(harness, frozen_at, thawed_at) < POLL + 1.0
    assert load.slowest(frozen_at, at_least=10) < 0.5
    every_effect_once(harness, "effects")


@pytest.mark.heavy
@pytest.mark.long(22)
@pytest.mark.timeout(240)
def test_the_stream_leader_killed_under_load_costs_no_job_more_than_2_s(
    harness: Harness, cluster: nats_harness.PrivateCluster
) -> None:
    """The stream leader's node SIGKILLed (restarted 10 s later) under steady load,
    three workers spread over the nodes, `replicas=3`: JetStream takes ~5 s to elect a
    new leader; meanwhile the workers claim from the database, so no job waits more
    than about 2 s longer than without NATS (the poll interval), `enqueue_many` answers
    in its usual time, and every job runs once, its effect once. Before: completions
    paused 5.3 s, jobs waited 12-15 s, `enqueue_many` blocked 5.0 s after its commit."""
    url = f"{cluster.servers}?{nats_harness.names()}&replicas=3"
    stream = NatsOptions.parse(url).stream
    assert stream is not None
    table = ledger(harness)
    started = [
        harness.start_worker("--transport", url, settings=CALM, wait=False) for _ in range(3)
    ]
    for worker in started:
        harness.wait_started(worker)
        harness.wait_for(lambda w=worker: w.events("transport_ready"), 20, "consumers bound")
    with Load(harness, url, table) as load:
        harness.wait_for(lambda: len(load.calls) > 30, 20, "the load to run")
        usual = load.slowest(0, at_least=10)
        leader = cluster.stream_leader(stream)
        assert leader is not None
        killed_at = time.time()
        began = time.monotonic()
        cluster.node(leader).kill()
        harness.wait_for(lambda: time.time() > killed_at + 10, 15, "the election and more")
        cluster.restart(cluster.node(leader))
        harness.wait_for(lambda: time.time() > killed_at + 15, 10, "the load after")
    during = waits(harness, killed_at - 1, killed_at + 15)
    assert max(during) < POLL + 2.0, sorted(during)[-5:]
    assert starts_stalled(harness, killed_at, killed_at + 15) < POLL + 1.0
    assert load.slowest(began, at_least=10) < max(0.5, 3 * usual), (usual, load.calls[-5:])
    told = [w for w in harness.workers if said_degraded(w, killed_at)
            or w.events("transport_unavailable")]  # fmt: skip
    assert told, [w.log_tail() for w in harness.workers]
    every_effect_once(harness, "effects")
