"""What a claim of one queue costs the server, in instructions a job claimed: each claim
statement a worker of one queue may send (`CLAIMS`), run alone, so that two shapes of the
claim compare without the rest of a job's work (the finish, the heartbeat, the timers)
or the noise of a fleet.

    .venv/bin/python -m bench.claim_instructions              # 4,000 jobs, about a minute
    .venv/bin/python -m bench.claim_instructions --jobs 400   # the code path

On a private PostgreSQL cluster (`autovacuum` off), one database with heartq's schema and
N jobs queued in the ready log (one lane, no key: the common case, and the bench's) is
copied once a statement and a round. The cluster is then stopped and each copy served by
one single-user backend (`postgres --single`) under `valgrind --tool=callgrind`, with
heartq's session settings (generic plans, its planner settings): the statement prepared,
then run as a worker runs it, claims of 50, a quarter of the jobs in one round and all of
them in the other; a figure is the difference of the two rounds over the difference of
their jobs, so the backend's start and first reads cancel out. A single-user backend
prints each row it answers (`debugtup`, about 46 k instructions a job's row of 18
columns, the same for every claim): the figures are given with it and without it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess

import psycopg
from psycopg import sql

from bench.cost.cluster import single_user_instructions
from bench.servers.postgres import PrivateCluster
from bench.sigterm import unwind_on_sigterm
from heartq.app import App
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.queries.settings import PLANNER
from heartq.store.postgres.statements import positional

CLAIMS = ("CLAIM_ONE_QUEUE", "CLAIM_IN_ORDER")
"""The claims of one queue: with the turns of fair shares, and in order (what a worker of
a queue without fairness keys sends)."""

BATCH = 50
"""Jobs a claim takes."""

TYPES = {"queue": "text", "limit": "int", "now": "float8", "lease": "float8",
         "worker_id": "text", "ahead": "boolean"}  # fmt: skip
VALUES = {"queue": "'default'", "limit": str(BATCH), "now": "NULL", "lease": "600",
          "worker_id": "'w1'", "ahead": "false"}  # fmt: skip
"""The claim's parameters, as a worker of `default` with no row in `workers` sends them."""

FILL = """
INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at)
SELECT queue, priority, '', ready_xid, id, run_at FROM job_documents
"""
DOCUMENTS = """
INSERT INTO lanes (queue, priority) VALUES ('default', 0);
INSERT INTO job_documents (id, task, queue, args, status, run_at, max_retries, retry_backoff,
                           retry_backoff_max, chosen, created_at, updated_at, ready_xid)
SELECT lpad(i::text, 36, '0'), 'noop', 'default', '{}', 'queued', now() - interval '1 s',
       3, 1, 60, 15, now(), now(), pg_current_xact_id()
FROM generate_series(1, %(jobs)s) AS i
"""

PRINTING = re.compile(rb"^\s*([\d,]+) .*:debugtup ", re.MULTILINE)


def script(name: str, claims: int) -> str:
    """The single-user backend's input: heartq's session settings, `name` prepared with
    typed parameters, then run `claims` times (`-j`: a statement ends at `;` and a blank
    line)."""
    body, names = positional(getattr(pg_q, name))
    settings = {"search_path": "heartq", "plan_cache_mode": "force_generic_plan", **PLANNER}
    lines = [f"SET {key} = {value};" for key, value in settings.items()]
    lines.append(f"PREPARE claim({', '.join(TYPES[str(n)] for n in names)}) AS {body};")
    lines += [f"EXECUTE claim({', '.join(VALUES[str(n)] for n in names)});"] * claims
    return "\n\n".join(lines) + "\n\n"


def instructions(cluster: PrivateCluster, database: str, text: str) -> tuple[int, int]:
    """The instructions one single-user backend spends on `text`, start-up included, and
    those it spends printing the rows it answers."""
    out = cluster.root / f"callgrind.{database}"
    total = single_user_instructions(cluster, database, text, out, paragraphs=True)
    annotate = shutil.which("callgrind_annotate") or "callgrind_annotate"
    listing = subprocess.run(
        [annotate, "--inclusive=yes", str(out)], capture_output=True, check=True
    ).stdout
    printed = PRINTING.findall(listing)
    return total, int(printed[0].replace(b",", b"")) if printed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4_000)
    args = parser.parse_args()
    unwind_on_sigterm()
    rounds = (args.jobs // BATCH // 4, args.jobs // BATCH)
    cluster = PrivateCluster({"autovacuum": "off", "shared_buffers": "256MB"})
    try:
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE claims")
        url = cluster.url.rsplit("/", 1)[0] + "/claims"
        app = App(url)
        app.migrate()
        app.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET search_path = heartq")
            for statement in DOCUMENTS.split(";"):
                conn.execute(statement, {"jobs": args.jobs})  # type: ignore[arg-type]
            conn.execute(FILL)
            conn.execute("VACUUM ANALYZE")
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            for name in CLAIMS:
                for claims in rounds:
                    copy = sql.Identifier(f"{name.lower()}_{claims}")
                    admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE claims").format(copy))
        cluster.stop()
        print(f"claim_instructions: {args.jobs:,} jobs queued, claims of {BATCH}; a job claimed")
        print(f"{'statement':<18} {'all':>9} {'printing':>9} {'claim':>9}")
        for name in CLAIMS:
            (a, a_printed), (b, b_printed) = (
                instructions(cluster, f"{name.lower()}_{claims}", script(name, claims))
                for claims in rounds
            )
            jobs = (rounds[1] - rounds[0]) * BATCH
            every, printing = (b - a) / jobs, (b_printed - a_printed) / jobs
            print(f"{name:<18} {every / 1e3:>8.1f}k {printing / 1e3:>8.1f}k"
                  f" {(every - printing) / 1e3:>8.1f}k")  # fmt: skip
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
