"""A chaos run's figures (`tests/soak/chaos.py`, step 6): what ran and how it ended, the
faults, the reclaims and their causes, detection latencies, the ledger's, pipelines' and
rate limits' counts, the fault families' own (failovers, partitions, slow links), the
hostile family's; as a dict (`--json-out`) and as the printed report."""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from tests.soak.chaos_config import (
    CLOCK_TOLERANCE,
    FAULT_KINDS,
    LATE_HEAL,
    PG_FAULTS,
    TERMINAL,
    parse_ts,
)
from tests.soak.chaos_horizon import horizon_report
from tests.soak.chaos_hostile import hostile_report
from tests.soak.chaos_links import family_weights
from tests.soak.chaos_nats import nats_report
from tests.soak.chaos_records import SideLog
from tests.soak.chaos_tasks import RATE_PERIOD
from tests.soak.chaos_workers import read_events

if TYPE_CHECKING:
    from tests.soak.chaos_checks import Checker


def figures(checker: Checker) -> dict[str, Any]:
    """The figures of a checked run, with its anomalies, its violations and `ok`."""
    run = checker.run
    c = run.config
    crashes = checker.crashes
    statuses = Counter(j["status"] for j in checker.jobs.values())
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    outcomes: Counter[str] = Counter()
    for job_id, job in checker.jobs.items():
        by_kind[run.kind_of[job_id]][job["status"]] += 1
        for e in job["executions"]:
            outcomes[e["outcome"] or "open"] += 1
    detected, causes, latencies = crashes.detected, crashes.causes, crashes.latencies
    reap_lag, unexplained = crashes.reap_lag, crashes.unexplained
    resumed = sum(
        1
        for j in checker.jobs.values()
        if j["status"] == "succeeded" and (j["result"] or {}).get("resumed_from", 0) > 0
    )
    side = run.side
    fenced_returns = sum(
        1
        for key, end in side.ends.items()
        if end.get("how") == "return"
        and (checker.jobs.get(key[0]) or {}).get("status") == "succeeded"
        and checker.jobs[key[0]]["execution_id"] != key[1]
    )
    overlapping = overlaps(run.side)
    events: Counter[str] = Counter()
    for proc in run.procs:
        for e in read_events(proc.log_path):
            if e["event"] in (
                "lease_lost", "leases_untrusted", "heartbeat_failed", "claim_failed",
                "maintenance_failed", "completion_retry", "job_released",
                "reconciliation_complete", "worker_deactivated",
            ):  # fmt: skip
                events[e["event"]] += 1
    faults = Counter(f.kind for f in run.faults)
    all_latencies = [x for k in ("sigkill", "sigstop") for x in latencies.get(k, [])]
    total = run.timeline.get("total", 0.0)
    terminal = sum(n for s, n in statuses.items() if s in TERMINAL)
    return {
        "backend": c.backend,
        "seed": c.seed,
        "config": {k: v for k, v in asdict(c).items() if k not in ("verbose",)},
        "duration_s": {k: round(v, 2) for k, v in run.timeline.items() if k != "t0"},
        "jobs": len(run.enqueued),
        "statuses": dict(sorted(statuses.items())),
        "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
        "executions": sum(outcomes.values()),
        "outcomes": dict(sorted(outcomes.items())),
        "faults": {
            k: faults.get(k, 0)
            for k in FAULT_KINDS
            if family_weights(run.links.families, c.fault_weights).get(k, 0) > 0
            and (k not in PG_FAULTS or c.backend == "postgres")
            and (k != "pg_restart" or run.cluster is not None)
        },
        "pg_outages_s": rounded(
            latency_summary([end - start for start, end in run.outages if end < math.inf])
        ),
        "ledger": checker.ledger,
        "crash_hooks": checker.crash_hooks,
        "pipelines": checker.pipelines,
        "result_chains": checker.result_chains,
        "after_commit": checker.after_commit,
        "replays": checker.replays,
        "rate_limited": checker.rate,
        "concurrency_limited": checker.limited,
        "paused": checker.pauses,
        "fair_keys": checker.fair,
        "i2_timestamp_inversions": {
            "n": len(checker.inversions),
            "max_s": round(max((d for d, _ in checker.inversions), default=0.0), 4),
            "sample": [k for _, k in sorted(checker.inversions, reverse=True)[:5]],
        },
        "faults_skipped": dict(run.skipped),
        "sigstops_inside_a_transaction": sum(
            1 for f in run.faults if f.kind == "sigstop" and f.detail.get("open_transactions")
        ),
        "workers_started": len(run.procs),
        "reclaims_by_detected_by": dict(sorted(detected.items())),
        "detection_latency_s": {
            "sigkill+sigstop": rounded(latency_summary(all_latencies)),
            **{k: rounded(latency_summary(v)) for k, v in sorted(latencies.items())},
        },
        "reap_lag_after_lease_expiry_s": rounded(latency_summary(reap_lag)),
        "crashes_by_cause": dict(sorted(causes.items())),
        "crashes_without_injected_cause": len(unexplained),
        "crashes_without_injected_cause_sample": unexplained[:10],
        "checkpoint_resumes": resumed,
        "fenced_out_returns": fenced_returns,
        "overlapping_attempts": overlapping,
        "worker_events": dict(sorted(events.items())),
        "throughput_jobs_per_s": round(terminal / total, 2) if total else None,
        "throughput_executions_per_s": round(sum(outcomes.values()) / total, 2) if total else None,
        "side_file_bad_lines": side.bad_lines,
        "false_positive_reclaims": crashes.false_positives,
        **link_figures(checker),
        **(run.horizons.figures(checker) if run.horizons is not None else {}),
        **(run.hostile.figures() if run.hostile is not None else {}),
        **(run.nats.figures(checker) if run.nats is not None else {}),
        "anomalies": list(run.anomalies),
        "violations": list(checker.v),
        "ok": not checker.v,
    }


def link_figures(checker: Checker) -> dict[str, Any]:
    """The failover, partition and slow-link figures: when each failover's steps came
    and how soon the fleet carried on after its promotion (first claim, each worker's
    first claim, by the database's clock), what asynchronous failovers lost; each
    partition's jobs reclaimed and its worker's first claim after the heal."""
    run, links = checker.run, checker.run.links
    claims: dict[str, list[float]] = defaultdict(list)
    for job in checker.jobs.values():
        for e in job["executions"]:
            if (t := parse_ts(e["started_at"])) is not None:
                claims[e["worker_id"]].append(t)
    for times in claims.values():
        times.sort()

    def first_after(worker_id: str | None, t: float) -> float | None:
        later = [x for x in claims.get(worker_id or "", []) if x >= t]
        return round(later[0] - t, 3) if later else None

    failovers = []
    for r in links.failovers:
        if r.promoted_at is None or r.stopped_at is None:
            continue
        alive = [p for p in run.procs if p.id and p.started_at < r.stopped_at
                 and (p.exited_at or math.inf) > r.promoted_at]  # fmt: skip
        each = [x for p in alive if (x := first_after(p.id, r.promoted_at)) is not None]
        failovers.append({
            "number": r.number,
            "cut_s": None if r.cut_at is None else round(r.stopped_at - r.cut_at, 3),
            "outage_s": round(r.promoted_at - r.stopped_at, 3),
            "rejoin_s": None if r.rejoined_at is None
            else round(r.rejoined_at - r.promoted_at, 3),
            "first_claim_s": min(each, default=None),
            "every_worker_first_claim_s": rounded(latency_summary(each)),
            "workers_without_a_claim": len(alive) - len(each),
        })  # fmt: skip
    partitions = []
    last_claim = max((t for times in claims.values() for t in times), default=0.0)
    for _slot, state in sorted(links.links.items()):
        for span in state.cuts:
            proc = next((p for p in run.procs if p.number == span.worker), None)
            if proc is None:
                continue
            partitions.append({
                "worker": span.worker,
                "seconds": None if span.end == math.inf else round(span.end - span.start, 3),
                "first_claim_after_heal_s": first_after(proc.id, span.end),
                # healed near the end, when no job was left to claim: nothing to tell
                "late": span.end > last_claim - LATE_HEAL,
            })  # fmt: skip
    out: dict[str, Any] = {"fault_families": list(links.families)}
    if links.pair is not None:
        out["replication"] = "sync" if links.pair.synchronous else "async"
        out["failovers"] = failovers
        out["failover_carry_on_s"] = {
            "first_claim": rounded(latency_summary(
                [f["first_claim_s"] for f in failovers if f["first_claim_s"] is not None])),
            "outage": rounded(latency_summary([f["outage_s"] for f in failovers])),
        }  # fmt: skip
        out["failover_losses"] = dict(checker.losses)
        if run.not_enqueued:
            out["failover_losses"]["dependents_not_enqueued"] = len(run.not_enqueued)
        out["failover_crashes"] = len(checker.crashes.failover_crashes)
        out["failover_crashes_sample"] = checker.crashes.failover_crashes[:10]
    if links.proxied:
        heal = [p["first_claim_after_heal_s"] for p in partitions]
        out["partitions"] = {
            "n": len(partitions),
            "seconds": rounded(latency_summary([p["seconds"] for p in partitions
                                                if p["seconds"] is not None])),
            "first_claim_after_heal_s": rounded(latency_summary(
                [x for x in heal if x is not None])),
            "workers_without_a_claim_after_heal": sum(
                1 for p in partitions
                if p["first_claim_after_heal_s"] is None and not p["late"]
            ),
            "healed_too_late_to_tell": sum(
                1 for p in partitions
                if p["first_claim_after_heal_s"] is None and p["late"]
            ),
        }  # fmt: skip
        out["slow_links"] = {
            "slots_slow_all_run": sorted(links.slow_slots),
            "spells": sum(len(s.slow) for s in links.links.values()) - len(links.slow_slots),
            "ms_each_way": run.config.slow_ms,
        }
    return out


def overlaps(side: SideLog) -> int:
    """Attempts of one job whose runs overlapped in time (a fenced-out attempt still
    running when the next began: allowed, as long as its result never landed)."""
    by_job: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, start in side.starts.items():
        end = side.ends.get(key)
        by_job[key[0]].append((start["t"], end["t"] if end else start["t"]))
    count = 0
    for spans in by_job.values():
        spans.sort()
        for (_, end1), (start2, _) in itertools.pairwise(spans):
            if start2 < end1:
                count += 1
    return count


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values) if values else None,
    }


def rounded(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items()}


def format_report(fig: dict[str, Any]) -> str:
    lat = fig["detection_latency_s"]
    led = fig["ledger"]
    lines = [
        f"heartq chaos run: backend {fig['backend']}, seed {fig['seed']}",
        f"  duration      {fig['duration_s']}",
        f"  jobs          {fig['jobs']} -> {fig['statuses']}",
        f"  executions    {fig['executions']} -> {fig['outcomes']}",
        f"  faults        {fig['faults']} (skipped: {fig['faults_skipped'] or 'none'}; "
        f"SIGSTOPs inside a transaction: {fig['sigstops_inside_a_transaction']})",
        f"  workers       {fig['workers_started']} processes started",
        *(
            [f"  PostgreSQL down (stop to accepting again), seconds: {fig['pg_outages_s']}"]
            if fig["pg_outages_s"]["n"]
            else []
        ),
        f"  reclaims      {fig['reclaims_by_detected_by']}",
        *link_report(fig),
        *nats_report(fig),
        *horizon_report(fig),
        *hostile_report(fig),
        f"  ledger        {led['rows']} rows, {led['jobs_with_effect']} jobs with an effect of "
        f"{led['succeeded_jobs_of_ledger_kinds']} succeeded that write one, duplicates "
        f"{led['duplicates']}; results lost after the commit {led['results_lost_after_commit']}",
        f"  crash hooks   told of {fig['crash_hooks']['told']} of "
        f"{fig['crash_hooks']['crashed_executions']} crashed executions "
        f"(untold: {fig['crash_hooks']['untold']}; none twice, each a crashed one)",
        f"  pipelines     {fig['pipelines']}",
        f"  result chains {fig['result_chains']}",
        f"  after commit  {fig['after_commit']}",
        f"  replays       {fig['replays']}",
        f"  rate limited  {fig['rate_limited']} (starts in any {RATE_PERIOD:g} s, by the "
        "database's clock)",
        f"  concurrency   {fig['concurrency_limited']} (attempts of one key at once, by the "
        "database's clock)",
        f"  fair keys     {fig['fair_keys']} (each key's first claims in its order)",
        "  detection latency (detected_at - fault time), seconds:",
    ]
    for cause, s in lat.items():
        lines.append(f"    {cause:16} n={s['n']:<4} p50={s['p50']} p95={s['p95']} max={s['max']}")
    lines += [
        f"  crashes without an injected cause: {fig['crashes_without_injected_cause']}",
        f"  I2 timestamp inversions within {CLOCK_TOLERANCE} s (PostgreSQL's now()): "
        f"{fig['i2_timestamp_inversions']['n']}, max {fig['i2_timestamp_inversions']['max_s']} s",
        f"  checkpoint resumes {fig['checkpoint_resumes']}, fenced-out returns "
        f"{fig['fenced_out_returns']}, overlapping attempts {fig['overlapping_attempts']}",
        f"  worker events {fig['worker_events']}",
        f"  throughput    {fig['throughput_jobs_per_s']} jobs/s, "
        f"{fig['throughput_executions_per_s']} executions/s",
    ]
    if fig["anomalies"]:
        lines.append(
            f"  ANOMALIES (protocol, not I1-I6; {fig['false_positive_reclaims']} jobs taken "
            "from live workers):"
        )
        lines += [f"    - {a}" for a in fig["anomalies"][:20]]
    if fig["ok"]:
        lines.append("  INVARIANTS I1-I6 and effects exactly once: all held")
    else:
        lines.append(f"  INVARIANT VIOLATIONS ({len(fig['violations'])}):")
        lines += [f"    - {v}" for v in fig["violations"]]
    return "\n".join(lines)


def link_report(fig: dict[str, Any]) -> list[str]:
    """The lines of the failover, partition and slow-link figures (none without them)."""
    lines = []
    if "failovers" in fig:
        lines.append(
            f"  failovers     {len(fig['failovers'])} ({fig['replication']} replication); "
            f"from the promotion, seconds: {fig['failover_carry_on_s']}; losses counted "
            f"(asynchronous only): {fig['failover_losses'] or 'none'}; attempts counted "
            f"(crashed) for a failover: {fig['failover_crashes']}"
        )
        for f in fig["failovers"][:40]:
            lines.append(f"    {f}")
    if "partitions" in fig:
        lines.append(f"  partitions    {fig['partitions']}")
        lines.append(f"  slow links    {fig['slow_links']}")
    return lines
