"""Process-pool children reused and recycled (`--max-jobs-per-child`,
`--max-memory-per-child`), through real worker processes on both backends: every job
runs exactly once, a child runs at most its number of attempts, a child whose memory
grew past the ceiling is replaced after reporting its attempt, and its replacement takes
the next job."""

from __future__ import annotations

import collections
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import on_every_backend

from .conftest import Harness
from .worker_tasks import TASKS_SOURCE

pytestmark = [pytest.mark.slow, on_every_backend]

CHILD_TASKS = textwrap.dedent(
    """

    LEAKED = []


    def rss():
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


    @app.task
    def in_a_child(ctx, n):
        mark(f"ran-{ctx.job_id}-{ctx.attempt}-{os.getpid()}")
        return {"pid": os.getpid(), "n": n}


    @app.task
    def sleeps_in_a_child(ctx, seconds=120.0):
        # never looks at ctx.cancelled: only killing its child stops it early
        mark(f"sleeping-{ctx.job_id}", str(os.getpid()))
        time.sleep(seconds)


    @app.task
    def leaks(ctx, mib):
        LEAKED.append(b"x" * (mib << 20))  # written: resident, kept by the child
        mark(f"ran-{ctx.job_id}-{ctx.attempt}-{os.getpid()}")
        return {"pid": os.getpid(), "rss": rss()}
    """
)
MIB = 1 << 20
ROOMY: dict[str, str | None] = {"--lease": "10", "--heartbeat-interval": "1"}
"""A lease no load can outrun: these tests count attempts, and under the suite's 0.5 s
trust window a loaded run's heartbeat came late once, and its first job was run again
(`interrupted`, then `succeeded`): the lease is not what they are about."""


def _run_all(harness: Harness, task: str, args: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Enqueue one job per arguments, in order, and wait for each to succeed."""
    ids = [harness.enqueue(task, a) for a in args]
    return [harness.wait_status(job_id, "succeeded", 60) for job_id in ids]


def _ran_once(harness: Harness, jobs: list[dict[str, Any]]) -> None:
    """Each job had one attempt, which succeeded, and its code ran once (one mark)."""
    for job in jobs:
        assert [e["outcome"] for e in job["executions"]] == ["succeeded"], job
    names = sorted(path.name for path in harness.dir.glob("ran-*"))
    assert len(names) == len(jobs), names
    for job in jobs:
        assert sum(name.startswith(f"ran-{job['id']}-1-") for name in names) == 1, names


def test_a_child_runs_at_most_its_jobs_and_every_job_runs_once(harness: Harness) -> None:
    harness.path("tasks.py").write_text(TASKS_SOURCE + CHILD_TASKS)
    worker = harness.start_worker(
        "--pool", "process", "--concurrency", "2", "--max-jobs-per-child", "3", settings=ROOMY
    )
    started = worker.events("worker_started")[0]
    assert (started["max_jobs_per_child"], started["max_memory_per_child"]) == (3, None)
    jobs = _run_all(harness, "in_a_child", [{"n": n} for n in range(20)])
    _ran_once(harness, jobs)
    per_child = collections.Counter(job["result"]["pid"] for job in jobs)
    assert max(per_child.values()) == 3, per_child  # reused, never past 3
    assert len(per_child) >= 7, per_child  # 20 jobs, 3 at most each
    recycled = worker.events("child_recycled")
    assert recycled and all(
        (e["reason"], e["jobs"]) == ("max_jobs_per_child", 3) for e in recycled
    ), recycled
    assert {e["pid"] for e in recycled} <= set(per_child)
    assert harness.wait_for(
        lambda: len(worker.events("child_recycled")) >= sum(n == 3 for n in per_child.values()),
        10,
        "each child that ran 3 jobs to be recycled",
    )


def test_a_child_past_the_memory_ceiling_is_replaced_after_its_job(harness: Harness) -> None:
    """Each job leaks 40 MiB in its child; past 200 MiB, the child reports its job, then
    exits, and the next job starts in a new child. Jobs run one at a time, in order."""
    harness.path("tasks.py").write_text(TASKS_SOURCE + CHILD_TASKS)
    worker = harness.start_worker(
        "--pool", "process", "--concurrency", "1", "--max-memory-per-child", "200", settings=ROOMY
    )
    jobs = _run_all(harness, "leaks", [{"mib": 40} for _ in range(12)])
    _ran_once(harness, jobs)
    pids = [job["result"]["pid"] for job in jobs]
    runs = [list(group) for group in _consecutive(pids)]
    assert len(runs) >= 2, pids  # replaced at least once
    assert len({run[0] for run in runs}) == len(runs), pids  # a child never comes back
    assert max(len(run) for run in runs) >= 2, pids  # reused below the ceiling
    recycled = harness.wait_for(
        lambda: worker.events("child_recycled") if len(worker.events("child_recycled"))
        >= len(runs) - 1 else None,
        10,
        "the replaced children's events",
    )
    by_pid = {e["pid"]: e for e in recycled}
    for run in runs[:-1]:  # each child replaced: after the job that took it past 200 MiB
        event = by_pid[run[0]]
        assert event["reason"] == "max_memory_per_child"
        assert event["rss"] > 200 * MIB and event["jobs"] == len(run)
        rss = [job["result"]["rss"] for job in jobs if job["result"]["pid"] == run[0]]
        assert all(r <= 200 * MIB for r in rss[:-1]), rss  # kept while under the ceiling


def test_a_stopped_child_is_killed_and_never_reused(harness: Harness) -> None:
    """A cancel kills the reused child running a job that does not listen (after the
    cancel grace); the next job starts in a new child, not the dead one."""
    harness.path("tasks.py").write_text(TASKS_SOURCE + CHILD_TASKS)
    harness.start_worker("--pool", "process", "--concurrency", "1", "--max-jobs-per-child", "0")
    (first,) = _run_all(harness, "in_a_child", [{"n": 0}])
    pid = first["result"]["pid"]
    job_id = harness.enqueue("sleeps_in_a_child", {})
    sleeping = harness.path(f"sleeping-{job_id}")
    harness.wait_for(sleeping.exists, 20, "the sleeper to start")
    assert int(sleeping.read_text()) == pid  # the idle child took it
    harness.store.cancel_job(job_id, by="test")
    done = harness.wait_status(job_id, "cancelled", 30)
    assert [e["outcome"] for e in done["executions"]] == ["cancelled"]
    harness.wait_for(lambda: not _alive(pid), 10, f"child {pid} to be gone")
    (after,) = _run_all(harness, "in_a_child", [{"n": 1}])
    assert after["result"]["pid"] != pid


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie, killed and not yet collected, does not). A
    process reaped while its stat is read fails the read with ESRCH
    (`ProcessLookupError`), not only `FileNotFoundError`: both say it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _consecutive(items: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for item in items:
        if runs and runs[-1][-1] == item:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs
