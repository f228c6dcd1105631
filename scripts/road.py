"""How many of heartq's modules a job's two roads run through, counted on a real run.

`python scripts/road.py` (from the checkout, with the project installed) traces, with
`sys.setprofile` on every thread, which of heartq's modules run:

- **enqueue -> finish**: `App.enqueue` of a no-op job on the caller's thread, then the
  worker's claim, run and finish on the threads that carry a job (the worker's own loop,
  a job thread, the completer), on a fresh SQLite queue. The worker's background loops
  (heartbeat, pulse, supervisor, maintenance) run beside the road, not on it: left out.
- **death -> reclaim**: a `heartq worker` process killed with SIGKILL while its job runs;
  the modules the surviving worker's maintenance runs from the kill until the job is
  queued again.

The script's own reads that wait for each road's end (`get_job`, on the main thread) are
not traced. It prints each road's modules in the order they first ran and how many times the road
came back to a module it had left (the package map in docs/design/words-and-map.md names them). The
figures are the issue's "short road" measure; nothing here is a test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

BESIDE_THE_ROAD = (
    "heartq-heartbeat",
    "heartq-pulse",
    "heartq-supervisor",
    "heartq-loop-watch",
    "heartq-signals",
    "heartq-metrics",
)
"""Threads of a running worker that never carry a job."""

TASKS = textwrap.dedent(
    """
    import time
    import heartq

    app = heartq.App(URL, heartbeat_interval=0.1, lease=1.0, reclaim_interval=0.1,
                     liveness_interval=0.1, poll_interval=0.02, shutdown_timeout=2.0)

    @app.task()
    def noop() -> None:
        pass

    @app.task()
    def sleeper(seconds: float) -> None:
        time.sleep(seconds)
    """
)


class Trace:
    """Every call into a heartq module, by thread, while `on`."""

    def __init__(self, keep: Callable[[str], bool]) -> None:
        self.keep = keep
        self.on = False
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._aside = threading.local()

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Calls this thread makes meanwhile are not the road's (the script's own reads
        that wait for the road's end)."""
        self._aside.on = True
        try:
            yield
        finally:
            self._aside.on = False

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.on or getattr(self._aside, "on", False):
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("heartq"):
            return
        thread = threading.current_thread().name
        if self.keep(thread):
            with self._lock:
                self.calls.append((thread, module))

    def install(self) -> None:
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)

    def remove(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def report(title: str, calls: list[tuple[str, str]]) -> None:
    order: list[str] = []
    returns = 0
    last_by_thread: dict[str, str] = {}
    left: set[str] = set()
    for thread, module in calls:
        last = last_by_thread.get(thread)
        if module == last:
            continue
        if last is not None:
            left.add(last)
        if module in left and module in order:
            returns += 1
        last_by_thread[thread] = module
        if module not in order:
            order.append(module)
    print(f"## {title}: {len(order)} modules, {returns} returns to a module left")
    for module in order:
        print(f"   {module}")


def wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"road: {what} did not happen within {timeout:.0f} s")
        time.sleep(0.01)


def load(folder: Path, url: str) -> Any:
    (folder / "road_tasks.py").write_text(TASKS.replace("URL", repr(url)))
    sys.path.insert(0, str(folder))
    import road_tasks  # type: ignore[import-not-found]

    return road_tasks


def enqueue_to_finish(tasks: Any) -> None:
    from heartq.worker import Worker

    trace = Trace(lambda thread: not thread.startswith(BESIDE_THE_ROAD) and "maint" not in thread)
    trace.install()
    worker = Worker(tasks.app, concurrency=1, name="road", periodic=False)
    runner = threading.Thread(target=worker.run, name="heartq-worker-loop", daemon=True)
    runner.start()
    assert worker.started.wait(10), "worker did not start"
    time.sleep(0.3)  # let the first idle polls pass (they are the worker's, not the job's)
    trace.on = True
    job_id = tasks.noop.enqueue()
    with trace.aside():
        wait(lambda: tasks.app.store.get_job(job_id)["status"] == "succeeded", 10, "the finish")
    trace.on = False
    worker.request_stop()
    runner.join(10)
    trace.remove()
    report("enqueue -> finish", trace.calls)


def death_to_reclaim(tasks: Any, folder: Path, url: str) -> None:
    from heartq.worker import Worker

    env = dict(os.environ, PYTHONPATH=f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    doomed = subprocess.Popen(
        [sys.executable, "-m", "heartq", "worker", "road_tasks:app", "--concurrency", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    job_id = tasks.sleeper.enqueue(seconds=60)
    wait(lambda: tasks.app.store.get_job(job_id)["status"] == "running", 20, "the doomed start")
    trace = Trace(lambda thread: thread.startswith("heartq-maintenance"))
    trace.install()
    survivor = Worker(tasks.app, queues=["elsewhere"], name="survivor", periodic=False)
    runner = threading.Thread(target=survivor.run, daemon=True)
    runner.start()
    assert survivor.started.wait(10), "survivor did not start"
    trace.on = True
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    with trace.aside():
        wait(lambda: tasks.app.store.get_job(job_id)["status"] != "running", 30, "the reclaim")
    trace.on = False
    survivor.request_stop()
    runner.join(10)
    trace.remove()
    report("death -> reclaim", trace.calls)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="heartq-road-") as name:
        folder = Path(name)
        url = f"sqlite:///{folder / 'q.db'}"
        tasks = load(folder, url)
        tasks.app.store.link.migrate()
        enqueue_to_finish(tasks)
        death_to_reclaim(tasks, folder, url)
        tasks.app.close()


if __name__ == "__main__":
    main()
