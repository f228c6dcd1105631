"""RQ on Redis, for reference (no SQL database), measured by the rules in `common.py`.

Workers: `--workers` processes, each an RQ `SimpleWorker` (jobs run in the worker
process, no fork per job) in burst mode. Batches: `Queue.enqueue_many` of `prepare_data`
in one pipeline. Last committed completion: the latest `ended_at` RQ saved with the
finished jobs. Uses the Redis database of `--redis` (default 9), emptied before and after.
Run by `python -m bench`; alone:
    .bench-venv/bin/python bench/contenders/rq_side.py --dir /tmp/x --out r.json
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from common import Result, Stamps, arguments, processes, rate, timed
from redis import Redis  # type: ignore[import-not-found]
from rq import Queue, SimpleWorker  # type: ignore[import-not-found]
from rq.job import Job  # type: ignore[import-not-found]

TASKS = """
import os
from common import Stamps

stamps = Stamps(os.environ["HEARTQ_BENCH_DIR"])

def noop():
    stamps.entered()
"""


def tasks(directory: str) -> object:
    """The task module, written where the workers import it from."""
    import os

    Path(directory, "rq_bench_tasks.py").write_text(TASKS)
    os.environ["HEARTQ_BENCH_DIR"] = directory
    sys.path.insert(0, directory)
    import rq_bench_tasks  # type: ignore[import-not-found]

    return rq_bench_tasks.noop


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    redis = Redis.from_url(args.redis)
    noop = tasks(args.dir)
    queue = Queue("bench", connection=redis)
    if args.work:
        SimpleWorker([queue], connection=redis).work(burst=True, logging_level="WARNING")
        return
    redis.flushdb()
    try:
        ids: list[str] = []
        single = timed(lambda: ids.extend(queue.enqueue(noop).id for _ in range(args.single)))

        def batches() -> None:
            for offset in range(0, args.jobs - args.single, args.batch):
                k = min(args.batch, args.jobs - args.single - offset)
                with redis.pipeline() as pipe:
                    data = [Queue.prepare_data(noop) for _ in range(k)]
                    jobs = queue.enqueue_many(data, pipeline=pipe)
                    pipe.execute()
                ids.extend(job.id for job in jobs)

        batched = timed(batches)
        command = [sys.executable, __file__, "--work", "--dir", args.dir, "--redis", args.redis]
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        for proc in procs:
            proc.wait(args.timeout)
        ended = [job.ended_at for job in Job.fetch_many(ids, connection=redis)
                 if job is not None and job.get_status() == "finished"]  # fmt: skip
        Result(
            contender="rq", version=version("rq"), backend="redis", jobs=args.jobs,
            workers=args.workers, batch=args.batch,
            settings=f"{processes(args.workers)}, SimpleWorker (no fork), burst",
            enqueue_single=rate(args.single, single),
            enqueue_batch=rate(args.jobs - args.single, batched),
            process=rate(len(ended), max(ended).timestamp() - Stamps(args.dir).first_entry()),
            processed=len(ended),
            notes=["RQ keeps jobs in Redis (in memory here: no fsync), not in a SQL database"],
        ).write(args.out)  # fmt: skip
    finally:
        redis.flushdb()


if __name__ == "__main__":
    main()
