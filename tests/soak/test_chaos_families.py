"""The chaos runner's network fault families, short: a failover (synchronous, then
asynchronous replication), partitions and slow links, each a short run of real workers
on PostgreSQL (`tests/soak/chaos.py --faults ...`, `tests/soak/chaos_links.py`), and the
NATS family's three-node cluster hurt under the workers (`tests/soak/chaos_nats.py`).

Each run checks every invariant itself (I1-I6, effects exactly once, pipelines, rate
limits); here: that the faults really happened and did what they say (a failover was
carried on from by every worker, an asynchronous one lost something and the checks
counted it, a partition's jobs ran elsewhere and its worker claimed again after the
heal), and that no live worker was taken for dead (no anomaly). The 20-minute runs of
each family are in docs/RELIABILITY.md ("Failover, partitions and slow links in the
chaos runner").
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.conftest import BACKENDS
from tests.soak.chaos import run_chaos
from tests.soak.chaos_config import ChaosConfig
from tests.soak.chaos_report import format_report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
postgres_only = pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL only")

SHORT = ChaosConfig(
    backend="postgres",
    duration=20.0,
    workers=4,
    jobs=200,
    seed=20261123,
    drain_timeout=60.0,
    failover_gap=8.0,
    verbose=False,
)


def run(**changes: Any) -> tuple[dict[str, Any], str]:
    figures = run_chaos(dataclasses.replace(SHORT, **changes))
    report = format_report(figures)
    print(report)  # shown with -rP
    return figures, report


# Outside the default suite (`pytest -m soak`), to keep it under ten minutes: their
# scenarios run there one at a time (tests/soak/test_failover_short.py: a synchronous
# failover loses nothing acknowledged and spends no retry; tests/integration/
# test_partitions.py).
@pytest.mark.soak
@postgres_only
@pytest.mark.parametrize("replication", ["sync", "async"])
def test_failover_mid_run(replication: str) -> None:
    """The primary dies under the fleet and its standby is promoted, more than once:
    synchronous, nothing acknowledged is lost and every invariant holds; asynchronous,
    what the standby had not received is lost (counted inside its window) and every
    invariant holds on what survived."""
    figures, report = run(faults="failover", replication=replication)
    assert figures["ok"], report
    failovers = figures["failovers"]
    assert isinstance(failovers, list) and len(failovers) >= 1, report
    # every worker carried on after the first failover (4 s into the run, jobs flowing;
    # a later one may come when nothing is left to claim)
    assert failovers[0]["workers_without_a_claim"] == 0, report
    losses = figures["failover_losses"]
    assert isinstance(losses, dict)
    if replication == "sync":
        assert not losses, report
        assert not figures["anomalies"], report  # no attempt counted for the failover
    else:
        assert losses.get("acknowledged_enqueues", 0) >= 1, report


@pytest.mark.soak
@postgres_only
def test_partitions() -> None:
    """Workers cut off from the database for seconds (their sockets open, nothing
    flowing): their jobs run elsewhere, they carry on after the heal, and no worker is
    taken for dead while it is reachable."""
    figures, report = run(faults="partition")
    assert figures["ok"], report
    assert not figures["anomalies"], report
    faults = figures["faults"]
    assert isinstance(faults, dict) and faults["partition"] >= 3, report
    latency = figures["detection_latency_s"]
    assert isinstance(latency, dict) and latency["partition"]["n"] >= 1, report
    partitions = figures["partitions"]
    assert isinstance(partitions, dict)
    assert partitions["first_claim_after_heal_s"]["n"] >= 1, report


@pytest.mark.soak  # about 50 s: the slow slots start, claim and drain slowly
@postgres_only
def test_slow_links() -> None:
    """200 ms each way on a quarter of the workers all run long and on others for
    seconds at a time: every invariant holds. A live worker taken for dead on a slow
    link is reported (an anomaly); at these settings (1 s heartbeats, a 6 s lease) it
    still happens now and then, far less since heartbeats ride the lasting session
    (docs/RELIABILITY.md, "Failover, partitions and slow links in the chaos runner": 23
    jobs in 20 minutes with 16 workers, 1,821 before), so that part is an expected
    failure until none is left."""
    figures, report = run(faults="slow-link", heartbeat=1.0, lease=6.0, reclaim=0.5)
    assert figures["ok"], report
    faults = figures["faults"]
    assert isinstance(faults, dict) and faults["slow_link"] >= 2, report
    if figures["anomalies"]:
        pytest.xfail(f"a live worker on a slow link taken for dead: {figures['anomalies'][0]}")


@pytest.mark.soak
def test_a_nats_cluster_hurt_under_the_workers() -> None:
    """The workers on a private three-node JetStream cluster whose stream leader is
    killed, whose nodes freeze or are cut off from the others, on SQLite: every
    invariant holds, each partition really cut its node's routes, and no job
    enqueued around a NATS fault waited much longer than the stale check allows (a lost
    wake-up claimed from the database within `stale_after` and a check). Beside the
    process faults: docs/RELIABILITY.md's ten-minute run."""
    figures, report = run(backend="sqlite", faults="nats", fault_interval=2.0)
    assert figures["ok"], report
    faults = figures["faults"]
    assert isinstance(faults, dict), report
    assert faults["nats_leader"] + faults["nats_freeze"] + faults["nats_partition"] >= 2, report
    nats = figures["nats"]
    assert isinstance(nats, dict) and nats["wake_ups"] > 0, report
    assert all(f.get("routes_at_heal", 0) == 0 for f in nats["faults"]), report
    assert all(f["max_wait_s"] < 5.0 for f in nats["faults"]), report
