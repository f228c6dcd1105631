"""What the two writes of a job's row cost the server, in instructions: the claim's
update and the finish's update, counted apart from everything else a claim and a finish
do (finding the jobs, locking them, their plans), for the jobs table as schema v39 wrote
it (both on the job's row) and for the shapes docs/design-notes/hot-path.md weighs
(`SHAPES`; schema v40 built its split: the real `ready` and `leases` make way for the
scratch shape's).

    .venv/bin/python -m bench.row_writes              # 4,000 jobs, about 2 minutes
    .venv/bin/python -m bench.row_writes --jobs 400   # the code path

On a private PostgreSQL cluster (`autovacuum` off, so nothing but the script touches the
tables), each shape gets a database of its own with heartq's migrations, its changes
(`SHAPES`) and N queued jobs. The cluster is then stopped and each database served by
one single-user backend (`postgres --single`) under `valgrind --tool=callgrind`: nothing
else runs, and instructions do not move with the machine's load. Four scripts a shape,
each in one backend: the claims of the first quarter of the jobs (updates of 50 jobs by
id: what `CLAIM`'s update writes), the claims of the rest, then the finishes of each
(by id and execution, as the fenced `FINISH` writes them). A figure is the difference
of a pair over the difference of its jobs: what a backend pays once (its start, its
first look at each table and index) cancels out, as in `bench.cost`.

A heap-only claim on today's table needs what the claim changes to be in no index:
`status` leaves every index predicate for a column that says the same of a job at rest
(a running job counts as queued there, `rest`), `jobs_worker_idx` goes (a gone worker's
attempts would have to be found another way), the pending results' index is keyed by
id, and the claim keeps `ready_xid`. The design's split keeps the claim off the job row
(a narrow ready entry and a lease) and leaves the row's indexes nothing its end changes.
An update is heap-only only if the new version fits on the row's page: at fillfactor
85-90 a page keeps room for few of its rows' new versions, so each reshaped table is
counted at 50 too (issue 44's prototype). The split with the job's end appended as a
narrow row of its own leaves the wide row one version, at fillfactor 100 (and its
claim may delete its ready entry rather than mark it): docs/design-notes/hot-path.md,
"The end appended".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from bench.cost.cluster import single_user_instructions
from bench.servers.postgres import PrivateCluster
from bench.sigterm import unwind_on_sigterm
from heartq.app import App

BATCH = 50
"""Jobs a claim and a finish write in one statement."""

_REST = "CASE WHEN status = 'running' THEN 'queued' ELSE status END"
HEAP_ONLY_CLAIM = f"""
ALTER TABLE job_documents ADD COLUMN rest text GENERATED ALWAYS AS ({_REST}) STORED;
DROP INDEX IF EXISTS jobs_worker_idx, jobs_pending_result_idx, jobs_claim_idx, jobs_dead_idx,
    jobs_detached_idx, jobs_finished_idx, jobs_key_running_idx, jobs_keyed_claim_idx,
    jobs_rated_claim_idx, jobs_ready_idx, jobs_running_rate_idx, jobs_unique_live_idx,
    jobs_waiting_idx;
CREATE INDEX jobs_claim_idx ON job_documents (queue, priority DESC, run_at, id)
    WHERE rest = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND ready_xid IS NULL;
CREATE INDEX jobs_ready_idx ON job_documents (queue, priority, ready_xid, id)
    WHERE rest = 'queued' AND ready_xid IS NOT NULL;
CREATE INDEX jobs_keyed_claim_idx ON job_documents (queue, priority DESC, run_at, id)
    WHERE rest = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL;
CREATE INDEX jobs_rated_claim_idx ON job_documents (rate_key, priority DESC, run_at, id)
    WHERE rest = 'queued' AND rate_key IS NOT NULL;
CREATE INDEX jobs_dead_idx ON job_documents (queue, created_at) WHERE rest = 'dead';
CREATE INDEX jobs_finished_idx ON job_documents (rest, finished_at) WHERE finished_at IS NOT NULL;
CREATE UNIQUE INDEX jobs_unique_live_idx ON job_documents (unique_key)
    WHERE unique_key IS NOT NULL AND rest = 'queued';
CREATE INDEX jobs_waiting_idx ON job_documents (queue) WHERE rest = 'waiting';
CREATE INDEX jobs_pending_result_idx ON job_documents (id) WHERE result_pending;
"""

FILL = """
INSERT INTO job_documents (id, task, queue, args, status, run_at, max_retries, retry_backoff,
                  retry_backoff_max, created_at, updated_at, ready_xid)
SELECT lpad(to_hex(i), 32, '0')::uuid, 'noop', 'default', '[]', 'queued', now(), 3, 1, 60,
       now(), now(), pg_current_xact_id()
FROM generate_series(1, %s) AS i
"""

SPLIT = """
DROP VIEW jobs, executions;
DROP TABLE ready, leases;
DROP INDEX IF EXISTS jobs_worker_idx, jobs_pending_result_idx, jobs_claim_idx, jobs_dead_idx,
    jobs_detached_idx, jobs_finished_idx, jobs_key_running_idx, jobs_keyed_claim_idx,
    jobs_rated_claim_idx, jobs_ready_idx, jobs_running_rate_idx, jobs_unique_live_idx,
    jobs_waiting_idx, jobs_unique_key_idx;
CREATE INDEX jobs_dead_idx ON job_documents (queue, created_at) WHERE dead_reason IS NOT NULL;
CREATE TABLE ready (
    lane integer NOT NULL, enq_xid xid8 NOT NULL, seq bigint NOT NULL,
    job_id uuid NOT NULL, execution_id bigint NOT NULL,
    attempts integer NOT NULL, consumed boolean NOT NULL DEFAULT false,
    PRIMARY KEY (lane, enq_xid, seq)
) WITH (fillfactor = 70);
CREATE TABLE leases (
    job_id uuid PRIMARY KEY, execution_id bigint NOT NULL,
    worker_id text NOT NULL, claimed_at timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX leases_worker_idx ON leases (worker_id);
INSERT INTO ready SELECT 1, '1', i, lpad(to_hex(i), 32, '0')::uuid, 1, 0
FROM generate_series(1, %(jobs)s) AS i;
VACUUM ANALYZE ready;
"""
"""docs/design-notes/hot-path.md's tables, reduced to what a no-op job's claim and finish
write: the wide row keeps only its primary key and the dead jobs' index (so its one
update, at the end, can be heap-only), a ready entry consumed by a heap-only update, and
a narrow lease inserted by the claim and deleted by the finish."""


APPENDED_END = SPLIT + """;
DROP TABLE IF EXISTS job_ends;
CREATE TABLE job_ends (
    job_id uuid PRIMARY KEY, execution_id bigint NOT NULL,
    status text NOT NULL, worker_id text NOT NULL, started_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL, attempts integer NOT NULL, result json, error text
);
"""
"""The split, with the wide row never updated: the job's end is a narrow row of its own
(appended by the finish, in the statement that deletes the lease), so the job row keeps
the one version its enqueue wrote, at fillfactor 100."""


def appended_finishes(ids: list[str]) -> str:
    """The leases deleted and each job's end appended: the wide row untouched."""
    return "".join(
        "WITH gone AS (DELETE FROM heartq.leases WHERE job_id = "
        f"ANY({_array(ids[k:k + BATCH])}) RETURNING job_id, execution_id, worker_id, "
        "claimed_at) INSERT INTO heartq.job_ends SELECT job_id, execution_id, 'succeeded', "
        "worker_id, claimed_at, now(), 1, 'null' FROM gone;\n"
        for k in range(0, len(ids), BATCH)
    )


def consuming_claims(ids: list[str]) -> str:
    """The ready entries deleted (not marked) and the leases inserted."""
    return split_claims(ids).replace(
        "UPDATE heartq.ready SET consumed = true WHERE", "DELETE FROM heartq.ready WHERE"
    )


def claims(ids: list[str], clears_ready: bool) -> str:
    """One line a statement (the single-user backend ends a statement at a newline)."""
    ready = "ready_xid = NULL, " if clears_ready else ""
    return "".join(
        "UPDATE heartq.job_documents SET status = 'running', worker_id = 'w1', "
        "execution_id = execution_id + 1, attempts = attempts + 1, "
        "lease_expires_at = now() + interval '30 s', heartbeat_at = now(), "
        f"started_at = now(), updated_at = now(), claimed_ahead = false, {ready}"
        f"progress_value = NULL WHERE id = ANY({_array(ids[k:k + BATCH])});\n"
        for k in range(0, len(ids), BATCH)
    )


def finishes(ids: list[str]) -> str:
    return "".join(
        "UPDATE heartq.job_documents SET status = 'succeeded', finished_at = now(), "
        "result = 'null', updated_at = now(), lease_expires_at = NULL, "
        "result_pending = false "
        f"WHERE id = ANY({_array(ids[k:k + BATCH])}) AND execution_id = 1;\n"
        for k in range(0, len(ids), BATCH)
    )


def split_claims(ids: list[str]) -> str:
    """The ready entries consumed and the leases inserted, one statement a batch (a job's
    entry is numbered by its id: `SPLIT` fills them so)."""
    return "".join(
        "WITH taken AS (UPDATE heartq.ready SET consumed = true WHERE lane = 1 "
        f"AND enq_xid = '1' AND seq BETWEEN {int(ids[k], 16)} AND {int(ids[k:k + BATCH][-1], 16)} "
        "RETURNING job_id, execution_id) INSERT INTO heartq.leases "
        "SELECT job_id, execution_id, 'w1', now(), now() + interval '30 s' FROM taken;\n"
        for k in range(0, len(ids), BATCH)
    )


def split_finishes(ids: list[str]) -> str:
    """The leases deleted and the wide row's one update (the attempt recorded on it)."""
    return "".join(
        "WITH gone AS (DELETE FROM heartq.leases WHERE job_id = "
        f"ANY({_array(ids[k:k + BATCH])}) RETURNING job_id, execution_id, worker_id, "
        "claimed_at) UPDATE heartq.job_documents AS j SET status = 'succeeded', "
        "finished_at = now(), result = 'null', updated_at = now(), attempts = 1, "
        "execution_id = g.execution_id, worker_id = g.worker_id, started_at = g.claimed_at "
        "FROM gone AS g WHERE j.id = g.job_id;\n"
        for k in range(0, len(ids), BATCH)
    )


@dataclass(frozen=True)
class Shape:
    fillfactor: int
    """The jobs table's."""
    changes: str
    """Its schema's changes after heartq's migrations (`%(jobs)s`: N)."""
    claim: Callable[[list[str]], str]
    finish: Callable[[list[str]], str]


SHAPES = {
    "v39: both on the row (fillfactor 90)": Shape(
        90, "", lambda ids: claims(ids, True), finishes
    ),
    "heap-only claim, fillfactor 90": Shape(
        90, HEAP_ONLY_CLAIM, lambda ids: claims(ids, False), finishes
    ),
    "heap-only claim, fillfactor 50": Shape(
        50, HEAP_ONLY_CLAIM, lambda ids: claims(ids, False), finishes
    ),
    "split: ready, leases, one end (85)": Shape(85, SPLIT, split_claims, split_finishes),
    "split: ready, leases, one end (50)": Shape(50, SPLIT, split_claims, split_finishes),
    "split, the end appended (100)": Shape(100, APPENDED_END, split_claims, appended_finishes),
    "split, entry deleted, end appended": Shape(
        100, APPENDED_END, consuming_claims, appended_finishes
    ),
}


def _array(ids: list[str]) -> str:
    """The ids written into the script: a single-user backend reads plain text, with no
    parameters (they are this module's own digits, never outside input)."""
    return "ARRAY[" + ",".join(f"'{i}'" for i in ids) + "]::uuid[]"


def prepare(cluster: PrivateCluster, database: str, shape: Shape, jobs: int) -> None:
    with psycopg.connect(cluster.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    url = cluster.url.rsplit("/", 1)[0] + f"/{database}"
    App(url).migrate()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path = heartq")
        conn.execute(
            sql.SQL("ALTER TABLE job_documents SET (fillfactor = {})").format(
                sql.Literal(shape.fillfactor)
            )
        )
        conn.execute(FILL, (jobs,))
        if shape.changes:
            for statement in shape.changes.split(";"):
                if statement.strip():
                    conn.execute(statement, {"jobs": jobs} if "%(jobs)s" in statement else None)
        conn.execute("VACUUM ANALYZE job_documents")


PLANS = "SET enable_seqscan = off;\nSET enable_hashjoin = off;\n"
"""Before every script: each batch's rows found by key, whatever a small table's
statistics suggest (a hash join over a sequential scan is not what the hot statements
do: tests/plans pins their probes)."""


def instructions(cluster: PrivateCluster, database: str, script: str, name: str) -> int:
    """The instructions one single-user backend spends on `script`, start-up included."""
    out = cluster.root / f"callgrind.{name}"
    return single_user_instructions(cluster, database, PLANS + script, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4_000)
    args = parser.parse_args()
    unwind_on_sigterm()
    ids = [f"{i:032x}" for i in range(1, args.jobs + 1)]  # as FILL makes them
    cluster = PrivateCluster({"autovacuum": "off", "shared_buffers": "256MB"})
    try:
        names = {shape: f"shape{n}" for n, shape in enumerate(SHAPES)}
        for shape, database in names.items():
            prepare(cluster, database, SHAPES[shape], args.jobs)
        cluster.stop()
        print(f"row_writes: {args.jobs:,} jobs, updates of {BATCH}; instructions a job")
        print(f"{'shape':<36} {'claim':>9} {'finish':>9} {'both':>9}")
        quarter = args.jobs // 4 // BATCH * BATCH
        first, rest = ids[:quarter], ids[quarter:]
        for shape, database in names.items():
            made = SHAPES[shape]
            runs = [
                instructions(cluster, database, script, f"{database}.{n}")
                for n, script in enumerate((
                    made.claim(first), made.claim(rest), made.finish(first), made.finish(rest)
                ))
            ]
            claim, finish = ((b - a) / (len(rest) - len(first)) for a, b in (runs[:2], runs[2:]))
            both = claim + finish
            print(f"{shape:<36} {claim / 1e3:>8.1f}k {finish / 1e3:>8.1f}k {both / 1e3:>8.1f}k")
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
