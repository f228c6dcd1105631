"""The chaos runner's hostile family (`python -m tests.soak.chaos --hostile FRACTION`):
task code that does what it must not, mixed with the ordinary jobs, on every pool, under
the usual faults; and what the checker holds the workers to when it runs.

The jobs. A seeded `FRACTION` of the plan's standalone jobs (not pipelines' members) is
replaced by hostile ones (`tests/soak/chaos_hostile_tasks.py`: raising
`KeyboardInterrupt`, `SystemExit`, `GeneratorExit`, a `CancelledError` of its own, an
unprintable exception, `RecursionError`, `MemoryError`; returning an unencodable value;
`sys.exit()`; `signal.signal`; `os.fork()`; a non-daemon thread left running; closed
`sys.stdout`/`sys.stderr`; `time.sleep` in an `async def` past or short of its timeout;
`os._exit` in a process-pool child). All but `os_exit` go to the `default` queue, which
every worker serves, so they reach the thread, async and process pools alike (the slots
rotate through the three); `os_exit` goes to `proc`, the process pool's.

The checks, on top of I1-I6 and the rest of the runner's oracle:

- every hostile job ends (succeeded, dead or cancelled), and every attempt of one ends
  within its bound (what its case may take, plus the zombie bound, child-start slack and
  any server outage meanwhile): `stuck` counts those that did not;
- each attempt ends as its case and the pool that ran it give (`chaos_hostile_tasks.
  expected`: a raised `KeyboardInterrupt` is `failed`, its error naming it; a signal
  handler fails off the main thread and succeeds in a child; a long block is `timed_out`;
  `os._exit` is `crashed`); crashed, interrupted, released and cancelled attempts are the
  faults' doing (the runner's oracle explains those);
- a forked copy of a worker exits by itself (the task waits `FORK_WAIT` for it), and no
  result comes from one;
- no slot leaks: during the run, a live worker's registry row (`abandoned`: attempts whose
  end is decided and whose code still runs) is not above zero for longer than
  `LINGER_BOUND`; after the drain, every live worker's row shows nothing running and
  nothing abandoned within `LINGER_BOUND`, and then every live worker fills all its slots
  at once (`concurrency` probe jobs, `chaos_probe`, each holding its slot until the
  runner lets them go): a slot it does not fill is a leaked slot, a worker that fills
  none stopped claiming;
- no worker exits on its own (the runner's own check), and each one stopped at the end
  exits 0;
- no job is released uncounted beyond the policy: a `released` attempt that started (its
  worker handed it to a pool, or its code wrote its start line) belongs to a worker
  SIGTERMed (a `sigterm` or `twin` fault) before it ended; one claimed ahead
  (`--prefetch`) and never started may go back uncounted at any time (counted apart);
  and no job is interrupted more than `MAX_INTERRUPTIONS` times.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from heartq.lifecycle.crash import MAX_INTERRUPTIONS
from heartq.model import NewJob
from tests.soak.chaos_config import CLOCK_TOLERANCE, START_SLACK, TERMINAL, parse_ts
from tests.soak.chaos_hostile_tasks import (
    BLOCK_TIMEOUT,
    CASES,
    FORK_WAIT,
    LINGER_S,
    RAISING,
    TASKS,
    expected,
)
from tests.soak.chaos_tasks import PROC_QUEUE
from tests.soak.chaos_workers import WorkerProc, read_events

if TYPE_CHECKING:
    from tests.soak.chaos_causes import KillTimes
    from tests.soak.chaos_checks import Checker
    from tests.soak.chaos_config import ChaosConfig
    from tests.soak.chaos_run import ChaosRun

CASE_WEIGHTS: dict[str, float] = {**dict.fromkeys(CASES, 1.0), "block_loop": 2.0, "os_exit": 1.0}
"""How often each case is drawn."""
LINGER_BOUND = 20.0
"""Seconds a live worker may report abandoned attempts without a break: the longest any
hostile case's code runs on after its end was decided (a fork's wait, a block) plus
slack for a loaded machine."""
KILL_STAMP = 1.0
"""Seconds the runner may take from stamping a SIGKILL's time to sending it (a loaded
machine preempts it): a claim its worker made meanwhile is dated after the kill."""
Attempt = tuple[str, int, str]
"""An attempt: its job's id, its execution id, its worker's id."""
PROBE_WAIT = 30.0
"""Seconds the runner waits for every live worker to fill its slots with probe jobs."""
BOUNDED_OUTCOMES = ("succeeded", "failed", "timed_out")
"""The outcomes an attempt reaches by its own doing (the others are faults')."""


def hostile_job(n: int, rng: random.Random) -> NewJob:
    """One hostile job (its case, flavour and arguments drawn from `rng`)."""
    case = rng.choices(list(CASE_WEIGHTS), list(CASE_WEIGHTS.values()))[0]
    args: dict[str, Any] = {"n": n}
    queue, max_retries = "default", 2
    if case == "block_loop":
        task, max_retries = "chaos_hostile_block", 1
        long = rng.random() < 0.5
        args["block_s"] = round(rng.uniform(1.6, 3.0) if long else rng.uniform(0.1, 0.4), 3)
    elif case == "os_exit":
        task, queue = "chaos_hostile_exit", PROC_QUEUE
    else:
        task = rng.choice(("chaos_hostile", "chaos_hostile_async"))
        args["case"] = case
        args["linger_s"] = round(rng.uniform(*LINGER_S), 3)
    return NewJob(
        task=task,
        args_json=json.dumps(args),
        queue=queue,
        priority=rng.randint(0, 2),
        max_retries=max_retries,
        retry_backoff=0.05,
        retry_backoff_max=0.5,
    )


def mix_hostile(plan: list[NewJob], config: ChaosConfig) -> list[NewJob]:
    """`plan` with a seeded `config.hostile` share of its standalone jobs (those without
    an id: no pipeline names them) replaced by hostile ones; unchanged at 0."""
    if not config.hostile:
        return plan
    rng = random.Random(f"hostile-{config.seed}")
    return [
        hostile_job(n, rng) if job.id is None and rng.random() < config.hostile else job
        for n, job in enumerate(plan)
    ]


def case_of(task: str, args: dict[str, Any]) -> str:
    if task == "chaos_hostile_block":
        return "block_loop"
    if task == "chaos_hostile_exit":
        return "os_exit"
    return str(args["case"])


def case_bound(case: str) -> float:
    """Seconds an attempt of `case` takes at most by its own doing."""
    if case == "fork":
        return FORK_WAIT + 2.0
    if case == "block_loop":
        return BLOCK_TIMEOUT + 1.0
    return 2.0


class HostileFamily:
    """The hostile jobs' part of one run: the registry watch during it, the probe after
    the drain, the checks and the figures."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.streaks: dict[str, float] = {}  # worker id: since when it reports abandoned
        self.max_abandoned = 0
        self.longest_streak = 0.0
        self.settle_s: float | None = None
        self.probe: dict[str, Any] = {}
        self.stuck: list[str] = []
        self.by_case: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
        self.by_pool: dict[str, Counter[str]] = defaultdict(Counter)
        self.flavours: Counter[str] = Counter()
        self.forks: Counter[str] = Counter()
        self.released = 0
        self.released_unstarted = 0
        """Of `released`, those claimed ahead and never started."""
        self.threads_died: Counter[str] = Counter()
        self.guards: Counter[str] = Counter()

    # -- during the run ----------------------------------------------------------------
    def monitor(self, now: float) -> None:
        """Every second: a live worker whose registry row shows abandoned attempts without
        a break for longer than `LINGER_BOUND` has a slot that does not come back."""
        try:
            rows = self.run.store.list_workers()
        except Exception:  # noqa: BLE001 - the server restarting: the next round reads
            return
        for row in rows:
            proc = self.run.by_id(row["id"])
            if proc is None or proc.state != "running" or not proc.alive() or not row["abandoned"]:
                self.streaks.pop(row["id"], None)
                continue
            self.max_abandoned = max(self.max_abandoned, int(row["abandoned"]))
            since = self.streaks.setdefault(row["id"], now)
            self.longest_streak = max(self.longest_streak, now - since)
            if now - since > LINGER_BOUND:
                self.run.violations.append(
                    f"slots: worker #{proc.number} ({proc.id}) has reported {row['abandoned']} "
                    f"abandoned attempts for {now - since:.0f} s"
                )
                self.streaks[row["id"]] = float("inf")  # told once

    # -- after the drain ---------------------------------------------------------------
    def after_drain(self, drained: bool) -> bool:
        """Every live worker gets its slots back, then fills them all at once; returns
        whether the queue drained again after the probe."""
        if not drained:
            return False
        run = self.run
        live = self._live_workers()
        self._settle(live)
        go = run.dir / "probe.go"
        per_worker = run.config.concurrency + run.config.prefetch
        base = len(run.enqueued)
        jobs = [
            NewJob(
                task="chaos_probe",
                args_json=json.dumps({"n": base + i, "go": str(go)}),
                max_retries=2,
                retry_backoff=0.05,
                retry_backoff_max=0.5,
            )
            for i in range(len(live) * per_worker)
        ]
        deadline = time.monotonic() + 60
        while not run.try_enqueue(jobs):
            if time.monotonic() > deadline:
                raise RuntimeError("the runner could not enqueue its probe jobs within 60 s")
            time.sleep(0.1)
        seen = self._fill(live)
        go.touch()
        leaked = {p.number: run.config.concurrency - seen.get(p.id or "", 0) for p in live}
        for proc in live:
            if leaked[proc.number] > 0:
                what = "claimed nothing" if not seen.get(proc.id or "") else "filled only"
                run.violations.append(
                    f"slots: worker #{proc.number} ({proc.id}, {proc.pool}) {what} "
                    f"{seen.get(proc.id or '', 0)} of {run.config.concurrency} slots at the end"
                )
        self.probe = {
            "workers": len(live),
            "pools": dict(Counter(p.pool for p in live)),
            "slots_filled": sorted(seen.get(p.id or "", 0) for p in live),
            "slots_leaked": sum(max(0, n) for n in leaked.values()),
        }
        return run.drain()

    def _live_workers(self) -> list[WorkerProc]:
        """The slots' workers, once each has started and every other one has exited (a
        twin's namesake retiring, one SIGTERMed: they would take probes too)."""
        run = self.run
        deadline = time.monotonic() + 60
        while any(p.state != "running" and p.alive() for p in run.procs):
            if time.monotonic() > deadline:
                break
            run.refresh_workers()
            run.run_timers()
            for slot in range(run.config.workers):
                run.restart_slot(slot)
            time.sleep(0.05)
        return [p for p in run.procs if p.state == "running" and p.alive() and p.id]

    def _settle(self, live: list[WorkerProc]) -> None:
        """Wait until every live worker's row shows nothing running or abandoned."""
        run = self.run
        start = time.monotonic()
        rows: dict[str, Any] = {}
        while time.monotonic() - start < LINGER_BOUND:
            try:
                rows = {w["id"]: w for w in run.store.list_workers()}
            except Exception:  # noqa: BLE001 - retried until the bound
                rows = {}
            busy = [
                p
                for p in live
                if (r := rows.get(p.id or "")) is None or r["abandoned"] or r["running"]
            ]
            if not busy:
                self.settle_s = round(time.monotonic() - start, 2)
                return
            time.sleep(0.2)
        for proc in live:
            row = rows.get(proc.id or "") or {}
            run.violations.append(
                f"slots: worker #{proc.number} ({proc.id}) still shows running "
                f"{row.get('running')}, abandoned {row.get('abandoned')} {LINGER_BOUND:g} s "
                "after the drain"
            )

    def _fill(self, live: list[WorkerProc]) -> dict[str, int]:
        """The most probe jobs each live worker ran at once, until each ran `concurrency`
        (or `PROBE_WAIT` passed)."""
        run = self.run
        want = run.config.concurrency
        seen: dict[str, int] = {}
        deadline = time.monotonic() + PROBE_WAIT
        while time.monotonic() < deadline:
            run.refresh_workers()
            run.side.poll()
            now_open = Counter(d["wid"] for d in run.side.open_attempts("chaos_probe"))
            for wid, n in now_open.items():
                seen[wid] = max(seen.get(wid, 0), n)
            if all(seen.get(p.id or "", 0) >= want for p in live):
                break
            time.sleep(0.05)
        return seen

    # -- the checks --------------------------------------------------------------------
    def check(self, checker: Checker) -> None:
        run = self.run
        terms = defaultdict(list)  # worker id: when the runner SIGTERMed it
        for f in run.faults:
            if f.kind in ("sigterm", "twin") and f.worker_id:
                terms[f.worker_id].append(f.at)
        kills = checker.crashes.kill_times()
        started = self._started()
        for job_id, job in checker.jobs.items():
            self._check_releases(checker, job_id, job, terms, started)
            task = run.kind_of[job_id]
            if task in TASKS:
                self._check_hostile(checker, job_id, job, task, kills)
        for text in self.stuck:
            checker.fail(f"stuck: {text}")
        self._check_threads(checker)
        self._check_guards(checker)
        for proc in run.procs:
            code = proc.popen.returncode
            if proc.exited_at is None and proc.killed_at is None and code != 0:
                checker.fail(f"worker #{proc.number} ({proc.id}) exited {code} at the end")

    def _started(self) -> set[Attempt]:
        """The attempts whose start a worker went through with: those it handed to its pool
        (its `job_claimed` event, logged at the debug level the runner's workers run at),
        and those whose code wrote its start line in the side file."""
        started = {(job, eid, doc["wid"]) for (job, eid), doc in self.run.side.starts.items()}
        for proc in self.run.procs:
            for e in read_events(proc.log_path):
                if e["event"] == "job_claimed":
                    started.add((str(e["job_id"]), int(e["execution_id"]), str(e["worker_id"])))
        return started

    def _check_releases(
        self,
        checker: Checker,
        job_id: str,
        job: dict[str, Any],
        terms: dict[str, list[float]],
        started: set[Attempt],
    ) -> None:
        """A `released` attempt is not counted: only a stopping worker may release one it
        started. A job claimed ahead (`--prefetch`) and never started goes back uncounted
        whoever gives it back, whenever (docs/design/claim.md, "Claim ahead"): its worker when
        it stops or when the start is refused, a reclaim when its worker died or froze."""
        interrupted = 0
        for e in job["executions"]:
            if e["outcome"] == "interrupted":
                interrupted += 1
            if e["outcome"] != "released":
                continue
            self.released += 1
            if (job_id, e["execution_id"], e["worker_id"]) not in started:
                self.released_unstarted += 1
                continue
            ended = parse_ts(e["ended_at"]) or 0.0
            if not any(t <= ended + CLOCK_TOLERANCE for t in terms.get(e["worker_id"], [])):
                checker.fail(
                    f"released: job {job_id} execution {e['execution_id']} released uncounted "
                    f"at {e['ended_at']} by worker {e['worker_id']}, which was not stopped"
                )
        if interrupted > MAX_INTERRUPTIONS:
            checker.fail(f"released: job {job_id} interrupted {interrupted} times")

    def _check_hostile(
        self, checker: Checker, job_id: str, job: dict[str, Any], task: str, kills: KillTimes
    ) -> None:
        run = self.run
        args = run.args_of[job_id]
        case = case_of(task, args)
        where = f"hostile job {job_id} ({case}, {task}, {job['status']})"
        self.by_case[case]["jobs"][job["status"]] += 1
        self.flavours["async def" if task != "chaos_hostile" else "def"] += 1
        if job["status"] not in TERMINAL:
            self.stuck.append(f"{where} did not end")
        if job["status"] == "succeeded" and case in (*RAISING, "unencodable", "os_exit"):
            checker.fail(f"{where} succeeded, which its case never does")
        if job["status"] == "succeeded" and (job["result"] or {}).get("copy"):
            checker.fail(f"{where} has the result of its forked copy: {job['result']}")
        for e in job["executions"]:
            proc = run.by_id(e["worker_id"])
            pool = proc.pool if proc is not None else "?"
            outcome = e["outcome"] or "open"
            self.by_case[case][pool][outcome] += 1
            self.by_pool[pool][outcome] += 1
            started, ended = parse_ts(e["started_at"]), parse_ts(e["ended_at"])
            if started is not None and ended is not None:
                bound = (
                    case_bound(case)
                    + run.config.zombie_bound
                    + START_SLACK
                    + run.outage_overlap(started, ended)
                )
                if ended - started > bound:
                    self.stuck.append(
                        f"{where} execution {e['execution_id']} ran {ended - started:.1f} s "
                        f"on {pool} (bound {bound:.1f} s)"
                    )
            allowed, text = expected(case, pool, float(args.get("block_s", 0)) > BLOCK_TIMEOUT)
            if outcome not in (*BOUNDED_OUTCOMES, "crashed") or pool == "?":
                continue
            if outcome == "crashed" and case != "os_exit":
                cause, _ = checker.crashes.cause(e["crash"] or {}, job_id, e, *kills)
                killed = proc.killed_at if proc is not None else None
                if killed is not None and started is not None and killed >= started - KILL_STAMP:
                    cause = "sigkill"  # claimed as the runner, stamping the kill, was preempted
                if cause is None:  # a fault's, or the code took down what ran it
                    checker.fail(
                        f"{where} execution {e['execution_id']} on {pool} crashed "
                        f"without a fault: {(e['error'] or '')[-200:]}"
                    )
                continue
            if outcome not in allowed:
                checker.fail(
                    f"{where} execution {e['execution_id']} on {pool} ended "
                    f"{outcome}, not {sorted(allowed)}: {(e['error'] or '')[-200:]}"
                )
            elif outcome == "failed" and text and text not in (e["error"] or ""):
                checker.fail(
                    f"{where} execution {e['execution_id']} on {pool} failed "
                    f"without {text} in its error: {(e['error'] or '')[-200:]}"
                )
        if case == "fork":
            self._check_forks(checker, job_id, where)

    def _check_guards(self, checker: Checker) -> None:
        """The pools' guard behind run_sync/run_async fires (`maintenance_failed`,
        service `pool`) only when something past a task's own code raised: with no
        attempt hooks in the chaos app, each time is heartq's fault (finding 13 was one:
        a plain task's `GeneratorExit` on the async pool, fixed)."""
        for proc in self.run.procs:
            for e in read_events(proc.log_path):
                if e["event"] != "maintenance_failed" or e.get("service") != "pool":
                    continue
                error = str(e.get("error"))
                self.guards["fired"] += 1
                checker.fail(
                    f"worker #{proc.number} ({proc.id}): the pool's guard fired "
                    f"for job {e.get('job_id')}: {error[-200:]}"
                )

    def _check_threads(self, checker: Checker) -> None:
        """A thread that died of an exception leaves Python's `Exception in thread NAME:`
        in its worker's log (a process-pool child's too: it writes to its worker's
        stderr). One of heartq's named threads (a pool's, a watch's) dying is a violation:
        nothing a task does may end one."""
        for proc in self.run.procs:
            with contextlib.suppress(FileNotFoundError):
                for line in proc.log_path.read_text(errors="replace").splitlines():
                    if line.startswith("Exception in thread "):
                        name = line.removeprefix("Exception in thread ").rstrip(":")
                        self.threads_died[name.split(" ")[0].rstrip("0123456789")] += 1
                        if name.startswith("heartq-"):
                            checker.fail(
                                f"worker #{proc.number} ({proc.id}): its thread "
                                f"{name} died of an exception"
                            )

    def _check_forks(self, checker: Checker, job_id: str, where: str) -> None:
        for (job, eid), end in self.run.side.ends.items():
            fork = end.get("fork") if job == job_id else None
            if fork is None:
                continue
            self.forks["copies"] += 1
            self.forks[f"exit code {fork['code']}"] += 1
            if fork["killed"]:
                self.forks["killed"] += 1
                checker.fail(
                    f"{where} execution {eid}: its forked copy (pid {fork['copy']}) "
                    f"had not exited {FORK_WAIT:g} s after the fork"
                )

    # -- figures -----------------------------------------------------------------------
    def figures(self) -> dict[str, Any]:
        events: Counter[str] = Counter()
        for proc in self.run.procs:
            for e in read_events(proc.log_path):
                if e["event"] in ("event_loop_blocked", "event_loop_resumed"):
                    events[e["event"]] += 1
                elif e["event"] == "maintenance_failed" and e.get("service") == "async_pool":
                    events["async_pool_reports"] += 1
        return {
            "hostile": {
                "fraction": self.run.config.hostile,
                "jobs": sum(sum(c["jobs"].values()) for c in self.by_case.values()),
                "flavours": dict(self.flavours),
                "by_case": {
                    case: {k: dict(sorted(v.items())) for k, v in sorted(parts.items())}
                    for case, parts in sorted(self.by_case.items())
                },
                "executions_by_pool": {
                    p: dict(sorted(c.items())) for p, c in sorted(self.by_pool.items())
                },
                "stuck": len(self.stuck),
                "slots_leaked": self.probe.get("slots_leaked"),
                "probe": self.probe,
                "slots_back_after_drain_s": self.settle_s,
                "abandoned_max": self.max_abandoned,
                "abandoned_longest_s": round(self.longest_streak, 1),
                "forks": dict(sorted(self.forks.items())),
                "released_attempts": self.released,
                "released_unstarted": self.released_unstarted,
                "threads_died": dict(sorted(self.threads_died.items())),
                "pool_guard_fired": dict(sorted(self.guards.items())),
                "worker_events": dict(sorted(events.items())),
            }
        }


def hostile_report(fig: dict[str, Any]) -> list[str]:
    """The report's lines about the hostile jobs (none without them)."""
    h = fig.get("hostile")
    if not h:
        return []
    lines = [
        f"  hostile       {h['jobs']} jobs ({h['fraction']:g} of the draws; {h['flavours']}); "
        f"stuck {h['stuck']}, slots leaked {h['slots_leaked']} (probe {h['probe']}; slots "
        f"back {h['slots_back_after_drain_s']} s after the drain; abandoned at most "
        f"{h['abandoned_max']}, for {h['abandoned_longest_s']} s)",
        f"    executions by pool {h['executions_by_pool']}",
        f"    forks {h['forks']}; released attempts {h['released_attempts']} "
        f"({h['released_unstarted']} claimed ahead, never started); threads died "
        f"{h['threads_died'] or 'none'}; pool guard fired {h['pool_guard_fired'] or 'never'}; "
        f"worker events {h['worker_events']}",
    ]
    lines += [f"    {case:18} {parts}" for case, parts in h["by_case"].items()]
    return lines
