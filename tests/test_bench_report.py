"""`bench.report.summarize`: which heartq run each ratio is taken against.

The peers are compared with heartq's default run (a thread pool, no claim ahead, no
fairness key) and with its setting for short jobs; a fairness run with the run of the
same jobs' arguments without a fairness key; a run whose claims do not wait for their
flush with the same run whose claims do. Once the fairness run was taken for the default
(both are thread pools of two processes), and pgqueuer's ratio read 0.67 where the
default's was 0.81.
"""

from __future__ import annotations

from typing import Any

from bench.report import summarize

SETTINGS = {
    "heartq, 2 processes": ("heartq", "2 processes, thread pool x 50, burst", 8_000),
    "heartq, 2 processes, async x 100": (
        "heartq", "2 processes, async pool x 100, burst, async def task", 10_000,
    ),
    "heartq, 2 processes, 20 fairness keys": (
        "heartq", "2 processes, thread pool x 50, burst, 20 fairness keys", 6_000,
    ),
    "heartq, 2 processes, 20 keys' arguments, no fairness": (
        "heartq", "2 processes, thread pool x 50, burst, 20 keys' arguments, no fairness",
        7_500,
    ),
    "heartq, 2 processes, claims async": (
        "heartq", "2 processes, thread pool x 50, burst, claims not waiting for their flush",
        12_000,
    ),
    "heartq, 2 processes, async x 100, claims async": (
        "heartq",
        "2 processes, async pool x 100, burst, async def task, claims not waiting for their flush",
        12_500,
    ),
    "pgqueuer, 2 processes": ("pgqueuer", "2 processes, asyncpg, batch_size 100", 10_000),
}  # fmt: skip


def record(label: str) -> dict[str, Any]:
    contender, settings, processed = SETTINGS[label]
    return {
        "label": label, "backend": "postgresql", "contender": contender, "version": "1",
        "workers": 2, "settings": settings, "jobs": 100, "processed": 100,
        "process": processed, "enqueue_single": 1_000, "enqueue_batch": 10_000,
    }  # fmt: skip


def test_each_ratio_is_taken_against_its_own_heartq_run() -> None:
    summary = summarize([{"contenders": [record(label) for label in SETTINGS], "limits": []}])
    by_label = {c["label"]: c for c in summary["contenders"]}
    peer = by_label["pgqueuer, 2 processes"]
    assert peer["heartq_setting"].startswith("heartq, 2 processes (")
    assert peer["ratio"]["process"] == 0.8
    assert peer["short_jobs_heartq_setting"].startswith("heartq, 2 processes, async x 100")
    assert peer["short_jobs_ratio"]["process"] == 1.0
    fair = by_label["heartq, 2 processes, 20 fairness keys"]
    assert fair["fairness_heartq_setting"] == (
        "heartq, 2 processes, 20 keys' arguments, no fairness"
    )
    assert fair["fairness_ratio"]["process"] == 0.8
    assert "fairness_ratio" not in by_label["heartq, 2 processes"]
    lazy = by_label["heartq, 2 processes, claims async"]
    assert lazy["claim_commit_heartq_setting"] == "heartq, 2 processes"
    assert lazy["claim_commit_ratio"]["process"] == 1.5
    short = by_label["heartq, 2 processes, async x 100, claims async"]
    assert short["claim_commit_heartq_setting"] == "heartq, 2 processes, async x 100"
    assert short["claim_commit_ratio"]["process"] == 1.25
