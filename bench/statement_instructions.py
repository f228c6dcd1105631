"""What the hot statements cost the server, in instructions a job: each claim a worker of
one queue may send (`CLAIM_ONE_QUEUE`, `CLAIM_IN_ORDER`; and `CLAIM_ONE_QUEUE` where the
jobs are spread over 20 fairness keys, or over each `--keys` count) or of two (`CLAIM`,
`CLAIM_QUEUES_IN_ORDER`) and the finish of what it claimed (`FINISH`), run alone, so
that two shapes of a statement compare without the rest of a job's work (the heartbeat,
the timers, the other statement) or the noise of a fleet.

    .venv/bin/python -m bench.statement_instructions              # 4,000 jobs, 3 minutes
    .venv/bin/python -m bench.statement_instructions --jobs 400   # the code path
    .venv/bin/python -m bench.statement_instructions --only keys --keys 1 5 10 20 40
    .venv/bin/python -m bench.statement_instructions --only IN_ORDER --batch 10

On a private PostgreSQL cluster (`autovacuum` off), one database with heartq's schema and
N jobs queued in the ready log (one lane, no key: the common case, and the bench's) is
copied once a claim and a round; for the finish, once more with every job claimed in
order by one worker (the real statement, through psycopg) and copied once a round. The
cluster is then stopped and each copy served by one single-user backend (`postgres
--single`) under `valgrind --tool=callgrind`, with heartq's session settings (generic
plans, its planner settings): the statement prepared, then run as a worker runs it,
batches of 50 (claims of 50; finishes of 50 succeeded no-op jobs, in the order they were
claimed), a quarter of the jobs in one round and all of them in the other; a figure is
the difference of the two rounds over the difference of their jobs, so the backend's
start and first reads cancel out. A single-user backend prints each row it answers
(`debugtup`, about 46 k instructions a claimed job's row of 18 columns, the same for
every claim): the figures are given with it and without it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql

from bench.cost.cluster import single_user_instructions
from bench.servers.postgres import PrivateCluster
from bench.sigterm import unwind_on_sigterm
from heartq.app import App
from heartq.store.documents import finish_doc
from heartq.store.postgres import queries as pg_q
from heartq.store.postgres.queries.batches import FINISH_BATCH
from heartq.store.postgres.queries.settings import PLANNER
from heartq.store.postgres.statements import positional

CLAIMS = ("CLAIM_ONE_QUEUE", "CLAIM_IN_ORDER", "CLAIM", "CLAIM_QUEUES_IN_ORDER")
"""The claims of one queue and of two (`default`, whose jobs are queued, and `proc`, empty,
as a process worker's): with the turns of fair shares, and in order (what a worker of
queues without fairness keys sends)."""

STATEMENTS = (*CLAIMS, "FINISH")
"""What is measured: the claims, and the finish of the jobs claimed."""

BATCH = 50
"""Jobs a statement takes or ends."""

WORKER = "w1"
"""The worker that claims and finishes (it has no row in `workers`)."""

CLAIM_TYPES = {"queue": "text", "queues": "text[]", "limit": "int", "now": "float8",
               "lease": "float8", "worker_id": "text", "ahead": "boolean"}  # fmt: skip
CLAIM_VALUES = {"queue": "default", "queues": ["default", "proc"], "limit": BATCH,
                "now": None, "lease": 600.0, "worker_id": WORKER, "ahead": False}  # fmt: skip
"""The claim's parameters, as a worker of `default` (and `proc`, for a claim of several)
sends them."""

FINISH_TYPES = {
    **{f"finishes_{key}": f"{kind}[]" for key, kind in FINISH_BATCH.fields},
    **{f"finishes_{key}_all": kind for key, kind in FINISH_BATCH.fields[1:]},
    "worker_id": "text", "now": "float8", "defer": "boolean",
}  # fmt: skip
FINISH_VALUES = {"worker_id": WORKER, "now": None, "defer": True}
"""The finish's parameters beside its batch (`defer`: a statement that commits by itself,
as a worker's finish is)."""

FILL = """
INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at)
SELECT queue, priority, '', ready_xid, id, run_at FROM job_documents
"""
DOCUMENTS = """
INSERT INTO lanes (queue, priority) VALUES ('default', 0);
INSERT INTO job_documents (id, task, queue, args, status, run_at, max_retries, retry_backoff,
                           retry_backoff_max, chosen, created_at, updated_at, ready_xid)
SELECT lpad(to_hex(i), 32, '0')::uuid, 'noop', 'default', '{}', 'queued', now() - interval '1 s',
       3, 1, 60, 15, now(), now(), pg_current_xact_id()
FROM generate_series(1, %(jobs)s) AS i
"""

KEYS = (20,)
"""Fairness keys of the keyed backlogs (`CLAIM_ONE_QUEUE` over as many lanes; `--keys`), as
in `python -m bench`'s fairness keys' cell: what a lane a claim serves costs is the
difference of two."""


def keyed(keys: int) -> str:
    """The keyed backlog: the same jobs spread over `keys` fairness keys, a lane each."""
    width = len(str(max(keys - 1, 10)))
    return f"""
UPDATE job_documents
SET fair_key = 'k' || lpad((('x' || right(id::text, 8))::bit(32)::int % {keys})::text,
                          {width}, '0');
INSERT INTO lanes (queue, priority, fair_key)
SELECT DISTINCT 'default', 0, fair_key FROM job_documents;
INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at)
SELECT queue, priority, fair_key, ready_xid, id, run_at FROM job_documents
"""

PRINTING = re.compile(rb"^\s*([\d,]+) .*:debugtup ", re.MULTILINE)


def literal(value: object) -> str:
    """`value` as an SQL literal of the script (None, a bool, a number, a text, a list of
    them; the statement casts each to its parameter's type)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):  # a field whose values differ in a batch
        return "ARRAY[" + ", ".join(map(literal, value)) + "]"
    return "'" + str(value).replace("'", "''") + "'"


def script(name: str, runs: list[dict[str, object]], types: dict[str, str]) -> str:
    """The single-user backend's input: heartq's session settings, `name` prepared with
    typed parameters, then run once with each of `runs`' parameters (`-j`: a statement
    ends at `;` and a blank line)."""
    body, names = positional(getattr(pg_q, name))
    settings = {"search_path": "heartq", "plan_cache_mode": "force_generic_plan", **PLANNER}
    lines = [f"SET {key} = {value};" for key, value in settings.items()]
    lines.append(f"PREPARE hot({', '.join(types[str(n)] for n in names)}) AS {body};")
    lines += [f"EXECUTE hot({', '.join(literal(run[str(n)]) for n in names)});" for run in runs]
    return "\n\n".join(lines) + "\n\n"


def claims(batch: int) -> Callable[[int], list[dict[str, object]]]:
    """`count` claims of `batch`, as a worker of `default` sends them."""
    return lambda count: [dict(CLAIM_VALUES, limit=batch)] * count


def finishes(
    claimed: list[tuple[str, int]], batch: int
) -> Callable[[int], list[dict[str, object]]]:
    """The finishes of the first `count` batches of `claimed` (ids and execution ids, in
    the order they were claimed), each a no-op job's success packed as a worker packs it
    (`FINISH_BATCH.pack`: a field with one value in the whole batch travels once)."""

    def batches(count: int) -> list[dict[str, object]]:
        runs = []
        for start in range(0, count * batch, batch):
            docs = [
                finish_doc(job, execution, status="succeeded", outcome="succeeded",
                           result="null")
                for job, execution in claimed[start : start + batch]
            ]  # fmt: skip
            runs.append({**FINISH_VALUES, **FINISH_BATCH.pack(docs)})
        return runs

    return batches


def claim_all(url: str) -> list[tuple[str, int]]:
    """Every queued job claimed in order by `WORKER`, with the real statement: the ids
    and execution ids, in the order they were claimed."""
    claimed: list[tuple[str, int]] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path = heartq")
        while rows := conn.execute(pg_q.CLAIM_IN_ORDER, CLAIM_VALUES).fetchall():
            claimed += [(str(row[0]), int(row[5])) for row in rows if row[0] is not None]
            if rows[0][0] is None:
                raise RuntimeError("the claim in order handed over to the turns")
    return claimed


def instructions(
    cluster: PrivateCluster, database: str, text: str, keep: Path | None
) -> tuple[int, int]:
    """The instructions one single-user backend spends on `text`, start-up included, and
    those it spends printing the rows it answers; its callgrind file copied into `keep`."""
    out = cluster.root / f"callgrind.{database}"
    total = single_user_instructions(cluster, database, text, out, paragraphs=True)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(out, keep / out.name)
    annotate = shutil.which("callgrind_annotate") or "callgrind_annotate"
    listing = subprocess.run(
        [annotate, "--inclusive=yes", str(out)], capture_output=True, check=True
    ).stdout
    printed = PRINTING.findall(listing)
    return total, int(printed[0].replace(b",", b"")) if printed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4_000)
    parser.add_argument("--keys", type=int, nargs="+", default=list(KEYS), metavar="N",
                        help="the keyed claim over N keys' lanes, for each N (default 20)")
    parser.add_argument("--batch", type=int, default=BATCH,
                        help=f"jobs a statement takes or ends (default {BATCH})")
    parser.add_argument("--only", nargs="+", metavar="TEXT",
                        help="run only the statements whose label holds one of these")
    parser.add_argument("--keep-callgrind", type=Path, metavar="DIR",
                        help="copy each run's callgrind file here (callgrind_annotate)")
    args = parser.parse_args()
    unwind_on_sigterm()
    batch = args.batch
    rounds = (args.jobs // batch // 4, args.jobs // batch)
    cluster = PrivateCluster({"autovacuum": "off", "shared_buffers": "256MB"})
    try:
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE queued")
        base = cluster.url.rsplit("/", 1)[0]
        app = App(f"{base}/queued")
        app.migrate()
        app.close()
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            for keys in args.keys:
                admin.execute(f"CREATE DATABASE keyed{keys} TEMPLATE queued")
        fills = [("queued", FILL), *((f"keyed{keys}", keyed(keys)) for keys in args.keys)]
        for database, fill in fills:
            with psycopg.connect(f"{base}/{database}", autocommit=True) as conn:
                conn.execute("SET search_path = heartq")
                for statement in DOCUMENTS.split(";"):
                    conn.execute(statement, {"jobs": args.jobs})  # type: ignore[arg-type]
                for statement in fill.split(";"):
                    conn.execute(statement)  # type: ignore[arg-type]
                conn.execute("VACUUM ANALYZE")
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE claimed TEMPLATE queued")
        claimed = claim_all(f"{base}/claimed")
        with psycopg.connect(f"{base}/claimed", autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        # (what is printed, the statement, its runs, its parameters' types, the database)
        runs = [(name, name, claims(batch), CLAIM_TYPES, "queued") for name in CLAIMS]
        runs += [(f"CLAIM_ONE_QUEUE, {keys} keys", "CLAIM_ONE_QUEUE", claims(batch),
                  CLAIM_TYPES, f"keyed{keys}") for keys in args.keys]  # fmt: skip
        runs.append(("FINISH", "FINISH", finishes(claimed, batch), FINISH_TYPES, "claimed"))
        if args.only:
            runs = [run for run in runs if any(text in run[0] for text in args.only)]
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            for number, (*_, template) in enumerate(runs):
                for count in rounds:
                    copy = sql.Identifier(f"run{number}_{count}")
                    admin.execute(
                        sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                            copy, sql.Identifier(template)
                        )
                    )
        cluster.stop()
        print(f"statement_instructions: {args.jobs:,} jobs, batches of {batch}; a job")
        print(f"{'statement':<26} {'all':>9} {'printing':>9} {'statement':>9}")
        for number, (label, name, make, types, _) in enumerate(runs):
            (a, a_printed), (b, b_printed) = (
                instructions(
                    cluster, f"run{number}_{count}", script(name, make(count), types),
                    args.keep_callgrind,
                )
                for count in rounds
            )
            jobs = (rounds[1] - rounds[0]) * batch
            every, printing = (b - a) / jobs, (b_printed - a_printed) / jobs
            print(f"{label:<26} {every / 1e3:>8.1f}k {printing / 1e3:>8.1f}k"
                  f" {(every - printing) / 1e3:>8.1f}k")  # fmt: skip
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
