-- The hot path under a held xmin horizon: today's statements against the design of
-- docs/design-notes/hot-path.md, counted in buffers and index entries, not timed.
--
-- On a private cluster (the figures in the note: PostgreSQL 15, autovacuum off so that
-- nothing but this script changes the tables, pg_stat_statements loaded):
--
--   runuser -u postgres -- initdb -D /tmp/hq-exp/data -U postgres -A trust
--   runuser -u postgres -- pg_ctl -D /tmp/hq-exp/data -l /tmp/hq-exp/log -w start -o \
--     "-p 54391 -k /tmp/hq-exp -c fsync=off -c autovacuum=off -c shared_buffers=256MB \
--      -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top \
--      -c max_parallel_workers_per_gather=0 -c jit=off"
--   .venv/bin/python -c "from heartq.store import open_store; \
--     open_store('postgresql://postgres@127.0.0.1:54391/postgres?schema=heartq').migrate()"
--   psql -X -h 127.0.0.1 -p 54391 -U postgres -v scratch=yes -v N=200000 -v M=10000 \
--     -f hot-path-experiment.sql
--
-- Only ever on a scratch cluster of its own: it empties schema `heartq`'s tables, makes
-- schema `hp` and tables in `public`, and switches full_page_writes off for a while
-- (ALTER SYSTEM, reset at the end). It refuses to run without `-v scratch=yes`.
--
-- What it does. Today's shape is heartq's own schema (`heartq`, made by heartq's
-- migrations) and today's statements (src/heartq/store/postgres/queries/, with their
-- parameters written in); the design's shape is schema `hp`, made here. Both get N + 1,000
-- queued no-op jobs of one queue and priority. Then another session (dblink) opens a
-- REPEATABLE READ transaction, takes a transaction id and holds both (the horizon), and
-- N jobs are claimed and finished under it: today's by two bulk updates and an insert
-- that leave what N claims and finishes leave in the indexes (a claim and a finish per job,
-- neither heap-only; under a held horizon no index entry can be marked dead and no page
-- pruned, whatever the batching), the design's by its own claim and finish statements,
-- 50 jobs at a time, each committed (so its marks, leases and ready entries are what
-- they would be). Each hot statement is measured three times: with the horizon held and
-- nothing claimed since (`pinned, 0`), with the horizon held and N jobs claimed and
-- finished since (`pinned, N`), and after the holder went away and a VACUUM
-- (`released`). A measurement runs the statement in a transaction that is rolled back
-- (nothing changes), and counts the shared buffers it touched (pg_stat_statements: hit +
-- read, every statement of it) and the index entries its index scans returned
-- (pg_stat_get_xact_tuples_returned over the schema's indexes, read before the rollback).
-- At the end, bytes per finished job after VACUUM; then, with nothing held, WAL per job
-- of M more jobs (default 10,000) enqueued in calls of 100, then claimed and finished 50
-- at a time by each shape's own statements (a CHECKPOINT before each phase, so that each
-- pays its first touch of a page alike), full-page images off: records only.

\set ON_ERROR_STOP on
\pset pager off
\if :{?scratch}
\else
\echo 'refusing: a scratch cluster only (it empties heartq.jobs); pass -v scratch=yes'
\quit
\endif
\if :{?N}
\else
\set N 200000
\endif
\set B 50
\if :{?M}
\else
\set M 10000
\endif

CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT format('host=127.0.0.1 port=%s user=%s dbname=%s', current_setting('port'),
              current_user, current_database()) AS self_dsn \gset
SELECT dblink_connect('self', :'self_dsn');

DROP TABLE IF EXISTS public.hp_results, public.hp_entries, public.hp_statements;
CREATE TABLE public.hp_results (
    shape text, phase text, statement text, buffers bigint, dirtied bigint,
    index_entries bigint, at timestamptz DEFAULT clock_timestamp()
);
CREATE TABLE public.hp_entries (shape text, phase text, statement text, n bigint);
CREATE TABLE public.hp_statements (shape text, statement text, sql text, ord int);

-- ======================================================================================
-- The design's shape (docs/design-notes/hot-path.md, "The tables"): unpartitioned here.
-- ======================================================================================
DROP SCHEMA IF EXISTS hp CASCADE;
CREATE SCHEMA hp;
-- The job document: today's columns, written at enqueue and once at the end, heap-only:
-- no index names a column the end changes for most jobs (`status` is in none; the live
-- unique key is a column of its own, cleared at the end only for jobs that have one; the
-- dead jobs' index keys on `dead_reason`, set only when a job dies).
CREATE TABLE hp.jobs (LIKE heartq.jobs INCLUDING DEFAULTS) WITH (fillfactor = 80);
ALTER TABLE hp.jobs ADD PRIMARY KEY (id);
ALTER TABLE hp.jobs ADD COLUMN live_unique_key text;
CREATE UNIQUE INDEX hp_jobs_unique_live_idx ON hp.jobs (live_unique_key)
    WHERE live_unique_key IS NOT NULL;
CREATE INDEX hp_jobs_dead_idx ON hp.jobs (queue, created_at) WHERE dead_reason IS NOT NULL;
CREATE TABLE hp.lanes (
    lane smallint PRIMARY KEY, queue text NOT NULL, priority integer NOT NULL,
    band smallint NOT NULL, UNIQUE (queue, priority, band)
);
INSERT INTO hp.lanes VALUES (1, 'default', 0, 1), (2, 'default', 0, 0);
CREATE SEQUENCE hp.ready_seq;
-- The ready log: appended; each entry updated once, heap-only, when a claim consumes it;
-- never deleted (TRUNCATE of partitions).
CREATE TABLE hp.ready (
    lane smallint NOT NULL, enq_xid xid8 NOT NULL, seq bigint NOT NULL,
    job_id text NOT NULL, execution_id bigint NOT NULL,
    consumed boolean NOT NULL DEFAULT false,
    PRIMARY KEY (lane, enq_xid, seq)
) WITH (fillfactor = 70);
CREATE INDEX hp_ready_job_idx ON hp.ready (job_id);
-- The claim marks: appended, one per claim that moved its lane's frontier.
CREATE TABLE hp.claim_marks (
    lane smallint NOT NULL, mark_id bigint GENERATED ALWAYS AS IDENTITY,
    p_xid xid8 NOT NULL, p_seq bigint NOT NULL,
    pending_xid xid8[] NOT NULL DEFAULT '{}', pending_after bigint[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (lane, p_xid, p_seq, mark_id)
);
INSERT INTO hp.claim_marks (lane, p_xid, p_seq) VALUES (1, '0', 0), (2, '0', 0);
-- The open attempts: inserted by the claim, deleted by the end.
CREATE TABLE hp.leases (
    job_id text PRIMARY KEY, execution_id bigint NOT NULL, worker_id text NOT NULL,
    lane smallint NOT NULL, claimed_at timestamptz NOT NULL, started_at timestamptz NOT NULL,
    detached_until timestamptz, progress_value float8, progress_stage text,
    progress_message text
);
CREATE INDEX hp_leases_worker_idx ON hp.leases (worker_id);
CREATE INDEX hp_leases_detached_idx ON hp.leases (detached_until)
    WHERE detached_until IS NOT NULL;
CREATE TABLE hp.workers (LIKE heartq.workers INCLUDING ALL);
ALTER TABLE hp.workers ADD COLUMN lease_expires_at timestamptz;
-- What a worker must hear: attempts taken from it, cancels asked of it (appended).
CREATE TABLE hp.takeovers (
    worker_id text NOT NULL, n bigint GENERATED ALWAYS AS IDENTITY, job_id text NOT NULL,
    execution_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker_id, n)
);
CREATE TABLE hp.cancel_requests (LIKE hp.takeovers INCLUDING ALL);
CREATE TABLE hp.ended_executions (LIKE heartq.ended_executions INCLUDING ALL);
-- Shortened ids' tails, as today (migration 0019): one row per job, by a statement trigger.
CREATE TABLE hp.job_tails (LIKE heartq.job_tails INCLUDING ALL);
CREATE FUNCTION hp.job_tails_insert() RETURNS trigger LANGUAGE plpgsql
SET search_path = hp AS $t$
BEGIN
    INSERT INTO job_tails (tail, job_id) SELECT right(id, 8), id FROM inserted_jobs;
    RETURN NULL;
END
$t$;
CREATE TRIGGER job_tails_insert AFTER INSERT ON hp.jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION hp.job_tails_insert();

-- ======================================================================================
-- The statements
-- ======================================================================================
-- Today's, from src/heartq/store/postgres/queries/ (now = NULL, worker 'w1', lease 90 s,
-- claims of 50; {renewals} and {finishes}: the JSON of the 50 jobs w1 runs).
INSERT INTO public.hp_statements VALUES
('today', 'claim', $q$
WITH picked AS (
    SELECT id FROM heartq.jobs
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL
      AND queue = 'default' AND run_at <= statement_timestamp()
    ORDER BY priority DESC, run_at, id
    LIMIT 50
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE heartq.jobs AS j
    SET status = 'running', worker_id = 'w1', execution_id = j.execution_id + 1,
        attempts = j.attempts + 1,
        lease_expires_at = statement_timestamp() + make_interval(secs => 90::float8),
        heartbeat_at = statement_timestamp(), started_at = statement_timestamp(),
        updated_at = statement_timestamp(), claimed_ahead = false,
        progress_value = NULL, progress_stage = NULL, progress_message = NULL
    FROM picked WHERE j.id = picked.id
    RETURNING j.*
)
SELECT id, task, queue, args::text AS args, attempts, execution_id, max_retries,
       retry_backoff, retry_backoff_max, checkpoint::text AS checkpoint, priority, chosen,
       meta::text AS meta, extract(epoch from lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch from run_at)::float8 AS run_at, dependency_results
FROM claimed
$q$, 1),
('today', 'heartbeat', $q$
WITH touched AS (
    UPDATE heartq.workers SET last_heartbeat_at = now(), status = 'active', stopped_at = NULL,
        contact_since = CASE WHEN last_heartbeat_at < now() - make_interval(secs => stale_after / 2)
        THEN now() ELSE coalesce(contact_since, started_at) END
    WHERE id = 'w1'
), r AS (
    SELECT * FROM json_to_recordset({renewals}::json)
        AS r(id text, eid bigint, hp boolean, pv float8, ps text, pm text)
), locked AS (
    SELECT j.id, j.status
    FROM heartq.jobs AS j JOIN r ON j.id = r.id AND j.execution_id = r.eid
    WHERE j.id = ANY(ARRAY(SELECT id FROM r)) AND j.worker_id = 'w1'
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE heartq.jobs AS j
SET lease_expires_at = now() + make_interval(secs => 90::float8),
    heartbeat_at = now(), updated_at = now(),
    progress_value = CASE WHEN r.hp THEN r.pv ELSE j.progress_value END,
    progress_stage = CASE WHEN r.hp THEN r.ps ELSE j.progress_stage END,
    progress_message = CASE WHEN r.hp THEN r.pm ELSE j.progress_message END
FROM r JOIN locked ON locked.id = r.id
WHERE j.id = r.id AND j.execution_id = r.eid AND locked.status = 'running'
RETURNING j.id, j.execution_id, j.cancel_requested
$q$, 2),
('today', 'finish', $q$
WITH f AS (
    SELECT * FROM json_to_recordset({finishes}::json) AS f(
        id text, eid bigint, status text, outcome text, result text, error text,
        delay float8, keep boolean, dead_reason text, crash text, pending boolean)
), locked AS (
    SELECT j.id, j.status, j.execution_id, j.has_dependents, j.worker_id
    FROM heartq.jobs AS j JOIN f ON j.id = f.id AND j.execution_id = f.eid
    WHERE j.id = ANY(ARRAY(SELECT id FROM f)) AND j.worker_id = 'w1'
    ORDER BY j.id
    FOR UPDATE OF j
), landed AS (
    UPDATE heartq.jobs AS j
    SET status = CASE WHEN f.status = 'queued' AND j.cancel_requested
                      THEN 'cancelled' ELSE f.status END,
        run_at = CASE WHEN (f.status = 'queued' AND NOT j.cancel_requested) AND NOT f.keep
                      THEN now() + make_interval(secs => f.delay) ELSE j.run_at END,
        attempts = CASE WHEN f.outcome IN ('interrupted', 'released')
                        THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        result = f.result::json, error = coalesce(f.error, j.error),
        dead_reason = f.dead_reason,
        progress_value = CASE WHEN f.status = 'succeeded' AND j.progress_value IS NOT NULL
                              THEN 1.0 ELSE j.progress_value END,
        finished_at = CASE WHEN (f.status = 'queued' AND NOT j.cancel_requested)
                           THEN NULL ELSE now() END,
        worker_id = CASE WHEN (f.status = 'queued' AND NOT j.cancel_requested)
                         THEN NULL ELSE j.worker_id END,
        lease_expires_at = CASE WHEN f.pending THEN j.lease_expires_at END,
        result_pending = coalesce(f.pending, false), cancel_requested = false,
        updated_at = now()
    FROM f JOIN locked ON locked.id = f.id
    WHERE j.id = f.id AND j.execution_id = f.eid AND locked.status = 'running'
    RETURNING j.id, j.execution_id, j.status, j.awaited, j.has_dependents,
              locked.worker_id AS ran_on, j.started_at, j.rate_key
), closed AS (
    INSERT INTO heartq.ended_executions (job_id, execution_id, worker_id, started_at,
                                         ended_at, outcome, error, crash, rate_key)
    SELECT landed.id, landed.execution_id, landed.ran_on, landed.started_at, now(),
           f.outcome, f.error, f.crash::json, landed.rate_key
    FROM f JOIN landed ON landed.id = f.id AND landed.execution_id = f.eid
)
SELECT id, execution_id, status, awaited, has_dependents, false AS deferred FROM landed
$q$, 3),
('today', 'reap scan', $q$
SELECT j.id, j.execution_id, j.worker_id, j.task, j.queue, j.attempts, j.max_retries,
       j.retry_backoff, j.retry_backoff_max, j.lease_expires_at, j.heartbeat_at,
       j.cancel_requested, j.claimed_ahead, w.last_heartbeat_at AS worker_heartbeat_at,
       j.started_at, j.args::text AS args, j.meta::text AS meta
FROM heartq.jobs AS j LEFT JOIN heartq.workers AS w ON w.id = j.worker_id
WHERE j.status = 'running' AND j.lease_expires_at < now()
ORDER BY j.lease_expires_at
LIMIT 100
FOR UPDATE OF j SKIP LOCKED
$q$, 4),
('today', 'pulse: cancels', $q$
SELECT id, execution_id FROM heartq.jobs
WHERE worker_id = 'w1' AND status = 'running' AND cancel_requested
$q$, 5),
('today', 'dead worker''s jobs', $q$
SELECT j.id, j.execution_id FROM heartq.jobs AS j
WHERE j.status = 'running' AND j.worker_id = 'w1'
FOR UPDATE OF j SKIP LOCKED
$q$, 6);

-- The design's (hot-path.md, "The statements"): lane 1 is (default, 0, band 1). Its N
-- jobs are claimed by worker w2 (below), so a dead worker's jobs are read for w2, whose
-- leases came and went.
INSERT INTO public.hp_statements VALUES
('design', 'claim', $q$
WITH m AS MATERIALIZED (
    -- the lane's frontier: its furthest mark (entries before it are consumed, but those
    -- of the transactions it lists as pending, after their `after`)
    SELECT p_xid, p_seq, pending_xid, pending_after FROM hp.claim_marks
    WHERE lane = 1 ORDER BY p_xid DESC, p_seq DESC, mark_id DESC LIMIT 1
), s AS MATERIALIZED (
    SELECT pg_current_snapshot() AS snap
), pend AS MATERIALIZED (
    SELECT u.x, u.after FROM m, unnest(m.pending_xid, m.pending_after) AS u(x, after)
), seen AS MATERIALIZED (
    -- what this statement's snapshot sees from the frontier on, in claim order: the
    -- entries of the pending transactions, then the range past the frontier
    (SELECT c.*, true AS was_pending FROM pend CROSS JOIN LATERAL (
         SELECT r.enq_xid, r.seq, r.consumed, r.ctid AS row_id FROM hp.ready AS r
         WHERE r.lane = 1 AND r.enq_xid = pend.x AND r.seq > pend.after
         ORDER BY r.seq LIMIT 60) AS c
     ORDER BY c.enq_xid, c.seq LIMIT 60)
    UNION ALL
    (SELECT c.*, false FROM m CROSS JOIN LATERAL (
         SELECT r.enq_xid, r.seq, r.consumed, r.ctid AS row_id FROM hp.ready AS r
         WHERE r.lane = 1 AND (r.enq_xid, r.seq) > (m.p_xid, m.p_seq)
         ORDER BY r.enq_xid, r.seq LIMIT 60) AS c)
), picked AS MATERIALIZED (
    -- the first 50 of them still unconsumed that no other claim holds
    -- (found by the row ids the scan saw: a row consumed since is re-read, and skipped)
    SELECT r.ctid AS row_id, r.enq_xid, r.seq FROM hp.ready AS r
    WHERE r.ctid = ANY(ARRAY(SELECT row_id FROM seen WHERE NOT consumed)) AND NOT r.consumed
    ORDER BY r.enq_xid, r.seq
    LIMIT 50
    FOR UPDATE OF r SKIP LOCKED
), taken AS (
    UPDATE hp.ready AS r SET consumed = true
    FROM picked AS p WHERE r.ctid = p.row_id
    RETURNING r.job_id, r.execution_id
), leased AS (
    INSERT INTO hp.leases (job_id, execution_id, worker_id, lane, claimed_at, started_at)
    SELECT job_id, execution_id, 'w1', 1, statement_timestamp(), statement_timestamp()
    FROM taken
    RETURNING job_id, execution_id
), blockers AS MATERIALIZED (
    -- entries seen unconsumed that this claim did not take (another claim holds them, or
    -- the limit left them): the frontier stops before the first
    SELECT b.enq_xid, b.seq, b.was_pending FROM seen AS b
    WHERE NOT b.consumed
      AND NOT EXISTS (SELECT 1 FROM picked AS p WHERE p.enq_xid = b.enq_xid AND p.seq = b.seq)
), frontier AS MATERIALIZED (
    SELECT CASE WHEN rb.enq_xid IS NOT NULL THEN coalesce(before.enq_xid, m.p_xid)
                WHEN (SELECT count(*) FROM seen WHERE NOT was_pending) >= 60 THEN last.enq_xid
                ELSE pg_snapshot_xmax(s.snap) END AS p_xid,
           CASE WHEN rb.enq_xid IS NOT NULL THEN coalesce(before.seq, m.p_seq)
                WHEN (SELECT count(*) FROM seen WHERE NOT was_pending) >= 60 THEN last.seq
                ELSE 0 END AS p_seq,
           (SELECT count(*) FROM seen WHERE was_pending) >= 60 AS pending_cut
    FROM m CROSS JOIN s
    LEFT JOIN LATERAL (SELECT b.enq_xid, b.seq FROM blockers AS b WHERE NOT b.was_pending
                       ORDER BY b.enq_xid, b.seq LIMIT 1) AS rb ON true
    LEFT JOIN LATERAL (SELECT v.enq_xid, v.seq FROM seen AS v
                       WHERE NOT v.was_pending AND (v.enq_xid, v.seq) < (rb.enq_xid, rb.seq)
                       ORDER BY v.enq_xid DESC, v.seq DESC LIMIT 1) AS before ON true
    LEFT JOIN LATERAL (SELECT v.enq_xid, v.seq FROM seen AS v WHERE NOT v.was_pending
                       ORDER BY v.enq_xid DESC, v.seq DESC LIMIT 1) AS last ON true
), pending AS MATERIALIZED (
    -- a pending transaction stays while it runs, or while entries of it are left (a
    -- blocker, or the limit cut its entries), `after` being its last entry consumed
    SELECT pend.x,
           coalesce((SELECT max(v.seq) FROM seen AS v
                     WHERE v.was_pending AND v.enq_xid = pend.x
                       AND v.seq < coalesce((SELECT min(b.seq) FROM blockers AS b
                                             WHERE b.was_pending AND b.enq_xid = pend.x),
                                            9223372036854775807)),
                    pend.after) AS after
    FROM pend CROSS JOIN s CROSS JOIN frontier AS f
    WHERE pend.x IN (SELECT pg_snapshot_xip(s.snap))
       OR EXISTS (SELECT 1 FROM blockers AS b WHERE b.was_pending AND b.enq_xid = pend.x)
       OR (f.pending_cut AND pend.x >= (SELECT max(v.enq_xid) FROM seen AS v WHERE v.was_pending))
    UNION ALL
    -- transactions running now below the new frontier: their entries may come later
    SELECT x, 0 FROM s CROSS JOIN frontier AS f CROSS JOIN LATERAL pg_snapshot_xip(s.snap) AS x
    WHERE x < f.p_xid AND x NOT IN (SELECT pend.x FROM pend)
), marked AS (
    INSERT INTO hp.claim_marks (lane, p_xid, p_seq, pending_xid, pending_after)
    SELECT 1, f.p_xid, f.p_seq,
           coalesce((SELECT array_agg(x ORDER BY x) FROM pending), '{}'),
           coalesce((SELECT array_agg(after ORDER BY x) FROM pending), '{}')
    FROM frontier AS f CROSS JOIN m
    WHERE (f.p_xid, f.p_seq) <> (m.p_xid, m.p_seq)
       OR coalesce((SELECT array_agg(x ORDER BY x) FROM pending), '{}') <> m.pending_xid
       OR coalesce((SELECT array_agg(after ORDER BY x) FROM pending), '{}') <> m.pending_after
    RETURNING mark_id
)
SELECT d.id, d.task, d.queue, d.args::text AS args, l.execution_id, d.max_retries,
       d.checkpoint::text AS checkpoint, d.meta::text AS meta,
       (SELECT count(*) FROM marked) AS marks
FROM leased AS l CROSS JOIN LATERAL (
    SELECT * FROM hp.jobs AS d WHERE d.id = l.job_id LIMIT 1) AS d
$q$, 1),
('design', 'heartbeat', $q$
WITH touched AS (
    UPDATE hp.workers SET last_heartbeat_at = now(), status = 'active', stopped_at = NULL,
        lease_expires_at = now() + make_interval(secs => 90::float8)
    WHERE id = 'w1'
    RETURNING id
)
SELECT t.job_id, t.execution_id, (SELECT count(*) FROM touched) AS renewed
FROM hp.takeovers AS t WHERE t.worker_id = 'w1' AND t.n > 0
$q$, 2),
('design', 'finish', $q$
WITH f AS (
    SELECT * FROM json_to_recordset({finishes}::json) AS f(
        id text, eid bigint, status text, outcome text, result text, error text,
        delay float8)
), locked AS (
    SELECT l.job_id FROM hp.leases AS l JOIN f ON l.job_id = f.id AND l.execution_id = f.eid
    WHERE l.job_id = ANY(ARRAY(SELECT id FROM f)) AND l.worker_id = 'w1'
    ORDER BY l.job_id
    FOR UPDATE OF l
), gone AS (
    DELETE FROM hp.leases AS l USING locked WHERE l.job_id = locked.job_id
    RETURNING l.job_id, l.execution_id, l.worker_id, l.lane, l.started_at
), closed AS (
    INSERT INTO hp.ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                     outcome, error)
    SELECT g.job_id, g.execution_id, g.worker_id, g.started_at, now(), f.outcome, f.error
    FROM gone AS g JOIN f ON f.id = g.job_id
), ended AS (
    UPDATE hp.jobs AS d
    SET status = f.status, result = f.result::json, error = coalesce(f.error, d.error),
        attempts = d.attempts + 1, execution_id = g.execution_id, worker_id = g.worker_id,
        started_at = g.started_at, finished_at = now(), updated_at = now()
    FROM gone AS g JOIN f ON f.id = g.job_id
    WHERE d.id = g.job_id AND f.status <> 'queued'
    RETURNING d.id, d.status
), again AS (
    INSERT INTO hp.ready (lane, enq_xid, seq, job_id, execution_id)
    SELECT g.lane, pg_current_xact_id(), nextval('hp.ready_seq'), g.job_id,
           g.execution_id + 1
    FROM gone AS g JOIN f ON f.id = g.job_id
    WHERE f.status = 'queued' AND f.delay <= 0
    RETURNING job_id
)
SELECT id, status FROM ended UNION ALL SELECT job_id, 'queued' FROM again
$q$, 3),
('design', 'reap scan', $q$
SELECT l.job_id, l.execution_id, l.worker_id
FROM hp.workers AS w JOIN hp.leases AS l ON l.worker_id = w.id
WHERE w.status = 'active' AND w.lease_expires_at < now()
  AND l.claimed_at < now() - make_interval(secs => 90::float8)
FOR UPDATE OF l SKIP LOCKED;
SELECT l.job_id, l.execution_id, l.worker_id FROM hp.leases AS l
WHERE l.detached_until < now()
ORDER BY l.detached_until
LIMIT 100
FOR UPDATE OF l SKIP LOCKED
$q$, 4),
('design', 'pulse: cancels', $q$
SELECT c.job_id, c.execution_id FROM hp.cancel_requests AS c
WHERE c.worker_id = 'w1' AND c.n > 0
$q$, 5),
('design', 'dead worker''s jobs', $q$
SELECT l.job_id, l.execution_id FROM hp.leases AS l
WHERE l.worker_id = 'w2'
FOR UPDATE OF l SKIP LOCKED
$q$, 6);

-- This transaction's index entries read so far (its counters, not flushed before it
-- ends), times `sign`, sent out through dblink (the transaction will be rolled back).
CREATE OR REPLACE FUNCTION public.hp_count_entries(
    p_shape text, p_phase text, p_statement text, p_schema text, sign int
) RETURNS text LANGUAGE sql AS $f$
SELECT format(
    $c$SELECT dblink_exec('self', format('INSERT INTO public.hp_entries VALUES (%%L, %%L, %%L, %%s)',
        %L, %L, %L, %s * (SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)
                          FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indrelid
                          WHERE c.relnamespace = %L::regnamespace)))$c$,
    p_shape, p_phase, p_statement, sign, p_schema)
$f$;

-- The commands that measure one shape's statements in one phase, for \gexec: each
-- statement in a transaction rolled back, pg_stat_statements reset before it, the index
-- entries read (this transaction's own counters) sent out through dblink before the
-- rollback.
CREATE OR REPLACE FUNCTION public.hp_measure(p_shape text, p_phase text)
RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    st record;
    schema text := CASE p_shape WHEN 'today' THEN 'heartq' ELSE 'hp' END;
    renewals text;
    finishes text;
    body text;
BEGIN
    IF p_shape = 'today' THEN
        SELECT coalesce(json_agg(json_build_object('id', id, 'eid', execution_id, 'hp', false)), '[]')
          INTO renewals FROM heartq.jobs WHERE status = 'running' AND worker_id = 'w1';
        SELECT coalesce(json_agg(json_build_object('id', id, 'eid', execution_id,
                   'status', 'succeeded', 'outcome', 'succeeded', 'result', 'null',
                   'delay', 0, 'keep', false, 'pending', false)), '[]')
          INTO finishes FROM heartq.jobs WHERE status = 'running' AND worker_id = 'w1';
    ELSE
        renewals := '[]';
        SELECT coalesce(json_agg(json_build_object('id', job_id, 'eid', execution_id,
                   'status', 'succeeded', 'outcome', 'succeeded', 'result', 'null',
                   'delay', 0)), '[]')
          INTO finishes FROM hp.leases WHERE worker_id = 'w1';
    END IF;
    FOR st IN SELECT * FROM public.hp_statements WHERE shape = p_shape ORDER BY ord LOOP
        body := replace(replace(st.sql, '{renewals}', quote_literal(renewals)),
                        '{finishes}', quote_literal(finishes));
        RETURN NEXT 'SELECT pg_stat_statements_reset()';
        RETURN NEXT 'BEGIN';
        RETURN NEXT public.hp_count_entries(p_shape, p_phase, st.statement, schema, -1);
        RETURN NEXT body;
        RETURN NEXT public.hp_count_entries(p_shape, p_phase, st.statement, schema, 1);
        RETURN NEXT 'ROLLBACK';
        RETURN NEXT format(
            $c$INSERT INTO public.hp_results (shape, phase, statement, buffers, dirtied)
               SELECT %L, %L, %L, sum(shared_blks_hit + shared_blks_read), sum(shared_blks_dirtied)
               FROM pg_stat_statements
               WHERE query !~* '^\s*(BEGIN|ROLLBACK|SELECT pg_stat_statements_reset|SELECT dblink_exec)'$c$,
            p_shape, p_phase, st.statement);
    END LOOP;
END
$f$;

-- ======================================================================================
-- The jobs: N + 1,000 queued, in enqueues of 100 (each its own transaction)
-- ======================================================================================
TRUNCATE heartq.jobs, heartq.ended_executions, heartq.job_tails, heartq.workers;
INSERT INTO heartq.workers (id, name, hostname, pid, queues, concurrency, status, started_at,
                            last_heartbeat_at, stale_after)
VALUES ('w1', 'w1', 'h', 1, '["default"]', 50, 'active', now(), now(), 90);
INSERT INTO hp.workers (id, name, hostname, pid, queues, concurrency, status, started_at,
                        last_heartbeat_at, stale_after, lease_expires_at)
VALUES ('w1', 'w1', 'h', 1, '["default"]', 50, 'active', now(), now(), 90, now() + interval '1 day');

CREATE OR REPLACE PROCEDURE public.hp_enqueue(shape text, total int, first int)
LANGUAGE plpgsql AS $p$
DECLARE
    i int := first;
BEGIN
    WHILE i < first + total LOOP
        IF shape = 'today' THEN
            INSERT INTO heartq.jobs (id, task, queue, args, priority, status, run_at,
                                     max_retries, retry_backoff, retry_backoff_max,
                                     created_at, updated_at)
            SELECT format('%s-%s', to_char(i + g, 'FM00000000'), md5((i + g)::text)), 'noop',
                   'default', '{}', 0, 'queued',
                   now() - interval '1 hour' + (i - first + g) * interval '1 ms', 3, 1, 60, now(), now()
            FROM generate_series(1, 100) AS g;
        ELSE
            WITH d AS (
                INSERT INTO hp.jobs (id, task, queue, args, priority, status, run_at,
                                     max_retries, retry_backoff, retry_backoff_max,
                                     created_at, updated_at)
                SELECT format('%s-%s', to_char(i + g, 'FM00000000'), md5((i + g)::text)),
                       'noop', 'default', '{}', 0, 'queued',
                       now() - interval '1 hour' + (i - first + g) * interval '1 ms', 3, 1, 60,
                       now(), now()
                FROM generate_series(1, 100) AS g
                RETURNING id
            )
            INSERT INTO hp.ready (lane, enq_xid, seq, job_id, execution_id)
            SELECT 1, pg_current_xact_id(), nextval('hp.ready_seq'), d.id, 1
            FROM d ORDER BY d.id;
        END IF;
        COMMIT;
        i := i + 100;
    END LOOP;
END
$p$;
CALL public.hp_enqueue('today', :N + 1000, 0);
CALL public.hp_enqueue('design', :N + 1000, 0);
VACUUM ANALYZE heartq.jobs, heartq.job_tails, hp.jobs, hp.job_tails, hp.ready, hp.claim_marks;

-- ======================================================================================
-- The horizon: another session, REPEATABLE READ, a snapshot and a transaction id held
-- ======================================================================================
SELECT dblink_connect('holder', :'self_dsn');
SELECT dblink_exec('holder', 'BEGIN ISOLATION LEVEL REPEATABLE READ');
SELECT * FROM dblink('holder', 'SELECT txid_current(), count(*) FROM heartq.jobs')
    AS t(holder_xid bigint, jobs bigint);

-- 50 jobs running on w1 in each shape, claimed by each shape's own claim.
\o /dev/null
SELECT sql AS claim_today FROM public.hp_statements WHERE shape = 'today' AND statement = 'claim' \gset
:claim_today;
SELECT sql AS claim_design FROM public.hp_statements WHERE shape = 'design' AND statement = 'claim' \gset
:claim_design;
\o
\o /dev/null
SELECT public.hp_measure('today', 'pinned, 0') \gexec
SELECT public.hp_measure('design', 'pinned, 0') \gexec
\o

-- ======================================================================================
-- N jobs claimed and finished under the held horizon
-- ======================================================================================
-- Today's: what N claims (UPDATE to running, never heap-only), their leases expired
-- since, and N finishes (UPDATE to succeeded, an ended execution) leave.
UPDATE heartq.jobs AS j
SET status = 'running', worker_id = 'w1', execution_id = 1, attempts = 1,
    lease_expires_at = now() - interval '20 min' + n.rank * interval '2 ms',
    heartbeat_at = now(), started_at = now(), updated_at = now()
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, run_at, id) AS rank
      FROM heartq.jobs WHERE status = 'queued' ORDER BY priority DESC, run_at, id
      LIMIT :N) AS n
WHERE j.id = n.id;
INSERT INTO heartq.ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                     outcome)
SELECT id, execution_id, worker_id, started_at, now(), 'succeeded' FROM heartq.jobs
WHERE status = 'running' AND lease_expires_at < now();
UPDATE heartq.jobs SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL,
    updated_at = now()
WHERE status = 'running' AND lease_expires_at < now();

-- The design's: its own claim and finish, 50 at a time, each committed; the worker's
-- heartbeat every 40 claims.
CREATE OR REPLACE PROCEDURE public.hp_churn(rounds int)
LANGUAGE plpgsql AS $p$
DECLARE
    claim_sql text;
    finish_sql text;
    beat_sql text;
    finishes text;
BEGIN
    SELECT sql INTO claim_sql FROM public.hp_statements WHERE shape = 'design' AND statement = 'claim';
    SELECT sql INTO finish_sql FROM public.hp_statements WHERE shape = 'design' AND statement = 'finish';
    SELECT sql INTO beat_sql FROM public.hp_statements WHERE shape = 'design' AND statement = 'heartbeat';
    FOR r IN 1..rounds LOOP
        EXECUTE claim_sql;
        COMMIT;
        SELECT coalesce(json_agg(json_build_object('id', job_id, 'eid', execution_id,
                   'status', 'succeeded', 'outcome', 'succeeded', 'result', 'null', 'delay', 0)), '[]')
          INTO finishes FROM hp.leases WHERE worker_id = 'w2';
        EXECUTE replace(finish_sql, '{finishes}', quote_literal(finishes));
        COMMIT;
        IF r % 40 = 0 THEN
            EXECUTE beat_sql;
            COMMIT;
        END IF;
    END LOOP;
END
$p$;
-- The churn claims as worker w2, so that w1's 50 running jobs stay for the measures.
UPDATE public.hp_statements SET sql = replace(sql, '''w1''', '''w2''')
WHERE shape = 'design' AND statement IN ('claim', 'finish', 'heartbeat');
INSERT INTO hp.workers (id, name, hostname, pid, queues, concurrency, status, started_at,
                        last_heartbeat_at, stale_after, lease_expires_at)
VALUES ('w2', 'w2', 'h', 2, '["default"]', 50, 'active', now(), now(), 90, now() + interval '1 day');
SELECT (:N / :B) AS rounds \gset
CALL public.hp_churn(:rounds);
UPDATE public.hp_statements SET sql = replace(sql, '''w2''', '''w1''')
WHERE shape = 'design' AND statement IN ('claim', 'finish', 'heartbeat');

SELECT (SELECT count(*) FROM hp.ended_executions) AS design_finished,
       (SELECT count(*) FROM hp.claim_marks) AS design_marks,
       (SELECT count(*) FROM hp.leases) AS design_open_leases,
       (SELECT count(*) FROM heartq.ended_executions) AS today_finished;
-- Each design job claimed once: no job has two ended executions or two leases.
SELECT count(*) AS claimed_twice FROM (
    SELECT job_id FROM hp.ended_executions GROUP BY job_id HAVING count(*) > 1) AS t;

\o /dev/null
SELECT public.hp_measure('today', 'pinned, N') \gexec
SELECT public.hp_measure('design', 'pinned, N') \gexec
\o
SELECT schemaname, relname, n_dead_tup, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE schemaname IN ('heartq', 'hp') AND n_tup_upd + n_dead_tup > 0 ORDER BY schemaname, relname;

-- ======================================================================================
-- The holder goes away; VACUUM; the same measures
-- ======================================================================================
SELECT dblink_exec('holder', 'ROLLBACK');
SELECT dblink_disconnect('holder');
VACUUM ANALYZE heartq.jobs, heartq.ended_executions, heartq.job_tails, heartq.workers,
    hp.jobs, hp.ready, hp.claim_marks, hp.leases, hp.ended_executions, hp.workers, hp.job_tails;
\o /dev/null
SELECT public.hp_measure('today', 'released') \gexec
SELECT public.hp_measure('design', 'released') \gexec
\o

-- ======================================================================================
-- The figures
-- ======================================================================================
UPDATE public.hp_results AS r SET index_entries = e.n
FROM (SELECT shape, phase, statement, sum(n) AS n FROM public.hp_entries
      GROUP BY shape, phase, statement) AS e
WHERE (e.shape, e.phase, e.statement) = (r.shape, r.phase, r.statement);
\echo 'buffers touched (index entries returned), per statement'
SELECT r.statement,
       max(format('%s (%s)', r.buffers, r.index_entries)) FILTER (WHERE r.shape = 'today' AND r.phase = 'pinned, 0') AS "today: pinned, 0",
       max(format('%s (%s)', r.buffers, r.index_entries)) FILTER (WHERE r.shape = 'today' AND r.phase = 'pinned, N') AS "today: pinned, N",
       max(format('%s (%s)', r.buffers, r.index_entries)) FILTER (WHERE r.shape = 'today' AND r.phase = 'released') AS "today: released",
       max(format('%s (%s)', r.buffers, r.index_entries)) FILTER (WHERE r.shape = 'design' AND r.phase = 'pinned, 0') AS "design: pinned, 0",
       max(format('%s (%s)', r.buffers, r.index_entries)) FILTER (WHERE r.shape = 'design' AND r.phase = 'pinned, N') AS "design: pinned, N",
       max(format('%s (%s)', r.buffers, r.index_entries)) FILTER (WHERE r.shape = 'design' AND r.phase = 'released') AS "design: released"
FROM public.hp_results AS r JOIN public.hp_statements AS s
  ON (s.shape = r.shape AND s.statement = r.statement)
GROUP BY r.statement ORDER BY min(s.ord);

\echo 'bytes per finished job after VACUUM (heap, indexes, TOAST)'
SELECT 'today' AS shape,
       (SELECT count(*) FROM heartq.ended_executions) AS finished,
       pg_total_relation_size('heartq.jobs') / (SELECT count(*) FROM heartq.jobs) AS jobs_per_job,
       pg_total_relation_size('heartq.ended_executions') / (SELECT count(*) FROM heartq.ended_executions) AS ended_per_job,
       pg_total_relation_size('heartq.job_tails') / (SELECT count(*) FROM heartq.jobs) AS tails_per_job,
       NULL::bigint AS ready_and_marks_per_job
UNION ALL
SELECT 'design',
       (SELECT count(*) FROM hp.ended_executions),
       pg_total_relation_size('hp.jobs') / (SELECT count(*) FROM hp.jobs),
       pg_total_relation_size('hp.ended_executions') / (SELECT count(*) FROM hp.ended_executions),
       pg_total_relation_size('hp.job_tails') / (SELECT count(*) FROM hp.jobs),
       (pg_total_relation_size('hp.ready') + pg_total_relation_size('hp.claim_marks'))
           / (SELECT count(*) FROM hp.jobs);

-- ======================================================================================
-- WAL per job, nothing held: M jobs enqueued, then claimed and finished, per shape
-- ======================================================================================
DROP PROCEDURE IF EXISTS public.hp_work;
CREATE OR REPLACE PROCEDURE public.hp_work(p_shape text, jobs int)
LANGUAGE plpgsql AS $p$
DECLARE
    claim_sql text;
    finish_sql text;
    finishes text;
BEGIN
    SELECT replace(sql, '''w1''', '''w3''') INTO claim_sql FROM public.hp_statements
    WHERE shape = p_shape AND statement = 'claim';
    SELECT replace(sql, '''w1''', '''w3''') INTO finish_sql FROM public.hp_statements
    WHERE shape = p_shape AND statement = 'finish';
    FOR r IN 1..(2 * jobs / 50 + 100) LOOP
        EXIT WHEN p_shape = 'today' AND (SELECT count(*) FROM heartq.jobs
                                         WHERE worker_id = 'w3' AND status = 'succeeded') >= jobs;
        EXIT WHEN p_shape = 'design' AND (SELECT count(*) FROM hp.ended_executions
                                          WHERE worker_id = 'w3') >= jobs;
        EXECUTE claim_sql;
        COMMIT;
        IF p_shape = 'today' THEN
            SELECT coalesce(json_agg(json_build_object('id', id, 'eid', execution_id,
                       'status', 'succeeded', 'outcome', 'succeeded', 'result', 'null',
                       'delay', 0, 'keep', false, 'pending', false)), '[]')
              INTO finishes FROM heartq.jobs WHERE status = 'running' AND worker_id = 'w3';
        ELSE
            SELECT coalesce(json_agg(json_build_object('id', job_id, 'eid', execution_id,
                       'status', 'succeeded', 'outcome', 'succeeded', 'result', 'null',
                       'delay', 0)), '[]')
              INTO finishes FROM hp.leases WHERE worker_id = 'w3';
        END IF;
        EXECUTE replace(finish_sql, '{finishes}', quote_literal(finishes));
        COMMIT;
    END LOOP;
END
$p$;
INSERT INTO heartq.workers (id, name, hostname, pid, queues, concurrency, status, started_at,
                            last_heartbeat_at, stale_after)
VALUES ('w3', 'w3', 'h', 3, '["default"]', 50, 'active', now(), now(), 90);
INSERT INTO hp.workers (id, name, hostname, pid, queues, concurrency, status, started_at,
                        last_heartbeat_at, stale_after, lease_expires_at)
VALUES ('w3', 'w3', 'h', 3, '["default"]', 50, 'active', now(), now(), 90,
        now() + interval '90 s');
-- What is left queued of the first jobs is set aside, so that the loops take only new
-- ones (the design's claim passes over their ready entries: a cancel's cost, in its marks).
UPDATE heartq.jobs SET status = 'cancelled', finished_at = now() WHERE status = 'queued';
UPDATE hp.jobs SET status = 'cancelled', finished_at = now()
WHERE status = 'queued' AND id NOT IN (SELECT job_id FROM hp.leases);
VACUUM heartq.jobs, hp.jobs;
DROP TABLE IF EXISTS public.hp_wal;
CREATE TABLE public.hp_wal (shape text, phase text, jobs int, wal_bytes numeric, lsn_from pg_lsn, lsn_to pg_lsn);
-- Records only: no full-page images (this scratch cluster's setting, reset at the end).
ALTER SYSTEM SET full_page_writes = off;
SELECT pg_reload_conf(), pg_sleep(1);  -- the checkpointer applies it on its own time
-- One shape's two phases, for \gexec: a CHECKPOINT, the WAL position before and after.
CREATE OR REPLACE FUNCTION public.hp_wal_commands(p_shape text, jobs int)
RETURNS SETOF text LANGUAGE sql AS $f$
SELECT c FROM (VALUES
    (1, 'CHECKPOINT'),
    (2, format($c$INSERT INTO public.hp_wal VALUES (%L, 'enqueue', %s, NULL,
                  pg_current_wal_lsn(), NULL)$c$, p_shape, jobs)),
    (3, format('CALL public.hp_enqueue(%L, %s, 10000000)', p_shape, jobs)),
    (4, 'CHECKPOINT'),
    (5, format($c$INSERT INTO public.hp_wal VALUES (%L, 'claim + finish', %s, NULL,
                  pg_current_wal_lsn(), NULL)$c$, p_shape, jobs)),
    (6, format('CALL public.hp_work(%L, %s)', p_shape, jobs)),
    (7, format($c$UPDATE public.hp_wal SET lsn_to = pg_current_wal_lsn()
                  WHERE shape = %L AND phase = 'claim + finish'$c$, p_shape))
) AS v(i, c) ORDER BY i
$f$;
SELECT public.hp_wal_commands('today', :M) \gexec
SELECT public.hp_wal_commands('design', :M) \gexec
-- an enqueue phase ends where its CHECKPOINT, then its work phase, began
UPDATE public.hp_wal AS e SET lsn_to = (
    SELECT c.lsn_from FROM public.hp_wal AS c WHERE c.shape = e.shape AND c.phase = 'claim + finish')
WHERE e.phase = 'enqueue';
UPDATE public.hp_wal SET wal_bytes = pg_wal_lsn_diff(lsn_to, lsn_from);
SELECT (SELECT count(*) FROM heartq.jobs WHERE worker_id = 'w3' AND status = 'succeeded') AS today_done,
       (SELECT count(*) FROM hp.ended_executions WHERE worker_id = 'w3') AS design_done;
\echo 'WAL bytes per job, nothing held'
SELECT shape, phase, jobs, round(wal_bytes / jobs) AS wal_bytes_per_job, lsn_from, lsn_to
FROM public.hp_wal ORDER BY shape DESC, phase DESC;
ALTER SYSTEM RESET full_page_writes;
SELECT pg_reload_conf();
