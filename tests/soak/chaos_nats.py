"""The chaos runner's `nats` family (`python -m tests.soak.chaos --faults nats[,process]`):
the run's workers take their jobs' wake-ups from a private three-node JetStream cluster
(`tests.nats_harness.ProxiedCluster`: its routes through a proxy for each pair of nodes,
the stream made with three replicas), the runner
publishes a wake-up for each job it enqueues that can run at once (as `App.enqueue`
does), and the cluster's nodes are hurt beside the database's faults:

- `nats_leader`: the node leading the stream SIGKILLed, started again 2-8 s later
  (seeded); JetStream elects another leader meanwhile (~5 s);
- `nats_freeze`: a node SIGSTOPped for 3-10 s (seeded), then SIGCONT: its sockets stay
  open, its clients hear nothing;
- `nats_partition`: a node cut off from the other two for 3-10 s (seeded), then healed:
  its routes reset and each reconnection refused (`ProxiedCluster.partition`), while it
  keeps serving its clients, who reach it directly; the two others keep the quorum.
  The fault log says how many routes the node had just before the heal (0: the
  partition held) and how soon after it had both back (`routes_back_s`).

One node at most is down, frozen or cut off at a time (a three-node cluster keeps its quorum with
two); a fault drawn while one is, is skipped (`faults_skipped`). The checks are the run's
own (every invariant, effects exactly once: a wake-up never carries a right to run);
this family adds the pauses around each fault (`figures`): how long the jobs enqueued
from 1 s before it to 5 s after it ended waited to start, against the jobs far from any
fault, and the longest stretch in it without a job starting.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from heartq.event_stream import EventStream
from heartq.model import NewJob
from tests.soak.chaos_config import Fault

if TYPE_CHECKING:
    from heartq.transport.nats import NatsTransport
    from tests.nats_harness import ProxiedCluster
    from tests.soak.chaos_checks import Checker
    from tests.soak.chaos_run import ChaosRun

NATS_FAULTS = ("nats_leader", "nats_freeze", "nats_partition")
AROUND = 5.0
"""Seconds after a fault ended whose enqueues still count as around it."""
ROUTES_BACK = 30.0
"""Seconds after a partition's heal its node's routes are watched coming back."""


class NatsFamily:
    """The cluster, the runner's publisher and the faults of one chaos run."""

    def __init__(self, run: ChaosRun) -> None:
        from heartq.transport.nats import NatsTransport
        from tests import nats_harness

        self.run = run
        self.cluster: ProxiedCluster = nats_harness.ProxiedCluster()
        self.url = f"{self.cluster.servers}?{nats_harness.names()}&replicas=3"
        self.stream = self.url.split("stream=")[1].split("&")[0]
        self.publisher: NatsTransport = NatsTransport(
            self.url, run.store.link.deployment_id, EventStream()
        )
        self.immediate: dict[str, float] = {}
        """Jobs whose wake-up was handed over at their enqueue: when it returned."""
        self.spans: list[tuple[str, float, float]] = []
        """(kind, from, to) of each fault, wall clock (`to` inf while on)."""
        self.records: list[Fault] = []
        """Each fault's record in the run's fault log, in the order of `spans`."""
        self._hurt: str | None = None  # the node down, frozen or cut off now

    # -- the run's hooks -----------------------------------------------------------
    def worker_args(self) -> list[str]:
        return ["--transport", self.url]

    def published(self, ids: Sequence[str], jobs: Sequence[NewJob], acked: float) -> None:
        """Wake-ups for the jobs just stored that can run now (not delayed, no key, no
        dependency: what `App.enqueue` publishes), in the background."""
        due = [
            (job_id, job)
            for job_id, job in zip(ids, jobs, strict=True)
            if job.delay <= 0 and job.run_at is None and job.concurrency_key is None
            and not job.depends_on
        ]  # fmt: skip
        for job_id, job in due:
            if job.rate_key is None:  # a rated job waits for its key: not counted
                self.immediate[job_id] = acked
        self.publisher.publish_later([(job_id, job.queue) for job_id, job in due])

    def end_chaos(self) -> None:
        """Faults stop: the node down starts, the frozen one thaws, a partition heals."""
        if self._hurt is not None:
            node = self.cluster.node(self._hurt)
            if self.cluster.partitioned == node.name:
                self._heal_partition(node.name, self.records[-1].detail)
                return
            if node.frozen:
                node.thaw()
            elif not node.running:
                self.cluster.restart(node)
            self._healed()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.publisher.close()
        self.cluster.close()

    # -- faults --------------------------------------------------------------------
    def fault_nats_leader(self) -> None:
        leader = None if self._hurt else self.cluster.stream_leader(self.stream)
        if leader is None:
            self.run.skipped["nats_leader"] += 1
            return
        node = self.cluster.node(leader)
        down = self.run.rng.uniform(2.0, 8.0)
        at = time.time()
        node.kill()
        self._hurt = leader
        detail = {"node": leader, "down_s": round(down, 2)}
        self._record(Fault("nats_leader", at, None, None, detail))
        self.run.say(f"NATS: stream leader {leader} killed for {down:.1f} s")

        def restart() -> None:
            if self._hurt == leader and not node.running:
                self.cluster.restart(node)
                self._healed()

        self.run.after(down, restart)

    def fault_nats_freeze(self) -> None:
        if self._hurt is not None:
            self.run.skipped["nats_freeze"] += 1
            return
        node = self.run.rng.choice(self.cluster.nodes)
        seconds = self.run.rng.uniform(3.0, 10.0)
        at = time.time()
        node.freeze()
        self._hurt = node.name
        self._record(
            Fault("nats_freeze", at, None, None, {"node": node.name, "frozen_s": round(seconds, 2)})
        )
        self.run.say(f"NATS: node {node.name} frozen for {seconds:.1f} s")

        def thaw() -> None:
            if self._hurt == node.name and node.frozen:
                node.thaw()
                self._healed()

        self.run.after(seconds, thaw)

    def fault_nats_partition(self) -> None:
        if self._hurt is not None:
            self.run.skipped["nats_partition"] += 1
            return
        node = self.run.rng.choice(self.cluster.nodes)
        seconds = self.run.rng.uniform(3.0, 10.0)
        at = time.time()
        self.cluster.partition(node.name)
        self._hurt = node.name
        detail: dict[str, Any] = {"node": node.name, "seconds": round(seconds, 2)}
        self._record(Fault("nats_partition", at, None, None, detail))
        self.run.say(f"NATS: node {node.name} cut off from the others for {seconds:.1f} s")

        def heal() -> None:
            if self._hurt == node.name and self.cluster.partitioned == node.name:
                self._heal_partition(node.name, detail)

        self.run.after(seconds, heal)

    def _heal_partition(self, name: str, detail: dict[str, Any]) -> None:
        """Heal, with the node's routes just before (0: the partition held) in `detail`,
        then watch them come back."""
        detail["routes_at_heal"] = self._routes(name)
        self.cluster.heal()
        self._healed()
        self._watch_routes(name, detail, time.monotonic())

    def _routes(self, name: str) -> int | None:
        """How many routes the node has now (its `routez`), None if it did not answer."""
        try:
            return int(self.cluster.node(name).monitor("routez").get("num_routes", 0))
        except OSError:
            return None

    def _watch_routes(self, name: str, detail: dict[str, Any], healed: float) -> None:
        """Record in `detail` how soon after the heal the node had a route to each peer
        (`routes_back_s`; None if not within `ROUTES_BACK`), checking on the run's timers."""
        peers = len(self.cluster.nodes) - 1
        if self._routes(name) == peers:
            detail["routes_back_s"] = round(time.monotonic() - healed, 2)
        elif time.monotonic() - healed > ROUTES_BACK:
            detail["routes_back_s"] = None
        else:
            self.run.after(0.2, lambda: self._watch_routes(name, detail, healed))

    def _routes_figures(self, record: Fault) -> dict[str, Any]:
        """A partition's routes: none at the heal, all back how soon after it (or, for
        one healed as the run ended, whether they were back when it was reported)."""
        if "routes_at_heal" not in record.detail:
            return {}
        out = {"routes_at_heal": record.detail["routes_at_heal"]}
        if "routes_back_s" in record.detail:
            out["routes_back_s"] = record.detail["routes_back_s"]
        else:
            node = record.detail["node"]
            out["routes_back_at_end"] = self._routes(node) == len(self.cluster.nodes) - 1
        return out

    def _record(self, fault: Fault) -> None:
        self.spans.append((fault.kind, fault.at, float("inf")))
        self.records.append(fault)
        self.run.faults.append(fault)

    def _healed(self) -> None:
        kind, start, _ = self.spans[-1]
        self.spans[-1] = (kind, start, time.time())
        self._hurt = None

    # -- figures -------------------------------------------------------------------
    def figures(self, checker: Checker) -> dict[str, Any]:
        """The waits around each fault, against those far from any (`AROUND`)."""
        side = self.run.side
        first: dict[str, float] = {}
        for (job_id, _execution), start in side.starts.items():
            first[job_id] = min(first.get(job_id, float("inf")), float(start["t"]))
        waits = {j: first[j] - acked for j, acked in self.immediate.items() if j in first}

        def near(at: float) -> bool:
            return any(lo - 1 <= at <= hi + AROUND for _k, lo, hi in self.spans)

        calm = sorted(w for j, w in waits.items() if not near(self.immediate[j]))
        faults = []
        for (kind, lo, hi), record in zip(self.spans, self.records, strict=True):
            around = [w for j, w in waits.items() if lo - 1 <= self.immediate[j] <= hi + AROUND]
            starts = sorted(t for t in first.values() if lo <= t <= hi + AROUND)
            edges = [lo, *starts, hi + AROUND]
            faults.append({
                "kind": kind,
                "node": record.detail["node"],
                "seconds": round(hi - lo, 2),
                "jobs": len(around),
                "max_wait_s": round(max(around, default=0.0), 3),
                "over_2s": sum(1 for w in around if w > 2.0),
                # with nothing enqueued around it (after the enqueue window), no start
                # is missed: none to tell
                "longest_without_a_start_s": round(
                    max(b - a for a, b in itertools.pairwise(edges)), 3
                ) if around else None,
                **self._routes_figures(record),
            })  # fmt: skip
        _ = checker
        return {
            "nats": {
                "wake_ups": len(self.immediate),
                "calm_wait_s": {
                    "n": len(calm),
                    "p50": round(calm[len(calm) // 2], 3) if calm else None,
                    "max": round(calm[-1], 3) if calm else None,
                },
                "by_kind": by_kind(faults),
                "faults": faults,
            }
        }


def by_kind(faults: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each kind's faults summed up: how many, how long, the waits around them."""
    out: dict[str, dict[str, Any]] = {}
    for kind in NATS_FAULTS:
        mine = [f for f in faults if f["kind"] == kind]
        if not mine:
            continue
        waits = sorted(f["max_wait_s"] for f in mine if f["jobs"])
        gaps = sorted(
            f["longest_without_a_start_s"] for f in mine
            if f["longest_without_a_start_s"] is not None
        )  # fmt: skip
        out[kind] = {
            "n": len(mine),
            "seconds": [min(f["seconds"] for f in mine), max(f["seconds"] for f in mine)],
            "jobs_around": sum(f["jobs"] for f in mine),
            "over_2s": sum(f["over_2s"] for f in mine),
            "max_wait_s": span(waits),
            "longest_without_a_start_s": span(gaps),
        }
    return out


def span(values: list[float]) -> dict[str, float] | None:
    """Least, median and most of sorted `values` (None if there are none)."""
    if not values:
        return None
    return {"min": values[0], "p50": values[len(values) // 2], "max": values[-1]}


def nats_report(fig: dict[str, Any]) -> list[str]:
    """The family's lines of the run's report."""
    nats = fig.get("nats")
    if not nats:
        return []
    lines = [
        f"  NATS          {nats['wake_ups']} wake-ups; jobs far from a fault waited "
        f"p50 {nats['calm_wait_s']['p50']} s, max {nats['calm_wait_s']['max']} s",
    ]
    for kind, k in nats.get("by_kind", {}).items():
        lines.append(
            f"    {kind:14} {k['n']} ({k['seconds'][0]}-{k['seconds'][1]} s): {k['jobs_around']} "
            f"jobs around them, {k['over_2s']} waited over 2 s; longest wait per fault "
            f"{k['max_wait_s']}, longest without a start {k['longest_without_a_start_s']}"
        )
    for f in nats["faults"]:
        routes = ""
        if "routes_at_heal" in f:
            back = (
                f"all back in {f['routes_back_s']} s" if "routes_back_s" in f
                else f"all back at the run's end: {f['routes_back_at_end']}"
            )  # fmt: skip
            routes = f", routes at the heal {f['routes_at_heal']}, {back}"
        lines.append(
            f"    {f['kind']:14} {f['node']} {f['seconds']:6} s: {f['jobs']} jobs around it "
            f"waited at most {f['max_wait_s']} s ({f['over_2s']} over 2 s), longest without "
            f"a start {f['longest_without_a_start_s']} s{routes}"
        )
    return lines
