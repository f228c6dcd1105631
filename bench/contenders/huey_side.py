"""SqliteHuey on a SQLite file, measured by the rules in `common.py`.

Workers: `--workers` processes, each `huey.create_consumer(workers=T, worker_type="thread",
periodic=False)`, the rest at huey's defaults; T = 1 unless `--concurrency` is given (1
matched 2 and beat 4, 8 and 16 here: a process's threads share one SQLite connection
behind a lock; worker_type="process" was no faster). Store: `huey.db` in `--dir`, defaults:
WAL, `synchronous` left at SQLite's FULL. Huey has no batch enqueue: every job is
enqueued one at a time. It commits no completion for a task that returns nothing (the
row is deleted at dequeue, before the task runs): the last completion is the last
handler return, stamped in each process. Each process writes its count of returns every
10 ms; once they add up to `--jobs` and the queue is empty, the parent stops the
consumers with SIGINT (huey's graceful stop: running tasks finish).
Run by `python -m bench`; alone:
    .bench-venv/bin/python bench/contenders/huey_side.py --dir /tmp/x --out r.json
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from importlib.metadata import version
from pathlib import Path

from common import Result, Stamps, arguments, processes, rate, timed, wait_until
from huey import SqliteHuey  # type: ignore[import-not-found]

THREADS = 1


class Tally:
    """Handler returns in this process: `<pid>.count` every 10 ms, the last return at the end."""

    def __init__(self, stamps: Stamps) -> None:
        self.stamps = stamps
        self.count = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.reporter: threading.Thread | None = None

    def returned(self) -> None:
        with self.lock:
            self.count += 1
            self.stamps.returned()

    def report(self) -> None:
        """Start the reporting thread (once per process: every worker thread calls this)."""
        with self.lock:
            if self.reporter is None:
                self.reporter = threading.Thread(target=self._loop, daemon=True)
                self.reporter.start()

    def _loop(self) -> None:
        while not self.stopped.wait(0.01):
            self.save_count()

    def save_count(self) -> None:
        path = self.stamps.directory / f"{os.getpid()}.count"
        path.with_suffix(".tmp").write_text(str(self.count))
        path.with_suffix(".tmp").replace(path)

    def close(self) -> None:
        self.stopped.set()
        if self.reporter is not None:
            self.reporter.join()
        with self.lock:
            self.save_count()
            self.stamps.save_last_return()

    @staticmethod
    def total(stamps: Stamps) -> int:
        return sum(int(p.read_text()) for p in stamps.directory.glob("*.count"))


def make(directory: str, tally: Tally) -> tuple[SqliteHuey, object]:
    huey = SqliteHuey("bench", filename=str(Path(directory) / "huey.db"))

    @huey.task()
    def noop() -> None:
        tally.stamps.entered()
        tally.returned()

    return huey, noop


def work(directory: str, tally: Tally, threads: int) -> None:
    huey, _ = make(directory, tally)
    huey.on_startup()(tally.report)
    consumer = huey.create_consumer(workers=threads, worker_type="thread", periodic=False)
    try:
        consumer.run()
    finally:
        tally.close()


def remove_store(directory: str, counts: bool = False) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(directory, f"huey.db{suffix}").unlink(missing_ok=True)
    for path in Path(directory, "stamps").glob("*.count") if counts else ():
        path.unlink()  # a count left by an earlier run would end the wait early


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    tally = Tally(Stamps(args.dir))
    threads = args.concurrency if "--concurrency" in sys.argv else THREADS
    if args.work:
        work(args.dir, tally, threads)
        return
    remove_store(args.dir, counts=True)
    huey, noop = make(args.dir, tally)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        single = timed(lambda: [noop() for _ in range(args.jobs)])  # type: ignore[operator]
        command = [sys.executable, __file__, "--work", "--dir", args.dir,
                   "--concurrency", str(threads)]  # fmt: skip
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        wait_until(
            lambda: Tally.total(tally.stamps) >= args.jobs and huey.pending_count() == 0,
            args.timeout, poll=0.01,
        )  # fmt: skip
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        # 0: huey's graceful stop; -SIGINT: a consumer still starting (the other one had
        # done every job) dies of the SIGINT we sent it. Anything else is a failure.
        codes = [proc.wait(60) for proc in procs]
        if any(code not in (0, -signal.SIGINT) for code in codes):
            raise RuntimeError(f"a worker failed: exit codes {codes}")
        processed = Tally.total(tally.stamps)
        Result(
            contender="huey", version=version("huey"), backend="sqlite", jobs=args.jobs,
            workers=args.workers, batch=0,
            settings=f"{processes(args.workers)}, consumer x {threads} thread worker(s), "
                     "SqliteHuey defaults: WAL, synchronous=FULL",
            enqueue_single=rate(args.jobs, single), enqueue_batch=0.0,
            process=rate(processed, tally.stamps.last_returns() - tally.stamps.first_entry()),
            processed=processed,
            notes=["huey has no batch enqueue: all jobs enqueued one at a time, "
                   "enqueue_batch is 0",
                   "huey commits no completion for a task that returns nothing: "
                   "measured to the last handler return"],
        ).write(args.out)  # fmt: skip
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        huey.storage.close()
        remove_store(args.dir)


if __name__ == "__main__":
    main()
