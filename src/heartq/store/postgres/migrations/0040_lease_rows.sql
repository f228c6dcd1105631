-- heartq schema v40 (PostgreSQL): a running attempt on a narrow row of its own
-- (`leases`), the ready log in a table of its own (`ready`): stage 1 of
-- docs/design-notes/hot-path.md, "The build, in stages".
--
-- A job of the ready log (enqueued runnable, without a concurrency or a rate key) was
-- written three times: its enqueue, its claim (`status = 'running'`, its worker, its
-- execution id: a new version of the 52-column row and an entry in each of its indexes)
-- and its end. Now its claim deletes its entry of `ready` and inserts its lease, and
-- leaves its document (`job_documents`) as the enqueue wrote it: still `queued`, its
-- `ready_xid` set. A running job is one with a lease; `jobs` (the view every reader
-- reads) says `running` there, with the lease's execution id, worker, attempts, start,
-- floor, last sign of life and detachment. The other claims (due jobs through
-- `jobs_claim_idx`, keyed and rated ones) still mark their documents `running`, so that
-- they leave their claim indexes, and insert the lease too: every running attempt has
-- one, and every fenced write locks it. The end deletes the lease and writes the
-- attempt's record on the document, once.
--
-- Running attempts get their leases, the ready log's queued jobs their entries (their
-- documents keep `ready_xid`), in the migration's transaction: writes to
-- `job_documents` wait for it (a million queued jobs of the ready log and a million
-- others: 2.97 s, 260 MB of WAL; docs/BENCHMARKS.md, "Upgrading a million jobs"). Stop
-- every worker of the version before first: its claim marks documents running without
-- a lease, which no reclaimer of this version would find.
CREATE TABLE leases (
    job_id text COLLATE "C" PRIMARY KEY,
    execution_id bigint NOT NULL,
    worker_id text,
    attempts integer NOT NULL,
    started_at timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    detached_until timestamptz,
    claimed_ahead boolean NOT NULL DEFAULT false
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
-- A worker's attempts (the reclaim of a gone worker, the sweep, the registry's counts),
-- and the detached ones past their deadline: what `jobs_worker_idx` and
-- `jobs_detached_idx` were on the documents.
CREATE INDEX leases_worker_idx ON leases (worker_id);
CREATE INDEX leases_detached_idx ON leases (detached_until) WHERE detached_until IS NOT NULL;

INSERT INTO leases (job_id, execution_id, worker_id, attempts, started_at, lease_expires_at,
                    heartbeat_at, detached_until, claimed_ahead)
SELECT id, execution_id, worker_id, attempts, coalesce(started_at, now()),
       coalesce(lease_expires_at, now()), coalesce(heartbeat_at, started_at, now()),
       detached_until, claimed_ahead
FROM job_documents WHERE status = 'running';

-- The ready log's entries, one per queued job of the log, in its lane's order (queue,
-- priority, fairness key: '' for none; then the enqueuing transaction and the id), with
-- what a claim orders and weighs by. Inserted by the enqueue, deleted by the claim that
-- takes it, or by a writer that changes its queued job (a cancel, a re-route).
CREATE TABLE ready (
    queue text NOT NULL,
    priority integer NOT NULL,
    fair_key text COLLATE "C" NOT NULL,
    ready_xid xid8 NOT NULL,
    job_id text COLLATE "C" NOT NULL,
    run_at timestamptz NOT NULL,
    fair_weight float8,
    PRIMARY KEY (queue, priority, fair_key, ready_xid, job_id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

INSERT INTO ready (queue, priority, fair_key, ready_xid, job_id, run_at, fair_weight)
SELECT queue, priority, coalesce(fair_key, ''), ready_xid, id, run_at, fair_weight
FROM job_documents WHERE status = 'queued' AND ready_xid IS NOT NULL;

DROP INDEX IF EXISTS jobs_ready_idx;
DROP INDEX IF EXISTS jobs_worker_idx;
DROP INDEX IF EXISTS jobs_detached_idx;

-- What every reader reads: the document, and where a lease is, the running attempt.
-- Its columns are v39's, in their order (CREATE OR REPLACE keeps the grants).
CREATE OR REPLACE VIEW jobs AS
SELECT d.id, d.task, d.queue, d.args, d.priority,
       CASE WHEN l.job_id IS NULL THEN d.status ELSE 'running' END AS status,
       d.run_at,
       CASE WHEN l.job_id IS NULL THEN d.attempts ELSE l.attempts END AS attempts,
       d.max_retries, d.retry_backoff, d.retry_backoff_max,
       CASE WHEN l.job_id IS NULL THEN d.worker_id ELSE l.worker_id END AS worker_id,
       CASE WHEN l.job_id IS NULL THEN d.execution_id ELSE l.execution_id END
           AS execution_id,
       CASE WHEN l.job_id IS NULL THEN d.lease_expires_at ELSE l.lease_expires_at END
           AS lease_expires_at,
       CASE WHEN l.job_id IS NULL THEN d.heartbeat_at ELSE l.heartbeat_at END
           AS heartbeat_at,
       d.progress_value, d.progress_stage, d.progress_message, d.checkpoint, d.result,
       d.error, d.dead_reason, d.cancel_requested, d.created_at,
       CASE WHEN l.job_id IS NULL THEN d.started_at ELSE l.started_at END AS started_at,
       d.finished_at, d.updated_at, d.chosen, d.awaited, d.cancelled_by, d.result_pending,
       d.unique_key, d.schedule, d.concurrency_key, d.concurrency_limit, d.meta,
       d.has_dependents, d.waiting_for, d.on_dependency_failure, d.dependency_results,
       d.rate_key, d.rate_limit, d.rate_period,
       CASE WHEN l.job_id IS NULL THEN d.claimed_ahead ELSE l.claimed_ahead END
           AS claimed_ahead,
       d.holders,
       CASE WHEN l.job_id IS NULL THEN d.detached_until ELSE l.detached_until END
           AS detached_until,
       d.ready_xid, d.result_lost, d.snoozes, d.expires_at, d.fair_key, d.fair_weight
FROM job_documents AS d LEFT JOIN leases AS l ON l.job_id = d.id;

-- The running attempts are the leases (v24's view read the running documents).
CREATE OR REPLACE VIEW executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM ended_executions
UNION ALL
SELECT l.job_id, l.execution_id, l.worker_id, l.started_at, NULL::timestamptz, NULL::text,
       NULL::text, NULL::json, d.rate_key
FROM leases AS l JOIN job_documents AS d ON d.id = l.job_id
UNION ALL
SELECT j.id, j.execution_id, j.worker_id, j.started_at, j.finished_at, 'succeeded'::text,
       NULL::text, NULL::json, j.rate_key
FROM job_documents AS j
WHERE j.status = 'succeeded' AND NOT EXISTS (
    SELECT 1 FROM ended_executions AS e
    WHERE e.job_id = j.id AND e.execution_id = j.execution_id);
