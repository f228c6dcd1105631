"""`python -m bench --quick` runs every contender and every limit end to end.

The harness is code too: this runs it on tiny counts (one round, 400 jobs) against a
private PostgreSQL cluster and a private redis-server, installing the peers into their
own environment once, and checks that every contender processed every job and every
limit gave a figure. No speed is asserted. Private servers, because the benchmark makes
databases of fixed names (and empties a fixed Redis database): on a shared server, two
suites running at once (from two clones) would drop each other's, and a killed run would
leave them there.

They are not part of the default suite (about two minutes, most of it installing and
running the peers): `scripts/bench-check` runs them, and should before a change to
`bench/` lands. They run in one xdist group, one after the other: the first to run
installs the peers' environment (`.bench-venv`), which the others would otherwise find
half made.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import pg_harness
from tests.support import free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")  # one at a time: the first installs the peers
@pytest.mark.timeout(600)
def test_quick_benchmark_runs_every_contender(tmp_path: Path) -> None:
    out = tmp_path / "out"
    nothing_there = f"redis://127.0.0.1:{free_port()}/9"  # so the bench starts its own
    cluster = pg_harness.PrivateCluster()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench", "--quick", "--out", str(out),
             "--server", cluster.url, "--redis", nothing_there],
            cwd=ROOT, capture_output=True, text=True, timeout=560,
        )  # fmt: skip
    finally:
        cluster.close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    summary = results["summary"]
    assert summary["failures"] == []
    names = {(c["contender"], c["backend"]) for c in summary["contenders"]}
    assert names == {
        ("heartq", "postgresql"), ("pgqueuer", "postgresql"), ("procrastinate", "postgresql"),
        ("heartq", "sqlite"), ("huey", "sqlite"), ("rq", "redis"),
    }  # fmt: skip
    assert all(c["all_processed"] and c["process"]["median"] > 0 for c in summary["contenders"])
    assert len(summary["limits"]) == 8 and all("median" in x for x in summary["limits"])
    assert (out / "throughput.png").stat().st_size > 10_000
    assert "<!-- bench:results:begin -->" in done.stdout


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")  # one at a time: the first installs the peers
@pytest.mark.timeout(300)
def test_driver_benchmark_runs_and_leaves_nothing(pg_server_url: str) -> None:
    """`python -m bench.drivers --quick`: every variant (asyncpg only where it is
    installed) runs heartq's statements, the tables come out, the scratch schema goes."""
    variants = "heartq pool,psycopg,psycopg prepared+binary,psycopg async prepared+binary"
    done = subprocess.run(
        [sys.executable, "-m", "bench.drivers", "--quick", "--server", pg_server_url,
         "--only", variants + ",asyncpg"],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for line in ("| claim 10 |", "| finish 100 |", "| heartbeat 100 |", "| enqueue 1 |",
                 "| claim+finish, batch 10 |", "| enqueue one at a time |"):  # fmt: skip
        assert line in done.stdout
    header = next(x for x in done.stdout.splitlines() if x.startswith("| statement |"))
    assert all(name in header for name in variants.split(","))
    found = re.search(r"scratch schema (bench_drivers_\w+)", done.stdout)
    assert found
    import psycopg

    with psycopg.connect(pg_server_url) as conn:
        left = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (found.group(1),)
        ).fetchall()
    assert left == [], "the scratch schema was dropped"


@pytest.mark.bench
@pytest.mark.timeout(120)
def test_django_enqueue_benchmark_runs_and_leaves_nothing(pg_server_url: str) -> None:
    """`python -m bench.django_enqueue`: every variant on SQLite and PostgreSQL, the
    backend's overhead a task printed, the scratch schema dropped."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.django_enqueue", "--jobs", "20", "--rounds", "1",
         "--postgres", pg_server_url],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for variant in ("heartq", "django", "heartq in atomic()", "django in atomic()"):
        assert done.stdout.count(f"| {variant} |") == 2, done.stdout
    found = re.search(r"scratch schema (bench_django_\w+)", done.stdout)
    assert found
    import psycopg

    with psycopg.connect(pg_server_url) as conn:
        left = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (found.group(1),)
        ).fetchall()
    assert left == [], "the scratch schema was dropped"


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")  # one at a time: the first installs the peers
@pytest.mark.timeout(120)
def test_enqueue_one_benchmark_runs() -> None:
    """`bench/enqueue_one.py` takes a one-at-a-time enqueue apart at both `synchronous`
    settings (huey too, where the peers' environment is installed)."""
    done = subprocess.run(
        [sys.executable, "bench/enqueue_one.py", "--jobs", "50", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for variant in ("commit full", "statement normal", "store full", "app normal"):
        assert f"| {variant} |" in done.stdout


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")  # one at a time: the first installs the peers
@pytest.mark.timeout(300)
def test_backlog_measures_every_cell(pg_server_url: str) -> None:
    """`bench.backlog` on tiny backlogs: a rate for each backend, state and fleet, and
    the table of ratios."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.backlog", "--backlogs", "600", "1200", "--count", "200",
         "--workers", "2", "--rounds", "1", "--server", pg_server_url.split("?")[0]],
        cwd=ROOT, capture_output=True, text=True, timeout=290,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "**" in line]
    assert len(rows) == 8, done.stdout  # 2 backends x 2 states x 2 fleets


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")  # one at a time: the first installs the peers
@pytest.mark.timeout(300)
def test_fair_keys_counts_each_key_count(pg_server_url: str) -> None:
    """`bench.fair_keys` on two key counts: a row per count and backend, PostgreSQL's
    with its buffers and index entries counted."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.fair_keys", "--keys", "1", "30", "--claims", "3",
         "--url", pg_server_url.split("?")[0]],
        cwd=ROOT, capture_output=True, text=True, timeout=290,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = re.findall(r"^\| (1|30) \| ([\d,]+|-) \|", done.stdout, re.MULTILINE)
    assert [(k, counted != "-") for k, counted in rows] == [
        ("1", True), ("30", True), ("1", False), ("30", False)], done.stdout  # fmt: skip


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")  # one at a time: the first installs the peers
@pytest.mark.timeout(300)
def test_row_writes_counts_every_shape() -> None:
    """`bench.row_writes` counts each shape's two writes under callgrind (400 jobs): a
    figure for each, and the split's claim cheaper than today's."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.row_writes", "--jobs", "400"],
        cwd=ROOT, capture_output=True, text=True, timeout=290,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    claims = {
        line[:36].strip(): float(line[36:].split()[0].rstrip("k"))
        for line in done.stdout.splitlines()[2:]
    }
    assert len(claims) == 5 and all(k > 0 for k in claims.values()), done.stdout
    assert claims["split: ready, leases, one end (50)"] < claims["today (fillfactor 90)"]


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")  # one at a time: the first installs the peers
@pytest.mark.timeout(300)
def test_fleet_section_runs(tmp_path: Path) -> None:
    """`python -m bench --only fleet --quick`: both fleets get through every job once, the
    server's claim statistics and its sampled durations are read, the sleeping jobs'
    rate over the ideal and the held jobs' cost are measured, and the chart is drawn
    (tiny fleets on a private cluster of its own)."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "fleet", "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "fleet.json").read_text())
    assert results["failures"] == []
    runs = results["processing"]
    assert {r["workers"] for r in runs} == {1, 3}
    for run in runs:
        assert run["rate"] > 0 and 1 <= run["workers_used"] <= run["workers"]
        assert 1 <= run["connections_per_worker"] <= 3
        assert run["server_cpu_us_per_job"] > 0 and run["workers_cpu_us_per_job"] > 0
        assert run["claim"]["calls"] > 0 and run["claim_sampled"]["n"] > 0
        assert run["claim_sampled"]["p99"] >= run["claim_sampled"]["p50"] > 0
    sleeping = results["sleeping"]
    assert 0 < sleeping["of_ideal"] <= 1.05 and sleeping["rate"] > 0
    assert sleeping["claim_to_start_ms"] > 0 and sleeping["return_to_end_ms"] > 0
    assert 0 <= sleeping["idle_share"] < 1 and sleeping["claim"]["calls"] > 0
    held = results["held"]
    assert held["lowest_running"] > 0 and held["statements_per_s"] > 0
    assert held["server_cpu_cores"] > 0
    assert results["summary"]["ratio"] > 0
    assert (out / "fleet.png").stat().st_size > 10_000


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")  # one at a time: the first installs the peers
@pytest.mark.timeout(900)
def test_pressure_runs_every_phase(tmp_path: Path) -> None:
    """`python -m bench.pressure --quick --contenders heartq pgqueuer`: every phase of
    the pressure cell gives its figures from the database, the held snapshot and the
    readers show as a horizon kept back, every job runs once, and both cells of both
    queues measure their storage after a VACUUM (a private cluster of its own)."""
    out = tmp_path / "pressure.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.pressure", "--quick", "--contenders", "heartq",
         "pgqueuer", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=860,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cells = json.loads(out.read_text())["cells"]
    assert [(c["contender"], c["cell"]) for c in cells] == [
        ("heartq", "pressure"), ("heartq", "storage"),
        ("pgqueuer", "pressure"), ("pgqueuer", "storage"),
    ]  # fmt: skip
    for pressure in (cells[0], cells[2]):
        phases = {p["phase"]: p for p in pressure["phases"]}
        assert list(phases) == ["clean", "held", "readers", "high", "recovery"]
        for phase in phases.values():
            assert phase["completed_per_s"] > 0 and phase["picked"] > 0
            assert phase["pickup_p99_ms"] >= phase["pickup_p50_ms"] > 0
            assert len(phase["autovacuum_runs"]) == 3
        assert phases["held"]["horizon_age_max"] > phases["clean"]["horizon_age_max"]
        assert phases["readers"]["horizon_age_max"] > phases["clean"]["horizon_age_max"]
        assert phases["high"]["offered_rate"] == 1.5 * phases["clean"]["offered_rate"]
    for cell in cells:
        assert cell["failures"] == [] and cell["fair_keys"] == 0
        assert cell["storage"]["finished_jobs"] == cell["enqueued"] > 0
        assert cell["storage"]["bytes_per_finished_job"] > 0
        assert all(0 <= t["free_percent"] < 100 for t in cell["storage"]["tables"].values())


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")
@pytest.mark.timeout(600)
def test_pressure_runs_with_fairness_keys(tmp_path: Path) -> None:
    """`python -m bench.pressure --quick --fair-keys 3`: heartq's jobs carry the three
    keys in turn (`fair_noop`), every phase's claims take them, and every job runs once."""
    out = tmp_path / "pressure.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.pressure", "--quick", "--fair-keys", "3", "--out",
         str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=560,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cells = json.loads(out.read_text())["cells"]
    assert [(c["cell"], c["fair_keys"]) for c in cells] == [("pressure", 3), ("storage", 3)]
    for cell in cells:
        assert "3 fairness keys" in cell["settings"]
        assert cell["failures"] == []
        assert cell["storage"]["finished_jobs"] == cell["enqueued"] > 0
        assert all(p["completed_per_s"] > 0 for p in cell["phases"])


@pytest.mark.bench
@pytest.mark.one_at_a_time("bench")
@pytest.mark.timeout(300)
def test_cpu_per_job_splits_a_runs_cpu(tmp_path: Path) -> None:
    """`python -m bench.cpu_per_job` on heartq's side script against a private cluster:
    both runs' workers are seen, the server's share is counted, and the figures are
    those of jobs that were processed."""
    cluster = pg_harness.PrivateCluster()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.cpu_per_job", "--match", "heartq worker",
             "--jobs", "200,2000", "--", sys.executable, "bench/contenders/heartq_side.py",
             "--backend", "postgresql", "--server", cluster.url, "--single", "50",
             "--dir", str(tmp_path / "scratch")],
            cwd=ROOT, capture_output=True, text=True, timeout=280,
        )  # fmt: skip
    finally:
        cluster.close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["jobs"] == [200, 2000]
    assert figures["processing_jobs_per_s"] > 0
    assert figures["server_us_per_job"] > 0 and figures["rest_us_per_job"] > 0
    assert figures["cpu_us_per_job"] == pytest.approx(
        figures["server_us_per_job"] + figures["rest_us_per_job"], abs=0.2
    )
    assert 0 < figures["busy_cores_while_processing"] <= (os.cpu_count() or 1) + 0.1
