"""`heartq worker` logs every signal it hears: an operator's second Ctrl-C included."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.cli.helpers import HeartqCli, wait_for


def test_every_signal_is_logged(heartq: HeartqCli, workers: list[subprocess.Popen[bytes]]) -> None:
    job_id = heartq.add("slow", {"seconds": 60})
    worker = heartq.start_worker("--shutdown-timeout", "60", "--concurrency", "1")
    workers.append(worker)
    log = heartq.cwd / "worker.log"
    wait_for(lambda: heartq.job(job_id)["status"] == "running", what="the job to start")
    os.kill(worker.pid, signal.SIGTERM)
    wait_for(lambda: "shutdown_requested" in log.read_text(), what="the first signal's log")
    text = log.read_text()
    assert "signal_received" in text and "signal=SIGTERM count=1" in text, text
    assert "force=false" in text and "force=true" not in text
    os.kill(worker.pid, signal.SIGINT)
    try:
        assert worker.wait(timeout=30) == 0, log.read_text()
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not stop after the second signal:\n{log.read_text()}")
    text = log.read_text()
    assert "signal=SIGINT count=2" in text, text
    assert "shutdown_requested" in text and "force=true" in text, text
    assert heartq.job(job_id)["status"] == "queued"  # released at once by the second signal
