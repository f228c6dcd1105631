"""The chaos runner's network and failover faults: the fault families past one server
reached directly (`python -m tests.soak.chaos --faults failover|partition|slow-link`).

- `failover`: the queue lives on a `tests.pg_replication.StreamingPair` (a primary and
  a streaming hot standby, synchronous or asynchronous: `--replication`), and every
  worker, the runner's enqueues, cancels and checks reach it through the pair's
  multi-host URL (`target_session_attrs=read-write`). A `failover` fault cuts the
  standby off for `--failover-cut` seconds (it stops receiving: asynchronous commits go
  on without it, synchronous ones wait), stops the primary (`pg_ctl stop -m
  immediate`), promotes the standby `--failover-outage` seconds later, then puts a fresh
  standby in the old primary's place (`StreamingPair.rejoin`). It runs on a thread of
  its own, so that the runner goes on meanwhile; the next one is drawn no sooner than
  `--failover-gap` seconds after the last one's standby rejoined.
- `partition`: every worker reaches the database through a `tests.faultproxy.FaultProxy`
  of its slot's own; the fault cuts one running worker's proxy (nothing flows, nothing
  closes) for a seeded 25-100 % of `--partition-max` seconds, then heals it.
- `slow-link`: the same proxies; a seeded `--slow-share` of the slots are slow all run
  long (`--slow-ms` each way), and the fault makes one more running worker's link slow
  for 5-20 s.

What a fault family changes in the checks (`tests/soak/chaos_checks.py`'s Checker):
asynchronous failovers lose what the standby had not received; `loss_windows` says when
such a commit can have been made, and the checker counts a loss inside a window (an
acknowledged enqueue missing, an attempt that ran whose claim the new primary never
had, or whose execution id it issued again to another worker) instead of failing the
run; outside every window, or with synchronous replication, each is a violation.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.faultproxy import FaultProxy
from tests.soak.chaos_config import Fault

if TYPE_CHECKING:
    from tests.pg_replication import StreamingPair
    from tests.soak.chaos_run import ChaosRun
    from tests.soak.chaos_workers import WorkerProc

FAMILIES = ("process", "failover", "partition", "slow-link", "nats")
"""`--faults`: one family, or several joined by commas (not `failover` with a proxy
family: a proxy stands in front of one server, the multi-host URL names two). `nats`:
the workers on a three-node JetStream cluster, its nodes hurt or cut off from each other
(`chaos_nats.py`)."""
FAMILY_WEIGHTS: dict[str, dict[str, float]] = {
    "nats": {"nats_leader": 1.0, "nats_freeze": 1.0, "nats_partition": 1.0, "cancel": 0.3},
    "failover": {"failover": 1.0, "cancel": 0.3},
    "partition": {"partition": 3.0, "cancel": 1.0},
    "slow-link": {"slow_link": 3.0, "cancel": 1.0},
}
"""The weights of each family's fault kinds (`process` is `ChaosConfig.fault_weights`)."""
LINK_FAULTS = ("failover", "partition", "slow_link")
PROXY_FAMILIES = frozenset({"partition", "slow-link"})
LAG_TOLERANCE = 1.0
"""Seconds before a failover's cut (or, without a cut, its stop) in which an
asynchronous commit may still not have reached the standby: the loss window opens this
early."""
CLAIM_TOLERANCE = 2.0
"""Seconds after the stop in which an attempt whose claim committed just before it may
still begin to run (a worker's slot starts the task after the claim returned)."""


def parse_families(text: str) -> tuple[str, ...]:
    """`process`, `failover,process`...: the families named, each known, in order."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FAMILIES]
    if not names or unknown:
        raise SystemExit(f"--faults: {', '.join(unknown) or 'none'}: one of {', '.join(FAMILIES)}")
    if "failover" in names and PROXY_FAMILIES & set(names):
        raise SystemExit("--faults: failover does not combine with partition or slow-link")
    return names


def family_weights(families: tuple[str, ...], process: dict[str, float]) -> dict[str, float]:
    """The fault kinds' weights for a run of `families` (summed where two share one)."""
    weights: dict[str, float] = {}
    for family in families:
        for kind, weight in (process if family == "process" else FAMILY_WEIGHTS[family]).items():
            weights[kind] = weights.get(kind, 0.0) + weight
    return weights


@dataclass
class Span:
    """A stretch of time a slot's link was cut or slow (wall clock; `end` inf while on)."""

    start: float
    end: float = math.inf
    worker: int | None = None  # WorkerProc.number of the worker in the slot then

    def covers(self, at: float, margin: float = 0.0) -> bool:
        return self.start - margin <= at <= self.end + margin


@dataclass
class FailoverRecord:
    """When one failover's steps happened (wall clock)."""

    number: int
    cut_at: float | None = None
    stopped_at: float | None = None
    promoted_at: float | None = None
    rejoined_at: float | None = None
    outage_s: float = 0.0

    def loss_window(self) -> tuple[float, float] | None:
        """When a commit lost by this failover can have been made (asynchronous)."""
        if self.stopped_at is None:
            return None
        opened = (self.cut_at if self.cut_at is not None else self.stopped_at) - LAG_TOLERANCE
        return opened, self.stopped_at

    def claim_window(self) -> tuple[float, float] | None:
        """When an attempt whose claim this failover lost can have started."""
        window = self.loss_window()
        if window is None:
            return None
        return window[0], window[1] + CLAIM_TOLERANCE


@dataclass
class LinkState:
    """What the runner did to one slot's link."""

    proxy: FaultProxy
    cuts: list[Span] = field(default_factory=list)
    slow: list[Span] = field(default_factory=list)
    always_slow: bool = False


class LinkFaults:
    """The failover, partition and slow-link faults of one chaos run."""

    def __init__(self, run: ChaosRun, pair: StreamingPair | None = None) -> None:
        self.run = run
        self.pair = pair
        self.families = parse_families(run.config.faults)
        self.links: dict[int, LinkState] = {}
        self.failovers: list[FailoverRecord] = []
        self._thread: threading.Thread | None = None
        self._errors: list[BaseException] = []
        self._next_failover = 0.0
        self.db_lock = threading.Lock()
        """Held by the runner around its own writes, and by a failover around the moment
        it cuts the standby off or stops the primary: no write of the runner's is in
        flight then, so one that failed stored nothing."""
        slots = run.config.workers
        share = run.config.slow_share if "slow-link" in self.families else 0.0
        count = min(slots, round(share * slots))
        self.slow_slots = set(random.Random(f"slow-{run.config.seed}").sample(range(slots), count))

    # -- proxies -------------------------------------------------------------------------
    @property
    def proxied(self) -> bool:
        return bool(PROXY_FAMILIES & set(self.families))

    def url_for(self, slot: int) -> str | None:
        """The URL a worker in `slot` uses: its slot's proxy (started on first use), or
        None (the queue's own URL) when the run has no proxy family."""
        if not self.proxied:
            return None
        state = self.links.get(slot)
        if state is None:
            proxy = FaultProxy.in_front_of(self.run.url).start()
            state = LinkState(proxy, always_slow=slot in self.slow_slots)
            if state.always_slow:
                ms = self.run.config.slow_ms
                proxy.delay(ms, ms)
                state.slow.append(Span(time.time()))
            self.links[slot] = state
        return state.proxy.url_for(self.run.url)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(120)
        for state in self.links.values():
            state.proxy.close()

    # -- checks of the main loop -----------------------------------------------------------
    def raise_errors(self) -> None:
        """A failover thread that failed stops the run (in the main thread)."""
        if self._errors:
            raise RuntimeError(f"a failover failed: {self._errors[0]!r}") from self._errors[0]

    def start_chaos(self, now: float) -> None:
        self._next_failover = now + self.run.config.failover_gap / 2

    def end_chaos(self) -> None:
        """Faults stop: the failover under way ends (its standby rejoined), cuts heal,
        slow links turn fast again (except the slots slow all run long)."""
        if self._thread is not None:
            self._thread.join(180)
            if self._thread.is_alive():
                raise RuntimeError("a failover did not end within 180 s")
        self.raise_errors()
        for slot, state in self.links.items():
            if state.cuts and state.cuts[-1].end == math.inf:
                self.heal(slot)
            if not state.always_slow and state.slow and state.slow[-1].end == math.inf:
                self.fast(slot)

    # -- failover --------------------------------------------------------------------------
    def fault_failover(self) -> None:
        run = self.run
        outage = run.schedule.uniform(0.8, 1.2) * run.config.failover_outage
        busy = self._thread is not None and self._thread.is_alive()
        if self.pair is None or busy or time.monotonic() < self._next_failover:
            return  # passed over, not skipped: a failover is under way or was just now
        record = FailoverRecord(len(self.failovers) + 1, outage_s=round(outage, 3))
        self.failovers.append(record)
        self._thread = threading.Thread(
            target=self._failover, args=(record,), name="chaos-failover", daemon=True
        )
        self._thread.start()

    def _failover(self, record: FailoverRecord) -> None:
        try:
            self._steps(record)
        except Exception as exc:  # noqa: BLE001 - the main loop raises it
            self._errors.append(exc)
        finally:
            self._next_failover = time.monotonic() + self.run.config.failover_gap

    def _steps(self, record: FailoverRecord) -> None:
        run, pair, c = self.run, self.pair, self.run.config
        assert pair is not None
        synchronous = pair.synchronous
        if c.failover_cut > 0:
            with self.db_lock:
                if synchronous:  # commits wait from the cut on: the runner writes none
                    run.pg_down = True
                    run.outages.append([time.time(), math.inf])
                    run.outage_kinds.append("failover")
                pair.cut_replication()
                record.cut_at = time.time()
            run.say(f"failover {record.number}: standby cut off for {c.failover_cut:g} s")
            time.sleep(c.failover_cut)
        with self.db_lock:
            if not run.pg_down:
                run.pg_down = True
                run.outages.append([time.time(), math.inf])
                run.outage_kinds.append("failover")
            record.stopped_at = pair.stop_primary("immediate")
        run.drop_pg()
        run.say(f"failover {record.number}: primary stopped, promoting in {record.outage_s} s")
        time.sleep(record.outage_s)
        _sent, promoted = pair.promote()
        record.promoted_at = promoted
        run.outages[-1][1] = promoted
        run.pg_down = False
        detail = {
            "number": record.number,
            "replication": "sync" if synchronous else "async",
            "outage_s": round(promoted - record.stopped_at, 3),
        }
        run.faults.append(Fault("failover", record.stopped_at, None, None, detail))
        run.say(f"failover {record.number}: standby promoted ({detail['outage_s']} s)")
        pair.rejoin()
        record.rejoined_at = time.time()
        run.say(f"failover {record.number}: a new standby streams from the new primary")

    # -- partitions ------------------------------------------------------------------------
    def pick(self, kind: str, eligible: Any) -> WorkerProc | None:
        targets = [p for p in self.run.targets() if p.slot in self.links and eligible(p)]
        if not targets:
            self.run.skipped[kind] += 1
            return None
        return self.run.rng.choice(targets)

    def fault_partition(self) -> None:
        run = self.run
        seconds = run.schedule.uniform(0.25, 1.0) * run.config.partition_max
        proc = self.pick("partition", lambda p: not self.is_cut(p.slot))
        if proc is None:
            return
        state = self.links[proc.slot]
        state.proxy.cut()
        span = Span(time.time(), worker=proc.number)
        state.cuts.append(span)
        run.faults.append(
            Fault("partition", span.start, proc.number, proc.id, {"seconds": round(seconds, 3)})
        )
        run.say(f"partition: worker #{proc.number} ({proc.id}) cut off for {seconds:.2f} s")
        run.after(seconds, lambda: self.heal(proc.slot))

    def is_cut(self, slot: int) -> bool:
        state = self.links.get(slot)
        return bool(state and state.cuts and state.cuts[-1].end == math.inf)

    def heal(self, slot: int) -> None:
        state = self.links[slot]
        if not self.is_cut(slot):
            return
        state.proxy.heal()
        state.cuts[-1].end = time.time()
        self.run.say(f"partition healed: slot {slot}")

    # -- slow links ------------------------------------------------------------------------
    def is_slow(self, slot: int) -> bool:
        state = self.links.get(slot)
        return bool(state and state.slow and state.slow[-1].end == math.inf)

    def fault_slow_link(self) -> None:
        run = self.run
        seconds = run.schedule.uniform(5.0, 20.0)
        proc = self.pick("slow_link", lambda p: not self.is_slow(p.slot))
        if proc is None:
            return
        state, ms = self.links[proc.slot], run.config.slow_ms
        state.proxy.delay(ms, ms)
        span = Span(time.time(), worker=proc.number)
        state.slow.append(span)
        detail = {"seconds": round(seconds, 3), "ms_each_way": ms}
        run.faults.append(Fault("slow_link", span.start, proc.number, proc.id, detail))
        run.say(f"slow link: worker #{proc.number} ({proc.id}) {ms:g} ms each way for "
                f"{seconds:.1f} s")  # fmt: skip
        run.after(seconds, lambda: self.fast(proc.slot))

    def fast(self, slot: int) -> None:
        state = self.links[slot]
        if not self.is_slow(slot) or state.always_slow:
            return
        state.proxy.delay(0, 0)
        state.slow[-1].end = time.time()

    # -- what the checks ask ---------------------------------------------------------------
    def spans(self, slot: int, kind: str) -> list[Span]:
        state = self.links.get(slot)
        if state is None:
            return []
        return state.cuts if kind == "partition" else state.slow

    def slow_at(self, slot: int, at: float) -> bool:
        return any(s.covers(at) for s in self.spans(slot, "slow_link"))

    def loss_windows(self) -> list[tuple[float, float]]:
        """Asynchronous replication: when a commit that a failover lost can have been made
        (none with synchronous replication: nothing acknowledged may be lost)."""
        if self.pair is None or self.pair.synchronous:
            return []
        return [w for r in self.failovers if (w := r.loss_window()) is not None]

    def claim_windows(self) -> list[tuple[float, float]]:
        if self.pair is None or self.pair.synchronous:
            return []
        return [w for r in self.failovers if (w := r.claim_window()) is not None]
