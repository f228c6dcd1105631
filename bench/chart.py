"""Draws the processing figures of a `python -m bench` run (run with matplotlib's
interpreter, the peers' environment): one panel per backend, a bar per contender setting
(median, whiskers min to max), heartq's bare-statement ceiling (batch 100) as a line.

    .bench-venv/bin/python bench/chart.py docs/bench/results.json docs/bench/throughput.png
"""

from __future__ import annotations

import json
import sys

import matplotlib  # type: ignore[import-not-found]

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # type: ignore[import-not-found]

PANELS = [("postgresql", "PostgreSQL"), ("sqlite", "SQLite (and RQ on Redis)")]


def main(source: str, target: str) -> None:
    with open(source) as file:
        results = json.load(file)
    summary = results["summary"]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(12, 4.8))
    for axis, (backend, title) in zip(axes, PANELS, strict=True):
        rows = [
            c
            for c in summary["contenders"]
            if "process" in c
            and (c["backend"] == backend or (backend == "sqlite" and c["backend"] == "redis"))
        ]
        medians = [c["process"]["median"] for c in rows]
        low = [c["process"]["median"] - c["process"]["min"] for c in rows]
        high = [c["process"]["max"] - c["process"]["median"] for c in rows]
        colors = ["tab:red" if c["contender"] == "heartq" else "tab:gray" for c in rows]
        axis.bar(range(len(rows)), medians, yerr=[low, high], color=colors, capsize=4)
        axis.set_xticks(range(len(rows)))
        axis.set_xticklabels([c["label"] for c in rows], rotation=30, ha="right", fontsize=8)
        for limit in summary["limits"]:
            if (
                limit["backend"] == backend
                and limit["label"].endswith("batch 100")
                and ("median" in limit)
            ):
                axis.axhline(limit["median"], color="tab:blue", linestyle="--", linewidth=1)
                axis.annotate("heartq statements alone, batch 100", (0, limit["median"]),
                              fontsize=7, color="tab:blue", va="bottom")  # fmt: skip
        axis.set_title(title)
        axis.set_ylabel("no-op jobs/s (median; min-max)")
    fig.suptitle(f"Processing, {results['sizes']['jobs']:,} jobs, {results['rounds']} rounds, "
                 f"{results['date']}")  # fmt: skip
    fig.tight_layout()
    fig.savefig(target, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
