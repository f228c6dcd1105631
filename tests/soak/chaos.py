"""The chaos runner: real workers, random faults, and the invariants checked afterwards.

    python -m tests.soak.chaos --backend sqlite|postgres --duration S --workers N \
        --jobs N --seed N [--private-pg] [--json-out PATH] [--workdir DIR] [--strict] \
        [--faults process|failover|partition|slow-link|nats[,...]] [--replication sync|async] \
        [--hostile FRACTION]

What one run does:

1. A fresh queue: a SQLite file in a temporary directory, or a fresh schema on the
   PostgreSQL server of `tests/pg_harness.py` (the shared server, else a private
   cluster), dropped afterwards; with `--private-pg`, on a private cluster
   (`pg_harness.PrivateCluster`: initdb on a free port in a temporary directory) started
   for the run and removed after it, the only kind of server the runner may restart.
   Beside it, the ledger: a table `chaos_ledger (job_id, execution_id, worker_id)` in the
   queue's database (SQLite: the queue's file; PostgreSQL: the run's schema, named in
   full and handed to the tasks in `HEARTQ_CHAOS_LEDGER`), without a unique constraint.
2. `--workers` real `heartq worker tests.soak.chaos_tasks:app` processes, each in its own
   session, with sub-second protocol settings (heartbeat 0.3 s, lease 1.5 s, reclaim 0.5 s,
   liveness probe 0.25 s). Slot 0 (and every third) runs the process pool and also serves
   the `proc` queue, the next the thread pool, the next the async pool. Each slot has a
   stable `--name`; a replacement keeps it or takes a new one (seeded coin).
3. A stream of `--jobs` jobs of mixed kinds (`chaos_tasks`: short, long with checkpoints
   and progress, flaky, Permanent, timing out, silent, async, child-crashing, long in a
   child process), enqueued in batches over the first 80 % of the run. Every kind that can
   succeed writes its effect, one ledger row, through `ctx.transaction()` just before it
   returns (some keep the transaction open a few ms, so faults land inside it).
4. For `--duration` seconds, a fault about every `--fault-interval` seconds, chosen and
   aimed with `random.Random(--seed)`:
   - `sigkill`: SIGKILL a worker; a replacement starts 0-1 s later;
   - `sigstop`: SIGSTOP a worker for 1.5-2.5 leases, then SIGCONT (on SQLite only at a
     moment it does not hold the write lock: a frozen writer would stall every process,
     a limit of SQLite, see docs/RELIABILITY.md);
   - `sigterm`: graceful stop (shutdown timeout 1 s, the rest released), then a
     replacement;
   - `twin`: a second worker under the name of a live one, the old one SIGTERMed
     1-2.5 s later, like a rolling update (reconciliation must leave a live namesake's
     jobs alone; if it took them, fencing must keep the old one from writing);
   - `kill_child`: SIGKILL the child process of a running `chaos_proc_long` attempt;
   - `pg_terminate` (PostgreSQL): `pg_terminate_backend` on every session of one worker,
     found by the `application_name` the runner gave that process (`PGAPPNAME`, unique
     to this run's schema), so no other session of the server is touched;
   - `pg_restart` (PostgreSQL with `--private-pg` only): `pg_ctl stop -m fast|immediate`
     (seeded), and `pg_ctl start` 0.5-2 s later; one falls at a seeded moment of the
     first half of the chaos whatever the draws, more as drawn. The runner's own calls
     (enqueue batches, the monitor, cancels, its `pg_terminate` session) ride it out:
     skipped or retried while it is down, reconnected after (nothing of the runner's is
     in flight when it stops the server, so a failed enqueue stored nothing);
   - `horizon` (PostgreSQL): another session of the database opens a REPEATABLE READ
     transaction, reads the queue's `jobs`, and holds it idle 4-10 leases (seeded), so
     vacuum can remove nothing that dies meanwhile; then rolls back (released at the
     drain if still held). One falls at a seeded moment of the first 40 % of the chaos
     whatever the draws, more as drawn. The checker adds: no attempt given up (crashed or
     interrupted) while one was held, or a lease and a reclaim interval after, unless
     another fault explains it (`tests/soak/chaos_horizon.py`);
   - `cancel`: an operator cancels one of the 20 jobs enqueued last.
   Those are the `process` family, the default of `--faults`. The others (PostgreSQL;
   `tests/soak/chaos_links.py`): `failover` (the queue on a primary and its streaming
   standby, reached through a multi-host URL; the primary stopped, the standby promoted,
   a new standby rejoined), `partition` (every worker through a `FaultProxy` of its own,
   one cut off for seconds, then healed) and `slow-link` (200 ms each way on some
   workers' proxies). With asynchronous replication what a failover lost inside its
   window is counted, not failed (`chaos_links.LinkFaults.loss_windows`). And `nats`
   (either backend; `tests/soak/chaos_nats.py`): the workers take their wake-ups from a
   private three-node JetStream cluster (three replicas), whose stream leader's node is
   SIGKILLed (`nats_leader`), one node SIGSTOPped (`nats_freeze`) or one node cut off
   from the others (`nats_partition`: its routes, each through a proxy, refused) for
   seconds; the report adds how long the jobs around each fault waited.
   Rate-limited jobs (`chaos_rated`, one key, 4 starts a second) ride in the stream too,
   and jobs with a concurrency key (`chaos_limited`, two keys, one running at once each,
   in bursts of 3-6 jobs of a key).
   A share of the standalone jobs (`--fair`, 30 %) carry a fairness key, 60 % of them one
   flooding key and the rest four others (one weighted 2): claims take the keys in turn
   (`tests/soak/chaos_fair.py`).
   Pipelines ride in the same stream (`--pipelines`, the share of draws that make one):
   groups of 2-5 members of the kinds above whose callback (`chaos_fan_in`) waits for
   them (`depends_on`) and receives their results, and chains of 2-4 steps each waiting
   for the one before, result-passing chains (`chaos_add` steps, each taking the previous
   step's result), and blocked-and-replayed pipelines (a `chaos_fixable` root that ends
   dead, blocking its steps, until the runner fixes and replays it a seeded delay later;
   `tests/soak/chaos_pipes.py`), enqueued in the same batch as their dependencies. Half
   of the pipelines' members and steps hand their result to their transaction's commit
   (`ctx.commit_result`), and 15 % have their worker SIGKILLed between the commit and
   the return (`tests/soak/chaos_commits.py`: the task writes a `committed` line and
   waits; the runner reads it within 0.1 s and kills, as a `sigkill` fault).
   Every second a monitor reads the running jobs: one held by a worker the runner killed
   longer than `lease + reclaim interval + --slack` ago (plus, for each server outage in
   between, its length and a lease, and the spans when no other worker was up to reclaim:
   none had logged `worker_started`, or all were stopped) is a zombie (I1).
5. Drain: faults stop, frozen workers continue, every slot gets a live worker, and the run
   waits until every job is terminal; then every worker is stopped with SIGTERM.
6. The invariants (docs/design/protocol.md I1-I6) are checked against the database (`Store.get_job`,
   `list_jobs`, `list_workers`) and the side file the tasks append to (a line per attempt
   start and end; on PostgreSQL an execution dated up to `CLOCK_TOLERANCE` before the
   previous one ended is a `now()` inversion, counted, not an I2 violation); effects
   exactly once against the ledger: a succeeded job of a kind that writes one has
   exactly one row, from the execution that succeeded; a job that did not succeed has
   none; two rows or more is "effect N times". Pipelines: no job ran before each of
   its dependencies succeeded (its first execution started after theirs ended, and no
   job whose dependency failed ran at all); a job whose dependency ended cancelled
   ended cancelled (`dependency_failed`), one whose dependency is dead or blocked is
   blocked (and a dead job is at its root), one whose dependencies all succeeded is
   neither; every callback that succeeded received every member's
   result, from the attempt that succeeded, in order, or the lost-result marker exactly
   where a member's result is lost (never None in its place), and wrote its effect once;
   every result-passing step took the previous step's succeeded attempt's result (or the
   marker), once (its value is the plan's); every job a replay found blocked was
   released and ran to its end, none is left blocked by a root that was replayed and
   succeeded. Rate limits: no window of the period held more starts of the rated key
   than its limit. Fairness keys: each key's jobs were first claimed in its own order
   (priority, then enqueue order; a retry or a reclaim goes back in line). A succeeded
   job with no result must say it lost it (`result_lost`), and is accepted for those
   kinds (its worker died between the commit and saving the result), counted as
   "results lost after the commit"; a result handed to the commit is never lost;
   `app.result()` raises `ResultLost` for each lost one. Then the figures are printed
   (and written as JSON with --json-out).

Exit status 0 when every invariant held, 1 otherwise (the violations are listed); with
--strict, anomalies (jobs taken from live workers) fail the run too.
"""

# The runner in parts (the docstring above is `--help`'s): `chaos_config` (the settings
# and the words shared), `chaos_plan` (the jobs), `chaos_run` (one run: workers, stream,
# monitor, drain), `chaos_faults` (the `process` family; its held horizons in
# `chaos_horizon`, with their check), `chaos_links` (failover,
# partition, slow-link), `chaos_hostile` (hostile task code), `chaos_workers` and
# `chaos_records` (the worker processes; the side file and the ledger), `chaos_commits`
# (results between a commit and a return: the plan's share, the kills, their check),
# then the oracle:
# `chaos_checks` (I1-I6 and the other checks), `chaos_causes` (each crash's cause, the
# anomalies) and `chaos_report` (the figures, printed and as JSON).

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.sigterm import unwind_on_sigterm
from tests.soak.chaos_config import SERVER_SETTINGS, ChaosConfig
from tests.soak.chaos_links import parse_families
from tests.soak.chaos_report import format_report
from tests.soak.chaos_run import ChaosRun, fresh_queue


def run_chaos(config: ChaosConfig) -> dict[str, Any]:
    """One chaos run; returns the figures (with `violations` and `ok`)."""
    if config.workdir:
        workdir = Path(config.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        cleanup = False
    else:
        workdir = Path(tempfile.mkdtemp(prefix=f"heartq-chaos-{config.backend}-"))
        cleanup = not config.keep
    try:
        with contextlib.ExitStack() as stack:
            cluster = pair = None
            families = parse_families(config.faults)
            if set(families) - {"process", "nats"} and config.backend != "postgres":
                raise SystemExit("--faults failover, partition and slow-link need PostgreSQL")
            if "failover" in families:
                from tests.pg_replication import StreamingPair

                if config.replication not in ("sync", "async"):
                    raise SystemExit("--replication: sync or async")
                pair = StreamingPair(config.replication == "sync", SERVER_SETTINGS)
                stack.callback(pair.close)
                schema = f"heartq_chaos_{config.seed}"
                url = pair.url(schema=schema)
            else:
                if config.backend == "postgres" and config.private_pg:
                    from tests.pg_harness import PrivateCluster

                    cluster = PrivateCluster(SERVER_SETTINGS)
                    stack.callback(cluster.close)
                url, schema = stack.enter_context(fresh_queue(config, workdir, cluster))
            run = ChaosRun(config, workdir, url, schema, cluster, pair)
            try:
                figures = run.run()
            finally:
                run.close()
        figures["workdir"] = str(workdir) if not cleanup else None
        return figures
    finally:
        if cleanup:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    unwind_on_sigterm()
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak.chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = ChaosConfig()
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--duration", type=float, default=defaults.duration)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument(
        "--prefetch", type=int, default=defaults.prefetch, help="jobs claimed ahead per worker"
    )
    parser.add_argument("--fault-interval", type=float, default=defaults.fault_interval)
    parser.add_argument("--heartbeat", type=float, default=defaults.heartbeat)
    parser.add_argument("--lease", type=float, default=defaults.lease)
    parser.add_argument("--reclaim", type=float, default=defaults.reclaim)
    parser.add_argument("--liveness", type=float, default=defaults.liveness)
    parser.add_argument(
        "--pipelines",
        type=float,
        default=defaults.pipelines,
        help="share of the plan's draws that make a pipeline: a group, a chain, a "
        "result-passing chain or a blocked-and-replayed one (0: none)",
    )
    parser.add_argument(
        "--faults",
        default=defaults.faults,
        help="fault families, joined by commas: process (worker signals, sessions, server "
        "restarts, held horizons, cancels), failover, partition, slow-link (PostgreSQL), "
        "nats (a three-node JetStream cluster: its stream leader killed, a node frozen, a "
        "node cut off from the others)",
    )
    parser.add_argument(
        "--replication",
        choices=["sync", "async"],
        default=defaults.replication,
        help="failover: the standby's replication",
    )
    parser.add_argument("--failover-outage", type=float, default=defaults.failover_outage)
    parser.add_argument("--failover-cut", type=float, default=defaults.failover_cut)
    parser.add_argument("--failover-gap", type=float, default=defaults.failover_gap)
    parser.add_argument("--partition-max", type=float, default=defaults.partition_max)
    parser.add_argument("--slow-ms", type=float, default=defaults.slow_ms)
    parser.add_argument("--slow-share", type=float, default=defaults.slow_share)
    parser.add_argument(
        "--hostile", type=float, default=0.0, help="share of jobs that are hostile task code"
    )
    parser.add_argument(
        "--fair",
        type=float,
        default=defaults.fair,
        help="share of standalone jobs with a fairness key (tests/soak/chaos_fair.py)",
    )
    parser.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout)
    parser.add_argument("--slack", type=float, default=defaults.slack)
    parser.add_argument("--pg-url", default=None, help="PostgreSQL server for the schema")
    parser.add_argument(
        "--private-pg",
        action="store_true",
        help="PostgreSQL: a private cluster for the run, restarted by pg_restart faults",
    )
    parser.add_argument("--workdir", default=None, help="keep logs and the side file here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--json-out", default=None, help="write the figures here as JSON")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--strict", action="store_true", help="exit 1 on protocol anomalies too")
    args = parser.parse_args(argv)
    config = ChaosConfig(
        backend=args.backend,
        duration=args.duration,
        workers=args.workers,
        jobs=args.jobs,
        seed=args.seed,
        concurrency=args.concurrency,
        prefetch=args.prefetch,
        fault_interval=args.fault_interval,
        heartbeat=args.heartbeat,
        lease=args.lease,
        reclaim=args.reclaim,
        liveness=args.liveness,
        drain_timeout=args.drain_timeout,
        pipelines=args.pipelines,
        hostile=args.hostile,
        fair=args.fair,
        faults=args.faults,
        replication=args.replication,
        failover_outage=args.failover_outage,
        failover_cut=args.failover_cut,
        failover_gap=args.failover_gap,
        partition_max=args.partition_max,
        slow_ms=args.slow_ms,
        slow_share=args.slow_share,
        slack=args.slack,
        pg_url=args.pg_url,
        private_pg=args.private_pg,
        workdir=args.workdir,
        keep=args.keep,
        verbose=not args.quiet,
    )
    figures = run_chaos(config)
    print(format_report(figures))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    if not figures["ok"] or (args.strict and figures["anomalies"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
