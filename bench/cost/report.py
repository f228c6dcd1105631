"""`bench.cost`'s figures per job, and the table it prints (Markdown, as BENCHMARKS.md
shows it).

A figure per job is marginal: (the round of 2N jobs - the round of N) / N, so what a
phase pays once (connections, start-up, the workers' registration, the last empty poll)
cancels out, as it does for the instructions.
"""

from __future__ import annotations

from typing import Any

ROWS = [
    ("server instructions", ("server_instructions",), "k"),
    ("statements / round trips", ("statements", "round_trips"), "2"),
    ("bytes client -> server / back", ("bytes_sent", "bytes_received"), "0"),
    ("WAL bytes / records", ("wal_bytes", "wal_records"), "0/1"),
    ("B-tree entries", ("btree_entries",), "1"),
    ("heap LOCK records", ("heap_lock_records",), "1"),
    ("buffers hit / dirtied", ("buffers_hit", "buffers_dirtied"), "1"),
    ("rows inserted / updated / deleted / HOT", (
        "rows_inserted", "rows_updated", "rows_deleted", "rows_hot_updated"), "2"),
]  # fmt: skip
CPU_COLUMNS = [
    ("jobs/s", "processing_jobs_per_s", 0),
    ("busy cores", "busy_cores_while_processing", 2),
    ("CPU a job, µs", "cpu_us_per_job", 1),
    ("server", "server_us_per_job", 1),
    ("the rest", "rest_us_per_job", 1),
    ("workers' own", "workers_us_per_job", 1),
]


def per_job(small: dict[str, Any], large: dict[str, Any]) -> dict[str, float]:
    """The marginal figures per job of a phase measured at N and 2N jobs."""
    extra = large["jobs"] - small["jobs"]
    return {
        name: (large["figures"][name] - small["figures"][name]) / extra for name in large["figures"]
    }


def _number(value: float, style: str) -> str:
    if style == "k":
        return f"{value / 1000:,.0f} k" if abs(value) >= 10_000 else f"{value / 1000:,.1f} k"
    return f"{value:,.{int(style)}f}"


def _cell(figures: dict[str, float], names: tuple[str, ...], style: str) -> str:
    if any(n not in figures for n in names):
        return "-"
    styles = style.split("/") if "/" in style else [style] * len(names)
    return " / ".join(_number(figures[n], s) for n, s in zip(names, styles, strict=True))


def _ratio(ours: dict[str, float], theirs: dict[str, float], names: tuple[str, ...]) -> str:
    if any(n not in ours or n not in theirs for n in names):
        return "-"
    return " / ".join(f"{ours[n] / theirs[n]:.2f}" if theirs[n] else "-" for n in names)


def markdown(results: dict[str, Any]) -> str:
    """The per-job tables: each phase's counts side by side (with the first contender
    over the last where there are two or more), then the workers' side."""
    labels = results["labels"]
    names = list(results["per_job"])
    header = ["per job", *(labels[n] for n in names)]
    compare = len(names) > 1
    if compare:
        header.append(f"{labels[names[0]]} / {labels[names[-1]]}")
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for phase, title in (("enqueue", results["enqueue_title"]), ("work", "work phase")):
        lines.append(f"| **{title}** |" + " |" * (len(header) - 1))
        for label, keys, style in ROWS:
            cells = [_cell(results["per_job"][n][phase], keys, style) for n in names]
            if compare:
                first, last = (results["per_job"][n][phase] for n in (names[0], names[-1]))
                cells.append(_ratio(first, last, keys))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    small, large = results["jobs"]
    note = f"Marginal per job between rounds of {small:,} and {large:,} jobs"
    if "callgrind_jobs" in results:
        under = results["callgrind_jobs"]
        note += f"; server instructions under callgrind, rounds of {under[0]:,} and {under[1]:,}"
    lines += ["", note + "."]
    if results.get("cpu"):
        lines += ["", "| worker's side (bench.cpu_per_job) | "
                  + " | ".join(c for c, _, _ in CPU_COLUMNS) + " |",
                  "|" + " --- |" * (len(CPU_COLUMNS) + 1)]  # fmt: skip
        for name, cpu in results["cpu"].items():
            cells = [f"{cpu[key]:,.{digits}f}" for _, key, digits in CPU_COLUMNS]
            lines.append(f"| {labels[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
