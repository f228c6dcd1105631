"""From the rounds' records to figures: min / median / max, ratios, JSON and markdown.

Ratios are heartq's median over the other's median, heartq in the same setting (same
backend and number of worker processes) where there is one: above 1, heartq is faster.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BEGIN = "<!-- bench:results:begin -->"
END = "<!-- bench:results:end -->"
BACKEND_TITLES = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "redis": "Redis"}
MEASURES = [
    ("process", "processing"),
    ("enqueue_single", "enqueue one at a time"),
    ("enqueue_batch", "enqueue in batches of 100"),
]


def spread(values: Iterable[float]) -> dict[str, float]:
    found = sorted(values)
    return {"min": found[0], "median": statistics.median(found), "max": found[-1]}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per contender setting and per limit: the spread of each measure over the rounds."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    limits: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for one in rounds:
        for record in one["contenders"]:
            runs[(record["backend"], record["label"])].append(record)
        for record in one["limits"]:
            limits[(record["backend"], record["label"])].append(record)
    contenders = [_contender(backend, label, records) for (backend, label), records in runs.items()]
    _add_ratios(contenders)
    return {
        "contenders": contenders,
        "limits": [
            {"backend": b, "label": label, "unit": rs[0]["unit"], **_values(rs, "value")}
            for (b, label), rs in limits.items()
        ],
        "failures": [
            {"label": r["label"], "backend": r["backend"], "error": r["error"]}
            for one in rounds
            for r in [*one["contenders"], *one["limits"]]
            if "error" in r
        ],
    }


def _contender(backend: str, label: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in records if "error" not in r]
    entry: dict[str, Any] = {"backend": backend, "label": label, "runs": len(ok)}
    if ok:
        first = ok[0]
        entry |= {k: first[k] for k in ("contender", "version", "workers", "settings")}
        entry["notes"] = sorted({n for r in ok for n in r.get("notes", [])
                                 if not n.startswith("workers ran")})  # fmt: skip
        for key, _ in MEASURES:
            entry[key] = spread(r[key] for r in ok)
        entry["all_processed"] = all(r["processed"] == r["jobs"] for r in ok)
    return entry


def _values(records: list[dict[str, Any]], key: str) -> dict[str, Any]:
    ok = [r[key] for r in records if "error" not in r]
    return spread(ok) if ok else {"error": records[0].get("error", "?")}


CLAIMS_ASYNC = "claims not waiting for their flush"
"""What a heartq run's settings say when its claims commit without waiting for their flush
(`heartq_side.py --claim-commit async`)."""
BEFORE = "heartq (before)"
"""The contender name of a `--before` run (bench/runs.py)."""


def _add_ratios(contenders: list[dict[str, Any]]) -> None:
    # The peers are compared with heartq at its defaults (a thread pool, no claim ahead:
    # `ratio`), and with heartq at its setting for short jobs where the run has it
    # (`short_jobs_ratio`: an async task, as many slots as pgqueuer's batch); the prefetch
    # runs are read against those in BENCHMARKS.md. A fairness run is compared with the
    # run of the same jobs' arguments without a fairness key (`fairness_ratio`), never
    # with the peers; a run whose claims do not wait for their flush with the same run
    # whose claims do (`claim_commit_ratio`).
    plain, short, keyed = {}, {}, {}
    for c in contenders:
        settings = str(c.get("settings"))
        if c.get("contender") != "heartq" or "prefetch" in settings or CLAIMS_ASYNC in settings:
            continue
        if "no fairness" in settings:
            keyed[(c["backend"], c["workers"])] = c
        elif "fairness" not in settings:
            async_pool = "async pool" in settings
            (short if async_pool else plain)[(c["backend"], c["workers"])] = c
    by_label = {(c["backend"], c["label"]): c for c in contenders}
    for entry in contenders:
        if "contender" not in entry:
            continue
        if entry["contender"] == "heartq":
            settings = str(entry.get("settings"))
            off = keyed.get((entry["backend"], entry["workers"]))
            if CLAIMS_ASYNC in settings:
                off = (short if "async pool" in settings else plain).get(
                    (entry["backend"], entry["workers"])
                )
                prefix = "claim_commit_"
            else:
                prefix = "fairness_" if "fairness keys" in settings else ""
            if off is not None and prefix:
                entry[f"{prefix}heartq_setting"] = off["label"]
                entry[f"{prefix}ratio"] = {
                    key: _ratio(entry[key]["median"], off[key]["median"]) for key, _ in MEASURES
                }
            continue
        if entry["contender"] == BEFORE:  # `--before`: now / before, same settings
            now = by_label.get((entry["backend"], entry["label"].replace(" (before)", "")))
            if now is not None and "contender" in now:
                entry["heartq_setting"] = f"{now['label']} ({BACKEND_TITLES[now['backend']]})"
                entry["ratio"] = {
                    key: _ratio(now[key]["median"], entry[key]["median"]) for key, _ in MEASURES
                }
            continue
        for ours_by, prefix in ((plain, ""), (short, "short_jobs_")):
            ours = ours_by.get((entry["backend"], entry["workers"])) or ours_by.get(
                ("postgresql", entry["workers"])
            )
            if ours is None:
                continue
            entry[f"{prefix}heartq_setting"] = (
                f"{ours['label']} ({BACKEND_TITLES[ours['backend']]})"
            )
            entry[f"{prefix}ratio"] = {
                key: _ratio(ours[key]["median"], entry[key]["median"]) for key, _ in MEASURES
            }


def _ratio(ours: float, theirs: float) -> float | None:
    return ours / theirs if ours and theirs else None


def markdown(results: dict[str, Any]) -> str:
    """The section of docs/BENCHMARKS.md this run writes."""
    summary = results["summary"]
    lines = [
        BEGIN,
        f"Measured {results['date']} with `{results['command']}`: {results['rounds']} rounds, "
        f"{results['sizes']['jobs']:,} no-op jobs per run ({results['sizes']['single']:,} of "
        "them enqueued one at a time, the rest in batches of 100), contenders interleaved "
        "round by round. Processing is counted from the first handler entry to the last "
        "completion the library committed. Figures are jobs/s, min / median / max; a "
        "ratio is heartq's median over the contender's (above 1: heartq is faster); a "
        "fairness run's, its median over the run of the same jobs without fairness keys.",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()) + ".",
        "",
        "![throughput](bench/throughput.png)",
        "",
    ]
    for backend, title in BACKEND_TITLES.items():
        rows = [c for c in summary["contenders"] if c["backend"] == backend and "process" in c]
        if not rows:
            continue
        lines += [f"#### {title}", "", "| contender | version | setting | "
                  + " | ".join(name for _, name in MEASURES) + " | heartq / it (processing) |",
                  "| --- " * (4 + len(MEASURES)) + "|"]  # fmt: skip
        for c in rows:
            cells = [_cell(c[key]) for key, _ in MEASURES]
            against = "; ".join(
                f"{ratio:.2f} (vs {c[prefix + 'heartq_setting']})"
                for prefix in ("", "short_jobs_", "fairness_", "claim_commit_")
                if (ratio := c.get(prefix + "ratio", {}).get("process"))
            )
            lines.append(f"| {c['label']} | {c['version']} | {c['settings']} | "
                         + " | ".join(cells) + f" | {against} |")  # fmt: skip
        lines.append("")
    lines += ["#### Raw limits, same run", "", "| limit | backend | min / median / max |",
              "| --- | --- | --- |"]  # fmt: skip
    for limit in summary["limits"]:
        value = limit.get("error") or f"{_cell(limit)} {limit['unit']}"
        lines.append(f"| {limit['label']} | {BACKEND_TITLES[limit['backend']]} | {value} |")
    if summary["failures"]:
        lines += ["", "Failed runs:", ""]
        lines += [f"- {f['label']} ({f['backend']}): {f['error']}" for f in summary["failures"]]
    lines += ["", END]
    return "\n".join(lines)


def _cell(values: dict[str, float]) -> str:
    if values["max"] == 0:
        return "n/a"
    return f"{values['min']:,.0f} / {values['median']:,.0f} / {values['max']:,.0f}"


def write_section(doc: Path, section: str) -> None:
    """Put `section` between the markers in `doc` (appended if it has none)."""
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Side by side: `python -m bench`\n\n" + section + "\n"
    doc.write_text(text)
