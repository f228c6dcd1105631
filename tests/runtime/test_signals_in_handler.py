"""A stop signal is acted on whatever the main thread holds when it lands.

A Python signal handler runs in the main thread between two bytecodes. The worker's
main thread waits on events all its life, holding each event's lock for a moment on
every wait: a handler that set one of those events itself would wait on its own
thread forever (the hang seen when a second Ctrl-C landed in that moment). The script
below lands both signals while the main thread holds every lock the stop touches.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import heartq
    import heartq.events
    from heartq.worker import Worker

    heartq.events.configure_logging()
    app = heartq.App(sys.argv[1])
    worker = Worker(app, concurrency=1)
    worker.install_signal_handlers()
    locks = [event._cond for event in (worker._wake, worker._stop_requested, worker._force_stop)]
    for signum in (signal.SIGTERM, signal.SIGINT):
        for lock in locks:
            lock.acquire()
        os.kill(os.getpid(), signum)  # the handler runs here, in this thread, locks held
        for _ in range(1000):
            pass
        for lock in reversed(locks):
            lock.release()
    assert worker._stop_requested.wait(10), "the first signal was not acted on"
    assert worker._force_stop.wait(10), "the second signal was not acted on"
    app.close()
    print("stopped")
    """
)


def test_a_signal_landing_while_the_main_thread_holds_the_locks(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "script.py"), f"sqlite:///{tmp_path / 'q.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "stopped" in done.stdout, done.stderr
    assert "signal=SIGTERM count=1" in done.stderr and "signal=SIGINT count=2" in done.stderr
