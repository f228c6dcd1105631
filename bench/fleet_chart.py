"""Draws the fleet section's figures (run with matplotlib's interpreter, the peers'
environment): the rate of each fleet round by round, the claim's time on the server, and
what the held jobs cost by statement.

    .bench-venv/bin/python bench/fleet_chart.py docs/bench/fleet.json docs/images/fleet.png
"""

from __future__ import annotations

import json
import sys

import matplotlib  # type: ignore[import-not-found]

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # type: ignore[import-not-found]


def main(source: str, target: str) -> None:
    with open(source) as file:
        results = json.load(file)
    sizes, summary = results["sizes"], results["summary"]
    fleets = [w for w in (sizes["baseline"], sizes["workers"]) if str(w) in summary]
    labels = [f"{w} x {sizes['concurrency']}" for w in fleets]
    fig, (rate, claim, held) = plt.subplots(1, 3, figsize=(14, 4.6))

    for x, workers in enumerate(fleets):
        rate.bar(x, summary[str(workers)]["rate"], color="tab:red" if x else "tab:gray", alpha=0.6)
    for pair in summary.get("pairs", []):
        rates = [
            next(
                r["rate"]
                for r in results["processing"]
                if r["round"] == pair["round"] and r["workers"] == w
            )
            for w in fleets
        ]
        rate.plot(range(len(fleets)), rates, "k.-", markersize=7, linewidth=0.8)
        rate.annotate(
            f"round {pair['round']}: {pair['ratio']:.2f}x",
            (1, rates[-1]),
            xytext=(6, 0),
            textcoords="offset points",
            fontsize=8,
            va="center",
        )
    rate.set_xticks(range(len(fleets)), labels)
    rate.set_xlim(-0.6, 1.9)
    rate.set_ylabel("no-op jobs/s (bars: median; dots: a round's pair)")
    title = f"{sizes['jobs']:,} jobs"
    if "ratio" in summary:
        title += f": {summary['ratio']:.2f}x (median of rounds)"
    rate.set_title(title)

    kinds = [
        ("claim.mean_ms", "mean (all calls)"),
        ("claim_sampled.p50", "p50 (sampled)"),
        ("claim_sampled.p99", "p99 (sampled)"),
        ("claim.max_ms", "max (all calls)"),
    ]
    width = 0.8 / len(kinds)
    for k, (key, name) in enumerate(kinds):
        values = [summary[str(w)][key] for w in fleets]
        claim.bar([x + (k - 1.5) * width for x in range(len(fleets))], values, width, label=name)
    claim.set_xticks(range(len(fleets)), labels)
    claim.set_yscale("log")
    claim.set_ylabel("claim statement, ms on the server")
    claim.set_title("Claim time (pg_stat_statements; sampled log)")
    claim.legend(fontsize=7)

    h = results.get("held")
    if h and "by_statement" in h:
        rows = h["by_statement"][:10]
        held.barh(range(len(rows)), [s["per_s"] for s in rows], color="tab:blue")
        held.set_yticks(range(len(rows)), [s["kind"][:30] for s in rows], fontsize=7)
        held.invert_yaxis()
        held.set_xlabel("calls/s")
        held.set_title(
            f"{h['slots']:,} running {h['hold_s']:g} s jobs: "
            f"{h['statements_per_s']:,.0f} statements/s,\n"
            f"{h['commits_per_s']:,.0f} commits/s, server CPU "
            f"{h['server_cpu_cores']:.2f} cores",
            fontsize=9,
        )
    fig.suptitle(
        f"A thousand slots on one PostgreSQL ({sizes['workers']} workers x "
        f"{sizes['concurrency']} against {sizes['baseline']} x {sizes['concurrency']})"
    )
    fig.tight_layout()
    fig.savefig(target, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
