"""The demo's worker processes: started as a user would start them, watched, stopped.

Each worker is `python -m heartq worker heartq.demo_tasks:app` in a session of its own
(so Ctrl-C in the terminal reaches the demo alone), asked to die with the demo
(`PR_SET_PDEATHSIG` on Linux), with its JSON log in the demo's directory. Whatever
happens, `stop()` leaves no process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from heartq.cli.demo.model import (
    APP_REF,
    START_TIMEOUT,
    STOP_TIMEOUT,
    DemoFailed,
    DemoSettings,
    DemoWorker,
)
from heartq.store.interface import Registry


def _pdeathsig() -> Callable[[], None] | None:
    """On Linux, a preexec hook asking the kernel to SIGTERM the worker if the demo dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the demo died before the hook ran
            os._exit(1)

    return hook


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """While the demo runs, SIGTERM and SIGHUP unwind it like Ctrl-C, so its `finally`
    stops the workers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Fleet:
    """The demo's worker processes."""

    def __init__(self, url: str, workdir: Path, settings: DemoSettings) -> None:
        self.url = url
        self.workdir = workdir
        self.settings = settings
        self.workers: list[DemoWorker] = []

    def start(self, count: int) -> None:
        hook = _pdeathsig()
        for index in range(1, count + 1):
            name = f"demo-worker-{index}"
            log_path = self.workdir / f"{name}.log"
            log_file = log_path.open("wb")
            cmd = [sys.executable, "-m", "heartq", "worker", APP_REF, "--url", self.url]
            cmd += ["--name", name, *self.settings.worker_args()]
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal reaches the demo alone
                preexec_fn=hook,  # set before the demo starts any thread
            )
            self.workers.append(DemoWorker(index, name, proc, log_path, log_file))

    def log_tail(self, worker: DemoWorker, lines: int = 3) -> str:
        try:
            text = worker.log_path.read_text("utf-8", errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def check_survivors(self) -> None:
        """`DemoFailed` if a worker the demo did not kill has exited."""
        for worker in self.workers:
            code = None if worker.killed else worker.proc.poll()
            if code is not None:
                tail = self.log_tail(worker)
                raise DemoFailed(
                    f"worker {worker.name} exited unexpectedly with status {code}"
                    + (f": {tail}" if tail else "")
                )

    def wait_registered(self, store: Registry) -> None:
        """Wait until every worker has registered, and learn their worker ids."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            self.check_survivors()
            rows = store.list_workers()
            for worker in self.workers:
                for row in rows:
                    if row["pid"] == worker.proc.pid and row["name"] == worker.name:
                        worker.worker_id = row["id"]
            if all(w.worker_id for w in self.workers):
                return
            if time.monotonic() > deadline:
                missing = ", ".join(w.name for w in self.workers if not w.worker_id)
                raise DemoFailed(f"workers did not register within {START_TIMEOUT:g} s: {missing}")
            time.sleep(0.05)

    def kill(self, worker: DemoWorker) -> float:
        """SIGKILL, as the kernel's OOM killer would; returns once it is gone, with the
        monotonic time the signal was sent."""
        os.kill(worker.proc.pid, signal.SIGKILL)
        sent = time.monotonic()
        worker.killed = True
        worker.proc.wait()
        return sent

    def stop(self, graceful: bool) -> None:
        """SIGTERM every worker still alive (twice when not graceful: release at once),
        then SIGKILL whatever outlives STOP_TIMEOUT. Never leaves a process behind."""
        alive = [w for w in self.workers if w.proc.poll() is None]
        for worker in alive:
            _signal_group(worker, signal.SIGTERM)
        if alive and not graceful:
            time.sleep(0.2)
            for worker in alive:
                if worker.proc.poll() is None:
                    _signal_group(worker, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for worker in alive:
            try:
                worker.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(worker, signal.SIGKILL)
                worker.proc.wait()
        for worker in self.workers:
            # a session leader that is gone may leave members of its group (children)
            _signal_group(worker, signal.SIGKILL, leader_gone_ok=True)
            with contextlib.suppress(OSError):
                worker.log_file.close()


def _signal_group(worker: DemoWorker, sig: int, leader_gone_ok: bool = False) -> None:
    if worker.proc.returncode is not None and not leader_gone_ok:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(worker.proc.pid, sig)
