"""Recovery time at DEFAULT settings: from SIGKILL of a worker to its job running again.

Starts two real worker processes (default heartbeat, lease, reclaim and liveness settings;
concurrency 2, so the survivor has a free slot), enqueues one long job, SIGKILLs the
worker that runs it, and measures on the database's clock how long until the job's next
attempt started on the survivor. Run:
    .venv/bin/python bench/recovery.py [--rounds 3] [--postgres postgresql://...]
        [--pooler [--direct]] [--heartbeat S]

`--pooler`: the workers reach PostgreSQL through a PgBouncer in transaction mode started
for the run in front of `--postgres` (bench/servers/pgbouncer.py), with
`?pooler=transaction`: they hold no liveness lock, so a death is found by staleness.
`--direct`: with `--pooler`, they get the server as their direct URL (lock and LISTEN
there). `--heartbeat S`: the workers' heartbeat interval (lease, reclaim interval and stale
threshold follow it; default 30 s).

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

TASKS = textwrap.dedent(
    """
    import time
    import heartq
    app = heartq.App()

    @app.task
    def long(ctx: heartq.JobContext) -> None:
        for _ in range(600):
            time.sleep(0.1)
            ctx.heartbeat()
    """
)


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def one_round(root: Path, url: str, worker_args: list[str], env_extra: dict[str, str]) -> float:
    from heartq.display import epoch_of
    from heartq.store import open_store

    env = dict(os.environ, PYTHONPATH=str(root), **env_extra)
    command = [sys.executable, "-m", "heartq", "worker", "recovery_tasks:app", "--url", url]
    command += worker_args
    procs = [
        subprocess.Popen([*command, "--concurrency", "2"], cwd=root, env=env,
                         stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(2)
    ]  # fmt: skip
    store = open_store(url)
    try:
        store.link.migrate()
        wait_for(lambda: len(store.list_workers()) == 2, 30, "two workers")
        pids = {w["id"]: w["pid"] for w in store.list_workers()}
        import recovery_tasks  # type: ignore[import-not-found]

        recovery_tasks.app.use_url(url)
        job_id = recovery_tasks.app.enqueue("long")
        job = wait_for(
            lambda: (j := store.get_job(job_id))["status"] == "running" and j, 30, "the claim"
        )
        killed_at = store.clock()
        os.kill(pids[job["worker_id"]], signal.SIGKILL)
        again = wait_for(
            lambda: (j := store.get_job(job_id))["execution_id"] == 2
            and j["status"] == "running"
            and j,
            300,
            "the job to run again",
        )
        return float(epoch_of(again["started_at"]) or 0.0) - killed_at
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
        store.link.close()


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", metavar="URL", help="run on PostgreSQL at URL")
    parser.add_argument("--pooler", action="store_true", help="through PgBouncer (transaction)")
    parser.add_argument("--direct", action="store_true", help="with --pooler: a direct URL")
    parser.add_argument("--heartbeat", type=float, metavar="S", help="heartbeat interval")
    args = parser.parse_args()
    if args.pooler and not args.postgres:
        parser.error("--pooler needs --postgres")
    worker_args = ["--heartbeat-interval", str(args.heartbeat)] if args.heartbeat else []
    env_extra = {"HEARTQ_DIRECT_URL": args.postgres} if args.direct else {}
    figures = []
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="heartq-recovery-")))
        (root / "recovery_tasks.py").write_text(TASKS)
        sys.path.insert(0, str(root))
        bouncer = None
        if args.pooler:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from bench.servers.pgbouncer import PgBouncer

            bouncer = stack.enter_context(PgBouncer.running(args.postgres, pool_size=2))
        for n in range(args.rounds):
            schema = f"recovery_{uuid.uuid4().hex[:10]}"
            if args.postgres:
                sep = "&" if "?" in args.postgres else "?"
                url = f"{args.postgres}{sep}schema={schema}"
                if bouncer is not None:
                    url = bouncer.url(of=url, pooler="transaction")
            else:
                url = f"sqlite:///{root / f'q{n}.db'}"
            try:
                figures.append(one_round(root, url, worker_args, env_extra))
            finally:
                if args.postgres:
                    drop_schema(args.postgres, schema)
            print(f"round {n + 1}: running again {figures[-1]:.2f} s after SIGKILL", flush=True)
    backend = "postgresql" if args.postgres else "sqlite"
    if args.pooler:
        backend += " through pgbouncer" + (" with a direct URL" if args.direct else "")
    print(
        f"{backend}: median {statistics.median(figures):.2f} s, "
        f"min {min(figures):.2f} s, max {max(figures):.2f} s ({args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
