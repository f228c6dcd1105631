"""The one walk for every key (fair-turns.md, last section), measured before it is built:
a prototype of its claim statement against today's claims, on PostgreSQL.

    .venv/bin/python docs/design-notes/fair-one-walk-experiment.py \\
        [--server postgresql://postgres@127.0.0.1:5432/test] [--jobs 20000] [--rounds 100]

It makes a scratch database on the server (`heartq_fair_walk_exp`, dropped first and at
the end), migrates heartq's schema into it and enqueues `--jobs` no-op jobs into each of
eight queues: `plain` and `plain_queues` without keys, and `fair_K` and `tags_K` with K =
1, 20 and 1,000 fairness keys, each job one of them in turn. Today's enqueue puts a keyed
job's entry in its key's lane; for `tags_K` the entries are then moved, as the design's
enqueue would put them, into their tier's one lane (key '') with a start tag each (its
rank in its key: what `max(V, F) + n / weight` gives jobs enqueued before any claim), and
indexed by `(queue, priority, fair_tag, job_id)`. The design's marks (`tier_marks`: the
arrival frontier with its pending list and the service position, one row a tier) are a
table of their own.

Then claims of 50 (each its own statement, autocommit, generic plans, as a worker's),
alternating: `CLAIM_IN_ORDER` on `plain` and `CLAIM_QUEUES_IN_ORDER` on `plain_queues`
(the claim in order of one queue and of several, each asked for one), `CLAIM_ONE_QUEUE`
(the rotation) on `fair_K` and the prototype (`fair-one-walk-claim.sql`, a claim of
several queues asked for one) on `tags_K`; today's are their golden SQL
(tests/plans/sql/postgres). Every tenth claim of each runs under `EXPLAIN (ANALYZE,
BUFFERS, TIMING OFF)` for its buffers. Three phases of `--rounds` rounds: `fresh` (no
mark yet: the arrival walk passes two claims' worth of entries a claim), `passed` (a
mark with every entry passed: the tag walk alone) and `held` (the same, with another
session holding the xmin horizon from the phase's start: its first and last claims'
buffers show whether the walk stays flat). Time is the client's, a round trip included:
run it on a quiet machine, and read the ratios, not the milliseconds.

`--enqueue`: what the design's enqueue adds, instead: today's enqueue statement
(`INSERT_JOBS_WAKING`) against the same with each runnable job's entry put in its tier's
lane and tagged there (the tier's service position `V`, a backward probe of its marks;
each key's finish `F`, one of `fair_finishes`; each key's new finish appended), by
heartq's own `enqueue` and `enqueue_many`, alternating, one job and 100 a call, over 20
keys.

`--stress SECONDS`: the prototype under concurrency instead, on its own scratch database:
two sessions enqueue jobs of five keys and three priorities into two queues (heartq's
enqueue in their own transaction, its statement as the design's enqueue would write it,
`tagging`; some transactions held open up to 0.3 s, some rolled back), three claim
through the prototype (claims of 1 to 20; some rolled back), and another holds the xmin
horizon for a second at a time; then the claimers drain the tier. It checks the proof's
theorem by its consequence: every committed job claimed exactly once (a second claim of a
job would break the leases' key), and no entry left.

What the prototype leaves out (fair-turns.md, "The one walk, measured"): the walks of
the pending transactions' entries (none here: one session), the re-tag of a late entry
(taken first here), the tags of due jobs outside the ready log (their walk is the claim in
order's, run for its cost; none is due), priorities past the first and claims of several
queues.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import heartq
from heartq.store.postgres.queries.settings import PLANNER

HERE = Path(__file__).parent
GOLDEN = HERE.parents[1] / "tests" / "plans" / "sql" / "postgres"
DATABASE = "heartq_fair_walk_exp"
KEYS = (1, 20, 1000)
IN_ORDER = (GOLDEN / "CLAIM_IN_ORDER.sql").read_text()
QUEUES_IN_ORDER = (GOLDEN / "CLAIM_QUEUES_IN_ORDER.sql").read_text()


def one_walk() -> str:
    """The prototype's statement (`fair-one-walk-claim.sql`) with what it shares with the
    claim in order of several queues taken from that one's golden SQL: the walk of the
    queues' priorities (`level`), the walk of the due jobs outside the ready log (`due`),
    and the claim of what it picked (from `holder` on: the entries deleted, the leases
    inserted, the rows answered)."""
    levels = QUEUES_IN_ORDER[QUEUES_IN_ORDER.index("    WITH RECURSIVE level(priority) AS (") :]
    levels = levels[: levels.index("    SELECT w.* FROM level")]
    due = QUEUES_IN_ORDER[QUEUES_IN_ORDER.index("), due AS MATERIALIZED (") :]
    due = due[: due.index("), turns_due AS MATERIALIZED (")]
    claimed = QUEUES_IN_ORDER[QUEUES_IN_ORDER.index("), holder AS (") :]
    claimed = claimed[: claimed.index("\nUNION ALL\nSELECT NULL")]
    text = (HERE / "fair-one-walk-claim.sql").read_text()
    text = re.sub(r"/\*LEVELS: .*\*/\n", lambda _: levels, text)
    text = re.sub(r"/\*DUE: .*\*/\n", lambda _: due, text)
    return re.sub(r"/\*CLAIMED: .*\*/\n", lambda _: claimed + "\n", text)


STATEMENTS = {
    "in order": IN_ORDER,
    "of queues": QUEUES_IN_ORDER,
    "rotation": (GOLDEN / "CLAIM_ONE_QUEUE.sql").read_text(),
    "one walk": one_walk(),
}
VARIANTS = [("in order", "plain", 0), ("of queues", "plain_queues", 0)] + [
    (kind, f"{prefix}_{keys}", keys)
    for keys in KEYS
    for kind, prefix in (("rotation", "fair"), ("one walk", "tags"))
]
NO_ID = "00000000-0000-0000-0000-000000000000"
CONVERT = """
ALTER TABLE ready ADD COLUMN fair_tag float8, ADD COLUMN tag_base float8;
UPDATE ready SET fair_key = '', fair_tag = r.rank
FROM (SELECT ctid AS c,
             row_number() OVER (PARTITION BY queue, fair_key ORDER BY ready_xid, job_id) - 1
             AS rank
      FROM ready WHERE queue LIKE 'tags%') AS r
WHERE ready.ctid = r.c;
DELETE FROM lanes WHERE queue LIKE 'tags%';
INSERT INTO lanes SELECT DISTINCT queue, 0, '' FROM ready WHERE queue LIKE 'tags%';
CREATE INDEX ready_tag_idx ON ready (queue, priority, fair_tag, job_id)
    WHERE fair_tag IS NOT NULL;
CREATE TABLE tier_marks (
    queue text NOT NULL, priority int NOT NULL, frontier_xid xid8 NOT NULL,
    frontier_id uuid NOT NULL, pending xid8[] NOT NULL, pending_after uuid[] NOT NULL,
    service_tag float8 NOT NULL, service_id uuid NOT NULL, made_at timestamptz NOT NULL);
CREATE INDEX tier_marks_idx ON tier_marks (queue, priority, frontier_xid, frontier_id, made_at);
CREATE TABLE fair_finishes (queue text NOT NULL, priority int NOT NULL, fair_key text NOT NULL,
    finish float8 NOT NULL, made_at timestamptz NOT NULL);
CREATE INDEX fair_finishes_idx ON fair_finishes (queue, priority, fair_key, finish);
INSERT INTO workers (id, hostname, pid, queues, concurrency, status, started_at,
                     last_heartbeat_at)
VALUES ('experiment', 'here', 1, '[]', 50, 'active', now(), now());
"""
ENTRIES_LOGGED = """
CREATE TABLE heartq.entries_made (job_id uuid NOT NULL);
CREATE FUNCTION heartq.entry_made() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO heartq.entries_made VALUES (NEW.job_id); RETURN NULL; END $$;
CREATE TRIGGER entry_made AFTER INSERT ON heartq.ready
    FOR EACH ROW EXECUTE FUNCTION heartq.entry_made();
"""
"""Every entry made (the enqueue's, each re-tag's), by job: how often one job was re-tagged
(`--stress` only)."""
STRESSED = ("stress", "other")
"""The queues `--stress` enqueues into and claims, together."""
MINE = "SELECT fair_tag FROM ready WHERE ready_xid = pg_current_xact_id()"
MARKS_NOW = (
    "SELECT service_tag FROM tier_marks WHERE queue = %s AND priority = %s"
    " ORDER BY frontier_xid DESC, frontier_id DESC, made_at DESC LIMIT 1"
)
PASS_ALL = f"""
INSERT INTO tier_marks
SELECT DISTINCT queue, 0, pg_snapshot_xmax(pg_current_snapshot()), '{NO_ID}'::uuid,
       '{{}}'::xid8[], '{{}}'::uuid[], '-infinity'::float8, '{NO_ID}'::uuid, now()
FROM ready WHERE queue LIKE 'tags%'
"""


def database_url(server: str) -> str:
    base, _, query = server.partition("?")
    return base.rsplit("/", 1)[0] + f"/{DATABASE}" + (f"?{query}" if query else "")


def setup(server: str, jobs: int) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    app = heartq.App()

    @app.task(fair_key="k{key}")
    def keyed(key: int) -> None: ...

    @app.task
    def plain(key: int) -> None: ...

    app.use_url(database_url(server))
    app.migrate()
    for _, queue, keys in VARIANTS:
        task = "plain" if keys == 0 else "keyed"
        for offset in range(0, jobs, 1000):
            batch = [{"key": n % max(keys, 1)} for n in range(offset, min(jobs, offset + 1000))]
            app.enqueue_many(task, batch, queue=queue)
    app.close()
    options = "-c search_path=heartq"
    with psycopg.connect(database_url(server), autocommit=True, options=options) as conn:
        conn.execute(CONVERT)  # several statements: not prepared, no parameters
        conn.execute("VACUUM ANALYZE")


def connect(server: str) -> psycopg.Connection[Any]:
    """A session as a worker's: generic plans, heartq's planner settings (without them a
    generic plan made while the marks' table was empty scans it whole, once a lane)."""
    planner = " ".join(f"-c {name}={value}" for name, value in PLANNER.items())
    return psycopg.connect(
        database_url(server), autocommit=True, prepare_threshold=0,
        options=f"-c search_path=heartq -c plan_cache_mode=force_generic_plan {planner}",
    )  # fmt: skip


def phase(conn: psycopg.Connection[Any], name: str, rounds: int) -> None:
    times: dict[tuple[str, str, int], list[float]] = {v: [] for v in VARIANTS}
    buffers: dict[tuple[str, str, int], list[int]] = {v: [] for v in VARIANTS}
    explain = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) "
    for n in range(rounds):
        for variant in VARIANTS:
            kind, queue, _ = variant
            params = {"queue": queue, "queues": [queue], "limit": 50, "now": None,
                      "worker_id": "experiment",
                      "lease": 60.0, "ahead": False}  # fmt: skip
            if n % 10 == 9:
                with conn.transaction():
                    row = conn.execute(explain + STATEMENTS[kind], params).fetchone()
                plan = row[0][0]["Plan"] if row else {}
                buffers[variant].append(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])
                continue
            start = time.perf_counter()
            conn.execute(STATEMENTS[kind], params).fetchall()
            times[variant].append(time.perf_counter() - start)
    base, of_queues = (statistics.median(times[v]) for v in VARIANTS[:2])
    print(f"\n{name}: median ms a claim of 50 (x the claim in order of one queue, of several),"
          " buffers first / last")  # fmt: skip
    for variant in VARIANTS:
        kind, _, keys = variant
        ms = statistics.median(times[variant])
        seen = buffers[variant]
        ratios = f"x{ms / base:.2f}, x{ms / of_queues:.2f}"
        print(f"  {kind:9s} {keys:5d} keys  {ms * 1e3:6.2f} ({ratios})"
              f"  {seen[0]:5d} / {seen[-1]:5d}")  # fmt: skip


def tagging(statement: str) -> str:
    """An enqueue statement of heartq's (`INSERT_JOBS_WAKING`, `INSERT_ENTERED_JOBS`) as the
    design's enqueue would write it: a runnable job's entry in its tier's lane (key ''),
    tagged `max(V, F) + (n - 1) / weight` for the `n`-th job of its key in the call, and
    each key's new finish appended."""
    from heartq.store.postgres.queries import enqueue as e

    ready = "x.delay <= 0 AND x.concurrency_key IS NULL AND x.rate_key IS NULL"
    new_jobs = e._NEW_JOBS.replace("coalesce(x.fair_key, '') AS fair_key", "'' AS fair_key")
    entries = f"""turns AS MATERIALIZED (
    SELECT x.id, x.queue, x.priority, coalesce(x.fair_key, '') AS key,
           1.0 / coalesce(x.fair_weight, 1.0) AS step,
           row_number() OVER (PARTITION BY x.queue, x.priority, coalesce(x.fair_key, '')
                              ORDER BY x.id) AS n
    FROM x WHERE {ready}
), starts AS MATERIALIZED (
    SELECT k.queue, k.priority, k.key, v.v,
           greatest(v.v, coalesce((SELECT f.finish FROM fair_finishes AS f
                                   WHERE f.queue = k.queue AND f.priority = k.priority
                                     AND f.fair_key = k.key
                                   ORDER BY f.finish DESC LIMIT 1), 0)) AS start
    FROM (SELECT DISTINCT queue, priority, key FROM turns) AS k
    CROSS JOIN LATERAL (
        SELECT coalesce((SELECT greatest(c.service_tag, 0) FROM tier_marks AS c
                         WHERE c.queue = k.queue AND c.priority = k.priority
                         ORDER BY c.frontier_xid DESC, c.frontier_id DESC, c.made_at DESC
                         LIMIT 1), 0) AS v
    ) AS v
), finishes AS (
    INSERT INTO fair_finishes (queue, priority, fair_key, finish, made_at)
    SELECT s.queue, s.priority, s.key, s.start + max(t.n * t.step), now()
    FROM starts AS s JOIN turns AS t USING (queue, priority, key)
    GROUP BY s.queue, s.priority, s.key, s.start
), entries AS (
    INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at, fair_weight,
                       fair_tag, tag_base)
    SELECT x.queue, x.priority, '', pg_current_xact_id(), x.id,
           now() + make_interval(secs => x.delay), x.fair_weight,
           s.start + (t.n - 1) * t.step, s.v
    FROM x JOIN turns AS t ON t.id = x.id
    JOIN starts AS s ON (s.queue, s.priority, s.key) = (t.queue, t.priority, t.key)
)"""
    return statement.replace(e._NEW_JOBS, new_jobs).replace(e._ENTRIES, entries)


def enqueue_cost(server: str, rounds: int) -> None:
    """Today's enqueue against the design's, alternating, through heartq's own calls."""
    from heartq.store.postgres import queries

    setup(server, 0)
    today = queries.INSERT_JOBS_WAKING
    tagged = tagging(today)
    app = heartq.App()

    @app.task(fair_key="k{key}")
    def keyed(key: int) -> None: ...

    app.use_url(database_url(server))
    times: dict[tuple[str, int], list[float]] = {}
    try:
        for n in range(rounds):
            for size in (1, 100):
                for name, statement in (("today", today), ("tagged", tagged)):
                    queries.INSERT_JOBS_WAKING = statement
                    batch = [{"key": (n * size + i) % 20} for i in range(size)]
                    start = time.perf_counter()
                    if size == 1:
                        app.enqueue("keyed", batch[0], queue=name)
                    else:
                        app.enqueue_many("keyed", batch, queue=name)
                    times.setdefault((name, size), []).append(time.perf_counter() - start)
    finally:
        queries.INSERT_JOBS_WAKING = today
        app.close()
    print("\nenqueue: median ms a call (x today's), 20 keys")
    for size in (1, 100):
        base = statistics.median(times[("today", size)])
        for name in ("today", "tagged"):
            ms = statistics.median(times[(name, size)])
            print(f"  {size:3d} a call  {name:7s} {ms * 1e3:6.2f} (x{ms / base:.2f})")


def stress(server: str, seconds: float) -> None:
    """Enqueue, claim and hold the horizon at once for `seconds`, then drain; check."""
    from heartq.store.postgres import queries

    setup(server, 0)
    url = database_url(server)
    app = heartq.App()

    @app.task(fair_key="k{key}")
    def keyed(key: int) -> None: ...

    app.use_url(url)
    queries.INSERT_ENTERED_JOBS = tagging(queries.INSERT_ENTERED_JOBS)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(ENTRIES_LOGGED)
    stop = threading.Event()
    enqueued: list[str] = []
    late = [0]
    rolled = [0]  # jobs whose enqueue rolled back
    claimed: list[str] = []
    errors: list[str] = []
    params = {"queues": list(STRESSED), "now": None, "worker_id": "experiment",
              "lease": 60.0, "ahead": False}  # fmt: skip

    def enqueuer(seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(url, options="-c search_path=heartq") as conn:
            while not stop.is_set():
                keys = [rng.randrange(5) for _ in range(rng.randint(1, 30))]
                priority = rng.choice((0, 0, 1, 2))
                queue = rng.choice(STRESSED)
                tags: list[float] = []  # of the jobs committed
                try:
                    with conn.transaction() as tx:
                        ids = app.enqueue_many(
                            "keyed", [{"key": k} for k in keys], queue=queue,
                            priority=priority, connection=conn,
                        )  # fmt: skip
                        given = [r[0] for r in conn.execute(MINE).fetchall()]
                        time.sleep(rng.choice((0, 0, 0, 0.05, 0.3)))
                        if rng.random() < 0.1:
                            rolled[0] += len(ids)
                            raise psycopg.Rollback(tx)
                        enqueued.extend(ids)
                        tags = given
                    row = conn.execute(MARKS_NOW, (queue, priority)).fetchone()  # behind Q: late
                    conn.commit()
                    late[0] += sum(tag < row[0] for tag in tags) if row else 0
                except psycopg.Error as exc:
                    errors.append(f"enqueue: {exc}")

    def claimer(seed: int) -> None:
        rng = random.Random(seed)
        with connect(server) as conn:
            while not stop.is_set():
                one = dict(params, limit=rng.randint(1, 20))
                try:
                    if rng.random() < 0.05:
                        with conn.transaction() as tx:
                            conn.execute(STATEMENTS["one walk"], one).fetchall()
                            raise psycopg.Rollback(tx)
                    else:
                        rows = conn.execute(STATEMENTS["one walk"], one).fetchall()
                        claimed.extend(str(r[0]) for r in rows if r[0] is not None)
                except psycopg.Error as exc:
                    errors.append(f"claim: {exc}")

    def holder() -> None:
        with psycopg.connect(url) as conn:
            while not stop.is_set():
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    conn.execute("SELECT txid_current()")
                    stop.wait(1.0)
                stop.wait(0.2)

    threads = [threading.Thread(target=enqueuer, args=(n,)) for n in range(2)]
    threads += [threading.Thread(target=claimer, args=(10 + n,)) for n in range(3)]
    threads.append(threading.Thread(target=holder))
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    with connect(server) as conn:
        empty = 0
        while empty < 5:
            rows = conn.execute(STATEMENTS["one walk"], dict(params, limit=50)).fetchall()
            took = [str(r[0]) for r in rows if r[0] is not None]
            claimed.extend(took)
            empty = 0 if took else empty + 1
        row = conn.execute(
            "SELECT count(*) FROM ready WHERE queue = ANY(%s)", (list(STRESSED),)
        ).fetchone()
        left = row[0] if row else -1
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE cardinality(pending) > 0) FROM tier_marks"
        ).fetchone()
        marks, pending = row if row else (0, 0)
        time.sleep(1.0)  # the statistics of the sessions just closed reach the collector
        row = conn.execute(
            "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'ready'"
        ).fetchone()
        retagged = (row[0] if row else 0) - len(enqueued) - rolled[0]
        row = conn.execute(
            "SELECT coalesce(max(n), 0), count(*) FILTER (WHERE n > 1) FROM"
            " (SELECT count(*) - 1 AS n FROM entries_made GROUP BY job_id) AS e"
        ).fetchone()
        most, again = row if row else (-1, -1)
    app.close()
    twice = len(claimed) - len(set(claimed))
    lost = set(enqueued) - set(claimed)
    print(f"stress {seconds:.0f} s: enqueued {len(enqueued)} (about {late[0]} late: tagged"
          f" behind the service position at their commit), claimed {len(claimed)} in marks"
          f" {marks} ({pending} with transactions pending), about {retagged} entries"
          f" re-tagged ({again} jobs more than once, one {most} times); claimed twice {twice},"
          f" lost"
          f" {len(lost)}, entries left {left}, errors {len(errors)}")  # fmt: skip
    for error in errors[:5]:
        print("  ", error.splitlines()[0])
    if twice or lost or left or errors:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--stress", type=float, metavar="SECONDS")
    parser.add_argument("--enqueue", action="store_true")
    args = parser.parse_args()
    if args.enqueue:
        try:
            enqueue_cost(args.server, args.rounds * 5)
        finally:
            with psycopg.connect(args.server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        return
    if args.stress:
        try:
            stress(args.server, args.stress)
        finally:
            with psycopg.connect(args.server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        return
    if 50 * args.rounds * 3 > args.jobs:
        parser.error("--jobs must hold 150 claims of 50 for each --rounds of the three phases")
    setup(args.server, args.jobs)
    try:
        with connect(args.server) as conn:
            phase(conn, "fresh", args.rounds)
            conn.execute(PASS_ALL)
            phase(conn, "passed", args.rounds)
            with connect(args.server) as holder:
                holder.autocommit = False
                holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                holder.execute("SELECT txid_current()")  # an id and a snapshot, held
                phase(conn, "held", args.rounds)
    finally:
        with psycopg.connect(args.server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


if __name__ == "__main__":
    main()
