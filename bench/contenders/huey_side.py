"""SqliteHuey on a SQLite file, measured by the rules in `common.py`.

Workers: `--workers` consumer processes, each `huey.create_consumer(workers=8,
worker_type="thread")` polling every 1 ms, no periodic scheduler; the file in WAL mode
at SQLite's default `synchronous` (huey's defaults). Huey has no batch enqueue, and for a
task that returns nothing it commits no completion (the task row is deleted when it is
dequeued, before it runs): the last completion is the last handler return, stamped in
each process. The parent waits until the queue is empty and every job has returned, then
stops the consumers with SIGINT (huey's graceful stop).
Run by `python -m bench`; alone:
    .bench-venv/bin/python bench/contenders/huey_side.py --dir /tmp/x --out r.json
"""

from __future__ import annotations

import signal
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from common import Result, Stamps, arguments, processes, rate, timed, wait_until
from huey import SqliteHuey  # type: ignore[import-not-found]

THREADS = 8


def make(directory: str, stamps: Stamps) -> tuple[SqliteHuey, object]:
    huey = SqliteHuey("bench", filename=str(Path(directory) / "huey.db"))

    @huey.task()
    def noop() -> None:
        stamps.entered()
        stamps.returned()
        counts[0] += 1

    return huey, noop


counts = [0]


def work(directory: str, stamps: Stamps) -> None:
    huey, _ = make(directory, stamps)
    consumer = huey.create_consumer(
        workers=THREADS, worker_type="thread", periodic=False,
        initial_delay=0.001, backoff=1.0, max_delay=0.001, check_worker_health=False,
    )  # fmt: skip
    try:
        consumer.run()
    finally:
        stamps.save_last_return()
        (stamps.directory / f"{Path(sys.argv[0]).stem}-{id(consumer)}.count").write_text(
            str(counts[0])
        )


def returned(stamps: Stamps) -> int:
    return sum(int(p.read_text()) for p in stamps.directory.glob("*.count"))


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    stamps = Stamps(args.dir)
    if args.work:
        work(args.dir, stamps)
        return
    huey, noop = make(args.dir, stamps)
    single = timed(lambda: [noop() for _ in range(args.jobs)])  # type: ignore[operator]
    command = [sys.executable, __file__, "--work", "--dir", args.dir]
    procs = [subprocess.Popen(command) for _ in range(args.workers)]
    try:
        wait_until(lambda: huey.pending_count() == 0, args.timeout, poll=0.01)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            proc.wait(60)
    processed = returned(stamps)
    Result(
        contender="huey", version=version("huey"), backend="sqlite", jobs=args.jobs,
        workers=args.workers, batch=0,
        settings=f"{processes(args.workers)} x {THREADS} threads, SqliteHuey (WAL)",
        enqueue_single=rate(args.jobs, single), enqueue_batch=0.0,
        process=rate(processed, stamps.last_returns() - stamps.first_entry()),
        processed=processed,
        notes=["huey has no batch enqueue: every job is enqueued one at a time",
               "huey commits no completion for a task that returns nothing: counted to "
               "the last handler return"],
    ).write(args.out)  # fmt: skip


if __name__ == "__main__":
    main()
