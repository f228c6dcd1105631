"""An app whose NATS server cannot be reached: its enqueue commits (the database is the
outbox: the sweeper publishes later) and the program ends without a word from asyncio."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any `HEARTQ_*` variable, plus `extra`."""
    return {k: v for k, v in os.environ.items() if not k.startswith("HEARTQ_")} | extra


def closed_port() -> int:
    """A port nothing listens on (bound a moment, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_enqueue_and_close_with_nats_unreachable_print_nothing(tmp_path: Path) -> None:
    """`Task was destroyed but it is pending!` at exit: the transport's connect loop was
    cancelled, then its event loop stopped before the cancel ran. From the API (an app
    closed) and from `heartq enqueue`, which closes its app."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    transport = f"nats://127.0.0.1:{closed_port()}"
    api = textwrap.dedent(
        f"""
        import heartq
        app = heartq.App({url!r}, transport={transport!r})
        print(app.enqueue("t", {{"n": 1}}))
        app.close()
        """
    )
    commands = [
        [sys.executable, "-c", api],
        [sys.executable, "-m", "heartq", "enqueue", "t", "--url", url],
    ]
    env = clean_env(HEARTQ_TRANSPORT=transport)
    runs = [
        subprocess.run(c, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        for c in commands
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "Task was destroyed" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    # the API's one line is the warning that the task is not declared (Python's warnings)
    assert "TaskNotDeclaredWarning: task 't' is not declared yet" in runs[0].stderr
    assert len(runs[0].stderr.splitlines()) == 1, runs[0].stderr
    assert runs[1].stderr.startswith("heartq: warning: task 't' is not declared yet")
    assert len(runs[1].stderr.splitlines()) == 1, runs[1].stderr
    check = subprocess.run(
        [sys.executable, "-m", "heartq", "jobs", "list", "--json", "--url", url],
        capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    ids = [line.strip() for run in runs for line in run.stdout.splitlines()]
    assert all(job_id in check.stdout for job_id in ids) and len(ids) == 2, check.stdout
