"""Partitions and slow links between a worker and PostgreSQL (issue 27).

Each partitioned worker reaches the test's queue through a `FaultProxy` of its own
(`tests/faultproxy.py`): `cut()` stops every byte in both directions without closing a
socket, as a partition that TCP sits out does; `heal()` delivers what was held, in
order; `delay()` makes a slow link. The rest of the fleet, and the test's own reads, go
to the server directly.

A cut through the proxy leaves the worker's server session open (the proxy's kernel
acknowledges everything), so its liveness lock stays held: the cut-off worker is found by
its silence (its leases run out, its row goes stale), never by the probe, and it fences
itself before that (trust window). What the tests hold heartq to:

- a cut-off worker stops trusting its leases within its trust window, and its jobs run
  elsewhere within about a lease of the cut;
- what it sent into the cut (a finish of the attempt it lost, a renewal) reaches the
  server after another worker took the job over, and changes nothing (execution-id
  fence);
- after the heal it carries on: it runs new jobs;
- a slow link (200 ms each way) does not make a live worker look dead at default
  settings, however busy its pool.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from heartq.store.postgres.store import PostgresStore
from tests.faultproxy import FaultProxy

from .conftest import Harness, WorkerProc, only_on, parse_ts, private_harness

pytestmark = [pytest.mark.slow, only_on("postgres")]

PARTITION: dict[str, str | None] = {
    "--heartbeat-interval": "0.5",
    "--lease": "3",
    "--reclaim-interval": "0.5",
    "--liveness-interval": "0.2",
    "--poll-interval": "0.1",
}
"""Heartbeat 0.5 s, lease 3 s (stale after 3 s), safety margin 0.5 s: trust window 2.5 s
after the last renewal sent."""
LEASE = 3.0
TRUST_WINDOW = 2.5
SLOW_LINK = {**PARTITION, "--lease": "6"}
"""PARTITION's beat with room for a loaded machine's stalls: nothing is cut on the slow
link, so nothing waits on the lease's length."""


@pytest.fixture
def proxies(harness: Harness) -> Iterator[list[FaultProxy]]:
    """Fault proxies the test opens (`open_proxy`), closed after its workers are killed."""
    opened: list[FaultProxy] = []
    yield opened
    harness.close()  # the workers first: a closing proxy resets what they still hold
    for proxy in opened:
        proxy.close()


def open_proxy(harness: Harness, proxies: list[FaultProxy]) -> tuple[FaultProxy, str]:
    """A started proxy in front of the test's server, and the queue's URL through it."""
    proxy = FaultProxy.in_front_of(harness.pg_conninfo).start()
    proxies.append(proxy)
    return proxy, proxy.url_for(harness.url)


def first_event(worker: WorkerProc, name: str, **match: object) -> dict[str, object] | None:
    found = worker.events(name, **match)
    return found[0] if found else None


def carries_on_after_heal(
    harness: Harness, heal: Callable[[], object], cut_off: WorkerProc, within: float
) -> float:
    """Heal the cut, then a new job must run on `cut_off` (alone now) within `within`
    seconds of the heal, the worker alive: returns how long after the heal it started."""
    heal()
    healed_at = time.time()
    later = harness.enqueue("quick", {"value": "after the heal"})
    ran = harness.wait_status(later, "succeeded", within * 4)
    assert ran["executions"][-1]["worker_id"] == cut_off.id
    ran_after = parse_ts(str(ran["executions"][-1]["started_at"])) - healed_at
    assert ran_after < within, ran_after
    assert cut_off.alive()
    return ran_after


def test_a_cut_off_worker_is_fenced_its_job_runs_elsewhere_and_it_carries_on(
    harness: Harness, proxies: list[FaultProxy]
) -> None:
    proxy, through = open_proxy(harness, proxies)
    cut_off = harness.start_worker(settings=PARTITION, url=through)
    job_id = harness.enqueue("hold_first", {"seconds": 120})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 15, "attempt 1")
    harness.wait_job(job_id, lambda j: j["heartbeat_at"] != j["started_at"], 5, "a renewal")
    other = harness.start_worker(settings=PARTITION)

    proxy.cut()
    cut_at = proxy.cut_at
    assert cut_at is not None

    untrusted = harness.wait_for(
        lambda: first_event(cut_off, "leases_untrusted"), LEASE + 10, "the cut-off worker's fence"
    )
    done = harness.wait_status(job_id, "succeeded", LEASE + 15)
    fenced_after = parse_ts(str(untrusted["ts"])) - cut_at
    first, last = done["executions"][0], done["executions"][-1]
    taken_over_after = parse_ts(str(last["started_at"])) - cut_at
    assert first["worker_id"] == cut_off.id and last["worker_id"] == other.id, done["executions"]
    # Fenced within its trust window of the last renewal it sent (at most one heartbeat
    # interval before the cut), and before anyone else took the job.
    assert fenced_after < TRUST_WINDOW + 1.5, fenced_after
    assert parse_ts(str(untrusted["ts"])) < parse_ts(str(last["started_at"]))
    assert taken_over_after < LEASE + 3.0, taken_over_after
    assert first["outcome"] != "succeeded"
    assert done["result"]["execution_id"] == last["execution_id"] > first["execution_id"]

    # After the heal the cut-off worker carries on: alone, it runs new jobs.
    other.kill()
    ran_after = carries_on_after_heal(harness, proxy.heal, cut_off, within=10.0)
    print(
        f"fenced {fenced_after:.2f} s after the cut, taken over {taken_over_after:.2f} s after it;"
        f" a new job ran {ran_after:.2f} s after the heal"
    )


def test_what_a_cut_off_worker_sent_into_the_cut_changes_nothing(
    harness: Harness, proxies: list[FaultProxy]
) -> None:
    """The attempt's code ends during the cut: its finish goes into the cut and reaches
    the server at the heal, after another worker ran the job again and saved its result.
    The fence refuses it: one result, from the later execution."""
    proxy, through = open_proxy(harness, proxies)
    cut_off = harness.start_worker(settings=PARTITION, url=through)
    job_id = harness.enqueue("hold", {"seconds": 1.0})
    harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 15, "attempt 1")
    proxy.cut()  # the attempt's code ends about a second into the cut
    other = harness.start_worker(settings=PARTITION)
    done = harness.wait_status(job_id, "succeeded", LEASE + 15)
    last = done["executions"][-1]
    assert last["worker_id"] == other.id, done["executions"]
    assert proxy.stats.up_bytes > 0

    held_before = proxy.stats.up_bytes
    proxy.heal()
    # What was held (at least the finish of execution 1) reaches the server now.
    harness.wait_for(lambda: proxy.stats.up_bytes > held_before, 10, "the held writes")
    # The cut-off worker hears its finish was refused: the fence held, on the server.
    refused = harness.wait_for(
        lambda: [e for e in cut_off.job_events("lease_lost", job_id) if "refused" in e["reason"]],
        10,
        "the cut-off worker's finish to be refused",
    )
    assert refused[0]["execution_id"] == 1
    after = harness.job(job_id)
    assert after["status"] == "succeeded"
    assert after["result"] == done["result"]
    assert after["result"]["execution_id"] == last["execution_id"] != 1
    succeeded = [e for e in after["executions"] if e["outcome"] == "succeeded"]
    assert [e["execution_id"] for e in succeeded] == [last["execution_id"]], after["executions"]
    assert after["executions"][0]["outcome"] != "succeeded"


LOOKS_DEAD = ("leases_untrusted", "heartbeat_failed", "lease_lost", "worker_deactivated")
"""Events that would mean a live worker was taken for dead, or nearly."""


def run_busy_over_a_slow_link(
    harness: Harness,
    proxies: list[FaultProxy],
    settings: dict[str, str | None],
    jobs: int,
) -> WorkerProc:
    """A worker at concurrency 10 over a link of 200 ms each way, given `jobs` short jobs
    at once: its claims, finishes and pulses keep its pool's two connections busy, and
    whoever wants one queues for seconds. Returns it once every job succeeded, each
    once. The link turns slow once the worker has started (the delay holds every byte
    read from then on, on its open connections and new ones): a start over it took
    15 s of round trips, and the start is not what these tests are about."""
    proxy, through = open_proxy(harness, proxies)
    worker = harness.start_worker("--concurrency", "10", settings=settings, url=through)
    proxy.delay(up_ms=200, down_ms=200)
    keep_busy(harness, jobs)
    assert worker.alive()
    return worker


def keep_busy(harness: Harness, jobs: int) -> None:
    """Give the worker `jobs` short jobs at once; return once each succeeded, once."""
    job_ids = [harness.enqueue("quick", {"value": n}) for n in range(jobs)]
    for job_id in job_ids:
        done = harness.wait_status(job_id, "succeeded", 180)
        assert len(done["executions"]) == 1, done["executions"]


def test_a_slow_link_does_not_make_a_busy_worker_look_dead(
    harness: Harness, proxies: list[FaultProxy]
) -> None:
    """A 0.5 s heartbeat and a 6 s lease (trust window 5.5 s) over the slow link: every
    heartbeat lands, no job is given up or reclaimed. The worker is kept busy for at
    least five heartbeats, batch after batch (a batch of 30 once took only three).
    Over this link heartbeats land every 0.9 s, up to 1.6 s beside a CPU burner; with
    a 3 s lease a full suite beside a burner once starved the worker past it (its job
    ran twice, as a lapsed lease should). A heartbeat queued for the busy pool, the
    fault this guards, waits seconds more: `test_a_heartbeat_does_not_queue_for_a_busy_pool`
    pins that alone."""
    worker = run_busy_over_a_slow_link(harness, proxies, SLOW_LINK, jobs=30)
    for _ in range(20):
        if len(worker.events("heartbeat")) >= 5:
            break
        keep_busy(harness, 30)
    assert len(worker.events("heartbeat")) >= 5
    for name in LOOKS_DEAD:
        assert not worker.events(name), worker.events(name)
    assert harness.worker_row(worker.id)["status"] == "active"


def test_a_heartbeat_does_not_queue_for_a_busy_pool(harness: Harness) -> None:
    """The heartbeat rides the worker's lasting session (`SharedSession.lend`): with
    every pooled connection taken, it lands at once, where through the pool it waited
    for the pool's timeout (5 s) and failed."""
    store = PostgresStore(harness.url, pool_size=1)
    try:
        worker_id = "busy-pool-worker"
        handle = store.link.liveness_hold(worker_id)
        assert handle is not None
        with store.link.pool.transaction() as held:  # the pool's one connection
            held.execute("SELECT 1")
            began = time.monotonic()
            store.heartbeat(worker_id, [], 3.0)
            took = time.monotonic() - began
        assert took < 2.0, took
        handle.close()
    finally:
        store.link.close()


@pytest.mark.soak
def test_a_slow_link_does_not_make_a_busy_worker_look_dead_at_default_settings(
    harness: Harness, proxies: list[FaultProxy]
) -> None:
    """The default settings (heartbeat 30 s, lease 90 s, trust window 75 s): work for
    longer than a heartbeat interval over the slow link; the first heartbeat lands
    at once and nothing is taken for dead. About 70 s."""
    defaults: dict[str, str | None] = {option: None for option in PARTITION}
    worker = run_busy_over_a_slow_link(harness, proxies, defaults, jobs=300)
    beats = worker.events("heartbeat")
    assert beats, "no heartbeat in the run"
    for name in LOOKS_DEAD:
        assert not worker.events(name), worker.events(name)
    assert harness.worker_row(worker.id)["status"] == "active"


def test_a_busy_pool_is_a_queue_not_an_outage(harness: Harness) -> None:
    """A caller that waited longer than the pool's timeout (5 s) while connections came
    back to the pool (to callers ahead of it) waits on: over a slow link a busy worker's
    tasks failed "no connection within 5 s" as if the server were away. A pool whose
    connections never come back still fails after its timeout (the outage tests)."""
    store = PostgresStore(harness.url, pool_size=1)
    try:
        store.link.pool.reach()
        holding = threading.Barrier(2)

        def hold(seconds: float, first: bool) -> None:
            with store.link.pool.transaction() as conn:
                conn.execute("SELECT 1")
                if first:
                    holding.wait(5)
                time.sleep(seconds)  # a slow transaction, the test's load

        ahead = [
            threading.Thread(target=hold, args=(3.0, True)),
            threading.Thread(target=hold, args=(3.0, False)),
        ]
        ahead[0].start()
        holding.wait(5)
        ahead[1].start()  # queued behind the first: it gets the connection at ~3 s
        harness.wait_for(  # so that it queues first (the pool serves in order)
            lambda: store.link.pool._get_pool().get_stats().get("requests_waiting", 0) >= 1,
            5,
            "the second holder to queue",
        )
        began = time.monotonic()
        with store.link.pool.transaction() as conn:  # third in line: at ~6 s, past 5 s
            conn.execute("SELECT 1")
        waited = time.monotonic() - began
        for thread in ahead:
            thread.join(10)
        assert waited > 5.0, waited  # it did outwait the pool's own timeout
    finally:
        store.link.close()


class KernelLink:
    """A network namespace joined to this one by a veth pair: a worker started in it
    (`ip netns exec`) reaches a server here at `HOST` only through the pair, and
    blackhole routes on both sides (`cut()`) drop its packets in the kernel, as a real
    partition does: unlike the proxy's cut, TCP keepalives and `tcp_user_timeout` fire.
    Nothing else on the machine is touched (its own namespace, a private subnet)."""

    HOST = "10.213.79.1"
    PEER = "10.213.79.2"

    def __init__(self) -> None:
        suffix = f"{os.getpid() % 100000}"
        self.ns = f"hq_part_{suffix}"
        self.veth = (f"hqpa{suffix}", f"hqpb{suffix}")
        self.is_cut = False

    def _ip(self, *args: str, inside: bool = False) -> None:
        prefix = ["ip", "netns", "exec", self.ns] if inside else []
        subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, timeout=10)

    def open(self) -> KernelLink:
        here, there = self.veth
        self._ip("netns", "add", self.ns)
        try:
            self._ip("link", "add", here, "type", "veth", "peer", "name", there)
            self._ip("link", "set", there, "netns", self.ns)
            self._ip("addr", "add", f"{self.HOST}/30", "dev", here)
            self._ip("link", "set", here, "up")
            self._ip("addr", "add", f"{self.PEER}/30", "dev", there, inside=True)
            self._ip("link", "set", there, "up", inside=True)
            self._ip("link", "set", "lo", "up", inside=True)
        except BaseException:
            self.close()
            raise
        return self

    def launcher(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns]

    def cut(self) -> None:
        self._ip("route", "add", "blackhole", f"{self.PEER}/32")
        self._ip("route", "add", "blackhole", f"{self.HOST}/32", inside=True)
        self.is_cut = True

    def heal(self) -> None:
        self._ip("route", "del", "blackhole", f"{self.PEER}/32")
        self._ip("route", "del", "blackhole", f"{self.HOST}/32", inside=True)
        self.is_cut = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.is_cut:
                self.heal()
        for args in (("netns", "del", self.ns), ("link", "del", self.veth[0])):
            with contextlib.suppress(Exception):
                self._ip(*args)


@pytest.fixture
def kernel_link() -> Iterator[KernelLink]:
    link = KernelLink()
    try:
        link.open()
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"no network namespace here: {exc}")
    try:
        yield link
    finally:
        link.close()


@pytest.mark.soak
def test_a_kernel_level_partition_heals_and_the_worker_carries_on(
    backend: str, tmp_path: Path, kernel_link: KernelLink
) -> None:
    """A worker in a network namespace, cut off by blackhole routes for 30 s (longer than
    `tcp_user_timeout` and the keepalives: its connections die under it), on a private
    server. Its job runs elsewhere within about a lease; after the heal it opens new
    connections and runs a new job at once, not after the kernel's retransmissions."""
    settings = {"listen_addresses": f"127.0.0.1,{KernelLink.HOST}"}
    with private_harness(tmp_path, settings) as (harness, cluster):
        hba = cluster.data / "pg_hba.conf"
        hba.write_text(hba.read_text() + f"host all all {KernelLink.PEER}/32 trust\n")
        harness.sql("SELECT pg_reload_conf()")
        through = harness.url.replace("127.0.0.1", KernelLink.HOST)
        harness.launcher = kernel_link.launcher()
        cut_off = harness.start_worker(settings=PARTITION, url=through)
        harness.launcher = []
        job_id = harness.enqueue("hold_first", {"seconds": 120})
        harness.wait_for(lambda: harness.started_file(job_id, 1).exists(), 15, "attempt 1")
        other = harness.start_worker(settings=PARTITION)

        kernel_link.cut()
        cut_at = time.time()
        done = harness.wait_status(job_id, "succeeded", LEASE + 15)
        last = done["executions"][-1]
        assert last["worker_id"] == other.id, done["executions"]
        taken_over_after = parse_ts(str(last["started_at"])) - cut_at
        assert taken_over_after < LEASE + 3.0, taken_over_after
        untrusted = first_event(cut_off, "leases_untrusted")
        assert untrusted is not None
        fenced_after = parse_ts(str(untrusted["ts"])) - cut_at
        harness.wait_for(lambda: time.time() - cut_at > 30, 40, "the partition's 30 s")

        other.kill()
        ran_after = carries_on_after_heal(harness, kernel_link.heal, cut_off, within=15.0)
        print(
            f"kernel partition: fenced {fenced_after:.2f} s, taken over {taken_over_after:.2f} s"
            f" after the cut; a new job ran {ran_after:.2f} s after a 30 s cut healed"
        )
