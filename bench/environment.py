"""The benchmark's own virtual environment for the peers, and the machine it runs on.

The peers are installed at pinned versions into `.bench-venv` (kept between runs;
reinstalled when the pins change), never into heartq's environment: each contender runs
with its own library and nothing of the others'. matplotlib draws the chart from there.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import sys
from pathlib import Path

PEERS = [
    "pgqueuer==1.6.0",
    "asyncpg==0.32.0",
    "procrastinate==3.10.0",
    "psycopg[binary]==3.3.9",
    "huey==3.5.4",
    "rq==3.0.0",
    "redis==8.1.0",
    "matplotlib==3.11.2",
]
"""What the peers' environment holds: the versions measured in docs/BENCHMARKS.md."""


def peers_python(venv: Path) -> Path:
    """The peers' interpreter, the environment created or brought up to date first."""
    python = venv / "bin" / "python"
    pins = venv / "heartq-bench-pins.txt"
    wanted = "\n".join(PEERS) + "\n"
    if python.exists() and pins.exists() and pins.read_text() == wanted:
        return python
    print(f"bench: installing the peers into {venv} ({', '.join(PEERS)})", flush=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *PEERS], check=True)
    pins.write_text(wanted)
    return python


def machine(server: str) -> dict[str, str]:
    """What the figures were measured on."""
    import psycopg

    with psycopg.connect(server) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    pg_version = str(row[0]) if row else "?"
    return {
        "cpus": str(os.cpu_count()),
        "memory": _memory(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgresql": pg_version.split()[0],
    }


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return "?"
