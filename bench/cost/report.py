"""`bench.cost`'s figures per job, and the tables it prints (Markdown, as BENCHMARKS.md
shows them).

A figure per job is marginal: (the round of 2N jobs - the round of N) / N, so what a
phase pays once (connections, start-up, the workers' registration, the last empty poll)
cancels out, as it does for the instructions.
"""

from __future__ import annotations

from typing import Any

ROWS = [
    ("server instructions", ("server_instructions",), "k"),
    ("statements / plans / round trips", ("statements", "plans", "round_trips"), "2"),
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
    over the last where there are two or more), then the workers' side, then the storage
    (`storage_markdown`); each where the run measured it."""
    parts = [counts_markdown(results)] if results.get("per_job") else []
    if results.get("storage"):
        parts.append(storage_markdown(results))
    return "\n\n".join(parts)


def storage_markdown(results: dict[str, Any]) -> str:
    """What a finished job left in each contender's schema: a row for the schema and one
    for each table that grew, a column for each shape (burst, flow) as the drain left it
    and after a VACUUM, each cell its bytes a job (heap, TOAST, indexes) and, for a
    table, its heap's (with TOAST and maps) and that heap's free space and dead tuples."""
    shapes = results["storage_jobs"]
    titles = {
        "burst": f"burst of {shapes['burst']:,}",
        "flow": f"flow of {shapes['flow']:,} at {shapes['flow_rate']:,.0f}/s",
    }
    header = ["B a finished job (heap B: free % / dead %)"] + [
        f"{titles[shape]}, {when}" for shape in titles for when in ("drained", "vacuumed")
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, shapes_of in results["storage"].items():
        cells = [f"**{_bytes(shapes_of[s][w]['bytes_per_job'])}**"
                 for s in titles for w in ("drained", "vacuumed")]  # fmt: skip
        lines.append(f"| **{results['labels'][name]}**, its schema | " + " | ".join(cells) + " |")
        grown = {
            table
            for shape in shapes_of.values()
            for table, t in shape["drained"]["tables"].items()
            if t["total_bytes"] > 0
        }
        for table in sorted(grown, key=lambda t: -shapes_of["burst"]["drained"]["tables"][t]
                            ["total_bytes"]):  # fmt: skip
            cells = [_table_cell(shapes_of[s][w]["tables"].get(table))
                     for s in titles for w in ("drained", "vacuumed")]  # fmt: skip
            lines.append(f"| {table} | " + " | ".join(cells) + " |")
    flows = ", ".join(
        f"{results['labels'][n]} {s['flow']['depth_max']:,} at most"
        for n, s in results["storage"].items()
    )
    lines += ["", "Growth from the schema as set up (and vacuumed), over the jobs finished; "
              "autovacuum off, VACUUM plain; heap: pg_table_size (with TOAST, free space and "
              f"visibility maps). Queue depth sampled in the flow: {flows}."]  # fmt: skip
    return "\n".join(lines)


def _bytes(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _table_cell(table: dict[str, Any] | None) -> str:
    if table is None:
        return "-"
    return (f"{_bytes(table['bytes_per_job'])} (heap {_bytes(table['table_bytes_per_job'])}: "
            f"{table['free_percent']:.0f} / {table['dead_tuple_percent']:.0f})")  # fmt: skip


def counts_markdown(results: dict[str, Any]) -> str:
    """The counted rounds' tables (and the workers' side)."""
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
