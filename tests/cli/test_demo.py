"""`heartq demo`: a worker killed with SIGKILL, its jobs recovered, nothing left behind.

The demo runs the way a user runs it, `python -m heartq demo`, in a subprocess whose
temporary files go under `tmp_path` (TMPDIR), so a scan of /proc for command lines that
mention `tmp_path` finds any worker process the demo failed to stop.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from heartq.store import open_store

DEMO_TIMEOUT = 120.0
"""Generous: the demo itself gives up after 50 s, and must finish in under 60 s."""

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")}
    env.update(TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1", COLUMNS="200")
    return env


def _run_demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "heartq", "demo", "--jobs", "8", "--workers", "2", *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
    )
    return proc, time.monotonic() - started


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain `text` (no psutil: /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        cmdline = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        if cmdline and text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def _explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def _assert_recovered(out: str) -> tuple[int, str]:
    result = re.search(
        r"result: all (\d+) jobs succeeded; (\d+) recovered from the killed worker "
        r"(demo-worker-\d+)",
        out,
    )
    assert result, out
    assert int(result.group(1)) == 8
    recovered = int(result.group(2))
    assert recovered >= 1
    assert "8/8 jobs succeeded" in out
    assert re.search(rf"{result.group(3)} \(pid \d+\) was killed with SIGKILL", out), out
    assert re.search(r"detection: .+ \(\d+\.\d+(-\d+\.\d+)? s after the kill\)", out), out
    return recovered, result.group(3)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scans /proc")
def test_demo_recovers_the_killed_workers_jobs_and_cleans_up(tmp_path: Path) -> None:
    proc, wall = _run_demo(tmp_path, "--no-live")

    assert proc.returncode == 0, _explain(proc)
    _assert_recovered(proc.stdout)
    assert "worker demo-worker-" in proc.stdout and "killed (SIGKILL) holding" in proc.stdout
    assert "held job" in proc.stdout
    assert "survivors stopped with SIGTERM; temporary files removed" in proc.stdout
    assert wall < 60, f"the demo took {wall:.1f} s"
    assert _processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.glob("heartq-demo-*")) == [], "the temporary directory is left"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scans /proc")
def test_demo_on_a_given_url_keeps_the_story_in_the_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    proc, _ = _run_demo(tmp_path, "--no-live", "--keep", "--url", url)

    assert proc.returncode == 0, _explain(proc)
    recovered, victim = _assert_recovered(proc.stdout)
    assert _processes_mentioning(str(tmp_path)) == []
    (workdir,) = tmp_path.glob("heartq-demo-*")
    assert sorted(p.name for p in workdir.glob("*.log")) == [
        "demo-worker-1.log",
        "demo-worker-2.log",
    ]

    store = open_store(url)
    try:
        jobs = [store.get_job(j["id"]) for j in store.list_jobs(queue="heartq-demo")]
        assert len(jobs) == 8
        assert {j["status"] for j in jobs} == {"succeeded"}
        workers = {w["id"]: w for w in store.list_workers(include_all=True)}
        (killed,) = [w for w in workers.values() if w["name"] == victim]
        assert killed["status"] == "inactive"
        assert {w["status"] for w in workers.values() if w["name"] != victim} == {"stopped"}
        crashed = [
            (job, e)
            for job in jobs
            for e in job["executions"]
            if e["outcome"] == "crashed" and e["worker_id"] == killed["id"]
        ]
        assert len(crashed) == recovered
        for job, execution in crashed:
            crash = execution["crash"]
            assert crash["worker_id"] == killed["id"]
            assert crash["detected_by"] in {"liveness_lock", "stale_worker", "lease_expired"}
            assert crash["detected_at"]
            final = job["executions"][-1]
            assert final["outcome"] == "succeeded"
            assert final["worker_id"] != killed["id"]
            assert final["execution_id"] > execution["execution_id"]
    finally:
        store.link.close()


def test_demo_needs_a_survivor(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "heartq", "demo", "--workers", "1", "--no-live"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, _explain(proc)
    assert "--workers" in proc.stderr
