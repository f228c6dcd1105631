"""One chaos run, as it goes (`tests/soak/chaos.py`, steps 1-5): the queue and the
ledger, the worker processes and their slots, the stream of jobs, the faults drawn from
the seed (`ProcessFaults`, `chaos_links.LinkFaults`), the monitor that watches for
zombies meanwhile (I1), the drain; then the checker (`chaos_checks`) and the figures
(`chaos_report`)."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from heartq.errors import DependencyNotFound, JobNotFound
from heartq.model import NewJob
from heartq.store import Store, open_store
from tests.soak.chaos_checks import Checker
from tests.soak.chaos_commits import AfterCommitKills
from tests.soak.chaos_config import (
    APP_REF,
    FAULT_KINDS,
    PG_FAULTS,
    POOLS,
    REPO,
    SETTLED,
    TRANSIENT,
    ChaosConfig,
    Fault,
    first_line,
)
from tests.soak.chaos_faults import ProcessFaults
from tests.soak.chaos_horizon import HeldHorizons
from tests.soak.chaos_hostile import HostileFamily, mix_hostile
from tests.soak.chaos_links import LINK_FAULTS, LinkFaults, family_weights
from tests.soak.chaos_nats import NATS_FAULTS, NatsFamily
from tests.soak.chaos_pauses import QueuePauses
from tests.soak.chaos_pipes import Replays
from tests.soak.chaos_plan import job_plan
from tests.soak.chaos_records import Ledger, SideLog
from tests.soak.chaos_report import figures
from tests.soak.chaos_tasks import FIXED_ENV, LEDGER_ENV, LOG_ENV, PROC_QUEUE
from tests.soak.chaos_workers import WorkerProc, unwatched


@contextlib.contextmanager
def fresh_queue(
    config: ChaosConfig, workdir: Path, cluster: Any = None
) -> Iterator[tuple[str, str | None]]:
    """`(url, schema)` of a fresh queue; PostgreSQL schemas are dropped after. `cluster`:
    a `pg_harness.PrivateCluster` to put the schema on."""
    if config.backend == "sqlite":
        url = f"sqlite:///{workdir / 'heartq.db'}"
        yield url, None
        return
    if config.backend != "postgres":
        raise SystemExit(f"unknown backend {config.backend!r}: sqlite or postgres")
    from tests import pg_harness

    with contextlib.ExitStack() as stack:
        if cluster is not None:
            base = cluster.url
        else:
            base = config.pg_url or stack.enter_context(pg_harness.server_url())
        url = stack.enter_context(pg_harness.schema_url(base))
        schema = url.rsplit("schema=", 1)[1]
        yield url, schema


class ChaosRun:
    def __init__(
        self,
        config: ChaosConfig,
        workdir: Path,
        url: str,
        schema: str | None,
        cluster: Any = None,
        pair: Any = None,
    ) -> None:
        """`cluster`: the run's own `pg_harness.PrivateCluster` (`pg_restart` faults);
        `pair`: the run's `pg_replication.StreamingPair` (`failover` faults)."""
        self.config = config
        self.dir = workdir
        self.url = url
        self.schema = schema
        self.cluster = cluster
        self.store: Store = open_store(url)
        self.store.link.migrate()
        self.ledger = Ledger(config.backend, url, schema)
        self.ledger.create()
        self.outages: list[list[float]] = []  # [stopped at, answering again at (or inf)]
        self.outage_kinds: list[str] = []  # the fault of each outage
        self.acked_at: dict[str, float] = {}  # job id: when its enqueue returned
        self.plan_pos = 0  # jobs of the plan enqueued, or left out (`not_enqueued`)
        self.not_enqueued: list[str] = []
        self.pg_down = False
        self.side = SideLog(workdir / "attempts.jsonl")
        # the kinds and times of faults come from the seed alone; targets and restarts
        # from a second stream (which workers are up depends on timing)
        self.schedule = random.Random(f"faults-{config.seed}")
        self.rng = random.Random(f"targets-{config.seed}")
        self.procs: list[WorkerProc] = []
        self.slots: dict[int, WorkerProc] = {}
        self.faults: list[Fault] = []
        self.skipped: Counter[str] = Counter()
        self.enqueued: list[str] = []
        self.kind_of: dict[str, str] = {}
        self.args_of: dict[str, dict[str, Any]] = {}
        self.cancel_asked: dict[str, str] = {}
        self.deps_of: dict[str, list[str]] = {}
        self.zombies: dict[tuple[str, int], str] = {}
        self.zombie_deaths: dict[tuple[str, int], float] = {}
        """When each zombie's worker died (wall clock): the checker says how long after it
        the job left `running`, and how."""
        self.violations: list[str] = []
        self.anomalies: list[str] = []
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._numbers = itertools.count()
        self._pg: Any = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env[LOG_ENV] = str(self.side.path)
        self.env[LEDGER_ENV] = self.ledger.table
        self.env.pop("PYTHONFAULTHANDLER", None)
        self.timeline: dict[str, float] = {}
        self.links = LinkFaults(self, pair)
        self.nats = NatsFamily(self) if "nats" in self.links.families else None
        self.process_faults = ProcessFaults(self)
        self.pauses = QueuePauses(self)
        self.horizons = HeldHorizons(self) if config.backend == "postgres" else None
        self.hostile = HostileFamily(self) if config.hostile else None
        self.replays = Replays(self)
        self.commits = AfterCommitKills(self)
        self.env[FIXED_ENV] = str(self.replays.fixed_dir)

    # -- logging ----------------------------------------------------------------------
    def say(self, text: str) -> None:
        if self.config.verbose:
            elapsed = time.monotonic() - self.timeline.get("t0", time.monotonic())
            print(f"[{elapsed:7.2f}s] {text}", file=sys.stderr, flush=True)

    # -- workers ----------------------------------------------------------------------
    def start_worker(
        self, slot: int, name: str, queues: str | None = None, url: str | None = None
    ) -> WorkerProc:
        """A worker in `slot`; `url`: another way to the queue's database (a
        `tests.faultproxy.FaultProxy` in front of it), default the queue's URL."""
        c = self.config
        number = next(self._numbers)
        pool = POOLS[slot % len(POOLS)]
        if queues is None:
            queues = f"default,{PROC_QUEUE}" if pool == "process" else "default"
        app_name = f"hqc_{self.schema}_{number}" if self.schema else f"hqc_{number}"
        argv = [
            sys.executable, "-m", "heartq", "worker", APP_REF,
            "--url", url or self.links.url_for(slot) or self.url,
            "--name", name, "--pool", pool, "--queues", queues,
            "--concurrency", str(c.concurrency), "--prefetch", str(c.prefetch),
            "--heartbeat-interval", f"{c.heartbeat:g}", "--lease", f"{c.lease:g}",
            "--reclaim-interval", f"{c.reclaim:g}", "--liveness-interval", f"{c.liveness:g}",
            "--poll-interval", f"{c.poll:g}", "--shutdown-timeout", f"{c.shutdown_timeout:g}",
            "--log-format", "json", "--log-level", "debug",
            *(self.nats.worker_args() if self.nats is not None else []),
        ]  # fmt: skip
        env = dict(self.env, PGAPPNAME=app_name)
        log_path = self.dir / f"worker-{number}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # cleanup kills its group: forkserver, children
            )
        proc = WorkerProc(number, slot, name, pool, popen, log_path, app_name, time.time())
        self.procs.append(proc)
        self.slots[slot] = proc
        self.say(f"start worker #{number} slot {slot} name {name} pool {pool} pid {proc.pid}")
        return proc

    def replacement_name(self, slot: int) -> str:
        """The slot's stable name (reconciliation), or a new one (seeded coin)."""
        if self.rng.random() < 0.5:
            return f"slot-{slot}"
        return f"slot-{slot}-r{next(self._seq)}"

    def restart_slot(self, slot: int) -> None:
        current = self.slots.get(slot)
        if current is not None and current.alive() and current.state != "exited":
            return
        self.start_worker(slot, self.replacement_name(slot))

    def by_id(self, worker_id: str | None) -> WorkerProc | None:
        for proc in self.procs:
            if proc.read_id() is not None and proc.id == worker_id:
                return proc
        return None

    def refresh_workers(self) -> None:
        for proc in self.procs:
            if proc.state == "starting" and proc.read_id() is not None:
                proc.state = "running"
            if proc.state != "exited" and not proc.alive():
                if proc.state == "starting" and proc.id is None and proc.killed_at is None:
                    self.violations.append(
                        f"worker #{proc.number} exited at startup: {self.tail(proc)}"
                    )
                elif proc.state in ("running", "frozen", "retiring"):
                    self.violations.append(
                        f"worker #{proc.number} ({proc.id}) died on its own, exit status "
                        f"{proc.popen.returncode}: {self.tail(proc)}"
                    )
                was_running = proc.state != "terminating"
                proc.state = "exited"
                if was_running and self.slots.get(proc.slot) is proc:
                    self.after(0.5, lambda slot=proc.slot: self.restart_slot(slot))
            if proc.exited_at is None and not proc.alive():
                proc.exited_at = proc.killed_at or time.time()

    def tail(self, proc: WorkerProc, lines: int = 15) -> str:
        with contextlib.suppress(FileNotFoundError):
            return "\n".join(proc.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def targets(self) -> list[WorkerProc]:
        return [p for p in self.procs if p.state == "running" and p.alive()]

    # -- timers -----------------------------------------------------------------------
    def after(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), action))

    def run_timers(self, until: float | None = None) -> None:
        now = time.monotonic() if until is None else until
        while self._timers and self._timers[0][0] <= now:
            _, _, action = heapq.heappop(self._timers)
            action()

    # -- faults -----------------------------------------------------------------------
    def inject(self) -> None:
        c = self.config
        weights = family_weights(self.links.families, c.fault_weights)
        kinds = [k for k in FAULT_KINDS if weights.get(k, 0) > 0]
        if c.backend != "postgres":
            kinds = [k for k in kinds if k not in PG_FAULTS]
        if self.cluster is None:
            kinds = [k for k in kinds if k != "pg_restart"]
        if not kinds:
            return
        kind = self.schedule.choices(kinds, [weights[k] for k in kinds])[0]
        family: Any = self.links if kind in LINK_FAULTS else self.process_faults
        if kind == "horizon":
            family = self.horizons
        if kind == "pause":
            family = self.pauses
        if kind in NATS_FAULTS:
            family = self.nats
        getattr(family, f"fault_{kind}")()

    def pg(self) -> Any:
        """The runner's own PostgreSQL session (autocommit)."""
        if self._pg is None:
            import psycopg

            from heartq.store.postgres.connection import parse_url

            self._pg = psycopg.connect(parse_url(self.url)[0], autocommit=True, connect_timeout=5)
        return self._pg

    def drop_pg(self) -> None:
        """Forget the runner's session (the server ended it): the next use reconnects."""
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()
            self._pg = None

    def outage_overlap(self, since: float, now: float) -> float:
        """Seconds the server was down between `since` and `now`, plus a lease for each
        outage in that span (workers trust their leases again only after the server is
        back): added to the zombie bound, since no one can reclaim a job meanwhile."""
        total = 0.0
        for start, end in self.outages:
            lo, hi = max(start, since), min(end, now)
            if hi > lo:
                total += hi - lo + self.config.lease
        return total

    # -- monitoring -------------------------------------------------------------------
    def monitor(self) -> None:
        """I1 while the run goes on: a running job is held by a live worker of this run, or
        by one that died less than lease + reclaim interval (+ slack) ago, not counting
        the server's outages (`outage_overlap`) and the spans with no other worker up to
        reclaim (`chaos_workers.unwatched`)."""
        if self.pg_down:
            return
        # the time the read was sent: a job it finds running was running then, and on a
        # loaded machine the answer may come a good part of a second later
        now = time.time()
        try:
            running = self.store.list_jobs(status="running", limit=1_000_000)
        except TRANSIENT as exc:  # the server restarted: the next round reads again
            self.say(f"monitor skipped: {first_line(exc)}")
            return
        for job in running:
            proc = self.by_id(job["worker_id"])
            key = (job["id"], int(job["execution_id"]))
            if proc is None:
                if not any(p.id is None and p.alive() for p in self.procs):
                    self.zombies.setdefault(
                        key, f"job {key} running under unknown worker {job['worker_id']}"
                    )
                continue
            if proc.alive() or key in self.zombies:
                continue
            died = proc.killed_at or proc.exited_at or now
            bound = (
                self.config.zombie_bound
                + self.outage_overlap(died, now)
                + unwatched(self.procs, proc, died, now)
            )
            if now - died > bound:
                self.zombie_deaths[key] = died
                self.zombies[key] = (
                    f"job {job['id']} execution {key[1]} still running {now - died:.1f} s "
                    f"after its worker #{proc.number} ({proc.id}) died "
                    f"(bound {bound:.1f} s)"
                )
        if self.hostile is not None:
            self.hostile.monitor(now)

    # -- phases -----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        c = self.config
        plan = mix_hostile(job_plan(c), c)
        self.timeline["t0"] = time.monotonic()
        for slot in range(c.workers):
            self.start_worker(slot, f"slot-{slot}")
        deadline = time.monotonic() + 30
        while any(p.state == "starting" for p in self.procs):
            self.refresh_workers()
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start within 30 s")
            time.sleep(0.05)
        start = time.monotonic()
        self.timeline["chaos_start"] = start - self.timeline["t0"]
        chaos_end = start + c.duration
        enqueue_window = max(c.duration * 0.8, 0.1)
        next_fault = start + self.schedule.uniform(0.3, 1.0) * c.fault_interval
        self.links.start_chaos(start)
        next_monitor = start + 1.0
        next_kill_poll = start
        # with a private cluster, one restart falls at a seeded moment of the chaos's first
        # half whatever the draws (a short run might draw none); more come as drawn
        first_restart = start + random.Random(f"restart-{c.seed}").uniform(0.2, 0.5) * c.duration
        # on PostgreSQL, so does one held horizon, in the first 40 %
        first_hold = start + random.Random(f"horizon-{c.seed}").uniform(0.1, 0.4) * c.duration
        while True:
            now = time.monotonic()
            if now >= chaos_end:
                break
            self.links.raise_errors()
            self.refresh_workers()
            self.run_timers()
            due = min(len(plan), math.ceil(len(plan) * (now - start) / enqueue_window))
            if due > self.plan_pos:
                self.try_enqueue(plan[self.plan_pos : due])
            if now >= next_fault:
                self.inject()
                next_fault = now + self.schedule.uniform(0.5, 1.5) * c.fault_interval
            elif (
                now >= first_restart
                and self.cluster is not None
                and not self.outages
                and "process" in self.links.families
            ):
                self.process_faults.fault_pg_restart(random.Random(f"restart-{c.seed}"))
            elif (
                now >= first_hold
                and self.horizons is not None
                and not self.horizons.forced
                and not self.pg_down
                and "process" in self.links.families
            ):
                self.horizons.fault_horizon(random.Random(f"horizon-{c.seed}"))
            if now >= next_monitor:
                self.monitor()
                self.replays.poll()
                self.side.poll()
                next_monitor = now + 1.0
            if now >= next_kill_poll:
                self.commits.poll()
                next_kill_poll = now + 0.1
            time.sleep(0.02)
        self.links.end_chaos()
        self.pauses.resume_all()
        if self.nats is not None:
            self.nats.end_chaos()
        deadline = time.monotonic() + 60
        while not self.try_enqueue(plan[self.plan_pos :]):
            if time.monotonic() > deadline:
                raise RuntimeError("the runner could not enqueue its last jobs within 60 s")
            self.refresh_workers()
            self.run_timers()
            time.sleep(0.05)
        self.timeline["chaos"] = time.monotonic() - start
        self.say("chaos over: draining")
        drained = self.drain()
        if self.hostile is not None:  # slots back, then every one filled
            drained = self.hostile.after_drain(drained)
        self.timeline["drain"] = time.monotonic() - start - self.timeline["chaos"]
        self.stop_all()
        self.timeline["total"] = time.monotonic() - start
        self.side.poll()
        self.process_faults.pg_start()  # if the drain ran out while it was down
        self.wait_for_database()
        return self.check_and_report(drained)

    def wait_for_database(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.store.count_jobs()
                return
            except TRANSIENT as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the queue's database did not answer within {timeout:g} s: "
                        f"{first_line(exc)}"
                    ) from None
                time.sleep(0.2)

    def try_enqueue(self, jobs: list[NewJob]) -> bool:
        """Enqueue a batch; False (to be tried again) while the server restarts. Nothing is
        in flight when the runner stops the server (it does both), so a failed batch was
        not stored."""
        if not jobs:
            return True
        with self.links.db_lock:
            if self.pg_down:
                return False
            try:
                self.enqueue(jobs)
            except TRANSIENT as exc:
                self.say(f"enqueue of {len(jobs)} jobs to be retried: {first_line(exc)}")
                return False
            except DependencyNotFound:
                if not self.links.loss_windows():
                    raise
                self.enqueue(self.without_lost_dependencies(jobs))
        return True

    def without_lost_dependencies(self, jobs: list[NewJob]) -> list[NewJob]:
        """The batch less the jobs that wait for a job an asynchronous failover lost (its
        enqueue acknowledged, then gone: an application's enqueue naming it fails the same
        way), and less those that wait for them; counted in `not_enqueued`."""
        lost = {
            dep
            for job in jobs
            for dep in job.depends_on
            if dep in self.kind_of and not self.job_exists(dep)
        }
        kept = []
        for job in jobs:
            if lost & set(job.depends_on):
                if job.id:
                    lost.add(job.id)
                self.not_enqueued.append(job.id or "")
            else:
                kept.append(job)
        self.say(f"{len(jobs) - len(kept)} jobs wait for jobs a failover lost: not enqueued")
        self.plan_pos += len(jobs) - len(kept)
        return kept

    def job_exists(self, job_id: str) -> bool:
        try:
            self.store.get_job(job_id)
        except JobNotFound:
            return False
        return True

    def enqueue(self, jobs: list[NewJob]) -> None:
        ids = self.store.enqueue(jobs) if jobs else []
        acked = time.time()
        if self.nats is not None:
            self.nats.published(ids, jobs, acked)
        self.plan_pos += len(jobs)
        for job_id, job in zip(ids, jobs, strict=True):
            self.acked_at[job_id] = acked
            self.enqueued.append(job_id)
            self.kind_of[job_id] = job.task
            self.args_of[job_id] = json.loads(job.args_json)
            if job.depends_on:
                self.deps_of[job_id] = list(job.depends_on)

    def drain(self) -> bool:
        """Faults stop; frozen workers continue, held horizons are released; every slot
        has a live worker; the dead roots still to replay are replayed; wait until every
        job is terminal or blocked by a dead dependency."""
        for proc in self.procs:
            if proc.state == "frozen":
                self.process_faults.thaw(proc)
        if self.horizons is not None:
            self.horizons.release_all()
        deadline = time.monotonic() + self.config.drain_timeout
        next_check = 0.0
        while True:
            self.refresh_workers()
            self.run_timers()
            self.commits.poll()
            for slot in range(self.config.workers):
                self.restart_slot(slot)
            if time.monotonic() >= next_check:
                self.monitor()
                self.replays.poll()
                next_check = time.monotonic() + 0.5
                if self.drained():
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def drained(self) -> bool:
        """Every job terminal (or blocked by a dead dependency), no worker the runner saw
        die still marked active, and no result still to come (a job its transaction
        completed, whose result its worker saves after or a reaper gives up)."""
        if self.pg_down:
            return False
        try:
            counts = self.store.count_jobs()
            active = {w["id"] for w in self.store.list_workers()}
        except TRANSIENT:
            return False
        if any(status not in SETTLED for _q, status, _n in counts) or self.replays.pending():
            return False
        if any(p.id in active for p in self.procs if not p.alive()):
            return False
        try:
            return not self.results_to_come()
        except TRANSIENT:
            return False

    def results_to_come(self) -> list[str]:
        """Succeeded jobs whose result is still to come (`result_pending`)."""
        done = self.store.list_jobs(status="succeeded", limit=10_000_000)
        bare = [j["id"] for j in done if j["result"] is None and j["result_lost"] is None]
        return [job_id for job_id in bare if self.store.job_end(job_id).result_pending]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.shutdown_timeout + 15
        for proc in self.procs:
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.violations.append(f"worker #{proc.number} ignored the final SIGTERM")
            proc.state = "exited"
        self.kill_all()

    def kill_all(self) -> None:
        for proc in self.procs:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(5)

    def close(self) -> None:
        self.kill_all()
        if self.horizons is not None:
            self.horizons.close()
        self.links.close()
        if self.nats is not None:
            self.nats.close()
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()
        self.store.link.close()

    # -- the oracle -------------------------------------------------------------------
    def check_and_report(self, drained: bool) -> dict[str, Any]:
        checker = Checker(self)
        checker.check(drained)
        return figures(checker)
