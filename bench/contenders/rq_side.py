"""RQ on Redis, for reference (no SQL database), measured by the rules in `common.py`.

Workers: `--workers` processes, each an RQ `SimpleWorker` (jobs run in the worker
process, no fork per job) with `work(burst=True)`: it exits once its queue is empty.
Batches: `Queue.enqueue_many` of `Queue.prepare_data` in one pipeline per batch. Last
committed completion: the latest `ended_at` RQ saved with the finished jobs (read back
with `Job.fetch_many`). Uses the Redis database of `--redis` (default 9, never 0),
emptied before and after.
Run by `python -m bench`; alone:
    .bench-venv/bin/python bench/contenders/rq_side.py --dir /tmp/x --out r.json
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from common import Result, Stamps, arguments, processes, rate, timed, wait_until
from redis import Redis  # type: ignore[import-not-found]
from redis.utils import HIREDIS_AVAILABLE  # type: ignore[import-not-found]
from rq import Queue, SimpleWorker  # type: ignore[import-not-found]
from rq.job import Job, JobStatus  # type: ignore[import-not-found]

TASKS = """
import os
from common import Stamps

stamps = Stamps(os.environ["HEARTQ_BENCH_DIR"])

def noop():
    stamps.entered()
"""


def tasks(directory: str) -> object:
    """The task module, written where the workers import it from (RQ finds it by name)."""
    Path(directory, "rq_bench_tasks.py").write_text(TASKS)
    os.environ["HEARTQ_BENCH_DIR"] = directory
    sys.path.insert(0, directory)
    import rq_bench_tasks  # type: ignore[import-not-found]

    return rq_bench_tasks.noop


def finished(redis: Redis, ids: list[str]) -> list[float]:
    """`ended_at` of every finished job, as seconds since the epoch."""
    jobs = Job.fetch_many(ids, connection=redis)
    return [job.ended_at.timestamp() for job in jobs
            if job is not None and job.get_status(refresh=False) == JobStatus.FINISHED]  # fmt: skip


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    redis = Redis.from_url(args.redis)
    if redis.connection_pool.connection_kwargs.get("db", 0) == 0:
        raise SystemExit("refusing Redis database 0: it is emptied before and after")
    noop = tasks(args.dir)
    queue = Queue("bench", connection=redis)
    if args.work:
        SimpleWorker([queue], connection=redis).work(burst=True, logging_level="WARNING")
        return
    redis.flushdb()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ids: list[str] = []
        single = timed(lambda: ids.extend(queue.enqueue(noop).id for _ in range(args.single)))

        def batches() -> None:
            for offset in range(0, args.jobs - args.single, args.batch):
                k = min(args.batch, args.jobs - args.single - offset)
                with redis.pipeline() as pipe:
                    jobs = queue.enqueue_many([Queue.prepare_data(noop)] * k, pipeline=pipe)
                    pipe.execute()
                ids.extend(job.id for job in jobs)

        batched = timed(batches)
        command = [sys.executable, __file__, "--work", "--dir", args.dir, "--redis", args.redis]
        procs = [subprocess.Popen(command) for _ in range(args.workers)]
        elapsed = timed(
            lambda: wait_until(lambda: all(p.poll() is not None for p in procs), args.timeout)
        )
        if any(p.returncode for p in procs):
            raise RuntimeError(f"a worker failed: exit codes {[p.returncode for p in procs]}")
        ended = finished(redis, ids)
        if not ended:
            raise RuntimeError("no job finished")
        Result(
            contender="rq", version=version("rq"), backend="redis", jobs=args.jobs,
            workers=args.workers, batch=args.batch,
            settings=f"{processes(args.workers)}, SimpleWorker (no fork), burst",
            enqueue_single=rate(args.single, single),
            enqueue_batch=rate(args.jobs - args.single, batched),
            process=rate(len(ended), max(ended) - Stamps(args.dir).first_entry()),
            processed=len(ended),
            notes=["RQ keeps jobs in Redis (in memory here: no fsync), not in a SQL database",
                   "an RQ worker is CPU-bound here: about 38 Redis round trips per job, "
                   f"redis-py with hiredis: {HIREDIS_AVAILABLE}",
                   f"workers ran {elapsed:.2f} s from start to exit"],
        ).write(args.out)  # fmt: skip
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        redis.flushdb()


if __name__ == "__main__":
    main()
