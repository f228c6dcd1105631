"""`heartq dashboard` as a user starts it: `python -m heartq dashboard --url URL --port
PORT` in a process of its own, which says where it serves, serves, and stops on Ctrl-C
or SIGTERM."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from heartq.store import Store, open_store, redact
from tests.cli.helpers import HeartqCli, clean_env
from tests.conformance.support import enqueue_one
from tests.dashboard.support import SECRET, with_password
from tests.support import free_port, wait_for

STARTUP = 30.0
"""Seconds a dashboard has to answer its first request (a cold start on a busy machine)."""


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[str]]]:
    """Dashboards a test starts; killed (with their children) if still running after it."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def answer(address: str, proc: subprocess.Popen[str]) -> httpx.Response | None:
    assert proc.poll() is None, f"the dashboard exited: {proc.communicate(timeout=10)}"
    try:
        return httpx.get(address, timeout=5)
    except httpx.TransportError:
        return None  # not listening yet


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_heartq_dashboard_serves_the_queue_until_stopped(
    store: Store,
    store_url: str,
    tmp_path: Path,
    servers: list[subprocess.Popen[str]],
    stop: signal.Signals,
) -> None:
    job_id = enqueue_one(store, store.clock(), task="visible")
    url = with_password(store_url)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "heartq", "dashboard", "--url", url, "--port", str(port)],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    servers.append(proc)
    address = f"http://127.0.0.1:{port}/"

    first = wait_for(lambda: answer(address, proc), timeout=STARTUP, what="the dashboard")

    assert first.status_code == 200 and first.text.rstrip().endswith("</html>")
    assert proc.stdout is not None
    line = proc.stdout.readline().rstrip("\n")  # printed before it listened
    assert line == f"heartq dashboard on {address} (read-only; {redact(url)})"
    assert SECRET not in line and SECRET not in first.text
    assert url == store_url or (f":{SECRET}@" in url and ":***@" in line)
    jobs = httpx.get(f"{address}jobs", timeout=5)
    assert jobs.status_code == 200 and f'data-job="{job_id}"' in jobs.text
    assert httpx.post(f"{address}jobs/{job_id}/cancel", timeout=5).status_code == 403

    proc.send_signal(stop)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode in (0, -stop), (proc.returncode, err)
    if stop == signal.SIGINT:
        assert proc.returncode == 0, err
    assert "Traceback" not in err and SECRET not in out + err
    assert store.get_job(job_id)["status"] == "queued"


def test_heartq_dashboard_refuses_a_sqlite_file_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.db"
    port = str(free_port())
    run = HeartqCli(f"sqlite:///{missing}", tmp_path)("dashboard", "--port", port)
    run.fails(1)
    assert run.err.strip() == (
        f"heartq: error: no queue at {missing} (the file does not exist): run `heartq "
        "migrate` to create one there, or point at yours with --url or HEARTQ_URL"
    )
    assert run.out == "" and not missing.exists()


def sqlite_queue(tmp_path: Path) -> str:
    """A migrated SQLite queue: binding does not differ by backend."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    made = open_store(url)
    made.link.migrate()
    made.link.close()
    return url


def test_heartq_dashboard_on_port_0_prints_the_port_it_listens_on(
    tmp_path: Path, servers: list[subprocess.Popen[str]]
) -> None:
    """`--port 0` lets the system choose: the banner names that port (it printed
    `http://127.0.0.1:0/`), and the page answers there."""
    url = sqlite_queue(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "heartq", "dashboard", "--url", url, "--port", "0"],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    servers.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline().rstrip("\n")  # printed once bound
    found = re.fullmatch(r"heartq dashboard on http://127\.0\.0\.1:(\d+)/ \(read-only; .*\)", line)
    assert found is not None and found.group(1) != "0", line
    address = f"http://127.0.0.1:{found.group(1)}/"
    first = wait_for(lambda: answer(address, proc), timeout=STARTUP, what="the dashboard")
    assert first.status_code == 200
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0 and "Traceback" not in err, (proc.returncode, err)


def test_heartq_dashboard_on_a_taken_port_says_so_in_one_line(tmp_path: Path) -> None:
    """No success banner before the bind error: one `heartq: error:` line, exit 1."""
    url = sqlite_queue(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = HeartqCli(url, tmp_path)("dashboard", "--port", str(port))
    run.fails(1)
    assert run.out == "", run.explain()
    assert run.err == (
        f"heartq: error: the dashboard cannot listen on 127.0.0.1:{port}: Address already in use\n"
    ), run.explain()
