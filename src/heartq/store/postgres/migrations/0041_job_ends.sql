-- heartq schema v41 (PostgreSQL): the success of a job of the ready log is a narrow row
-- of its own (`job_ends`), and the job's document is written once, by its enqueue:
-- stage 2 of docs/design-notes/hot-path.md, "The build, in stages", for the jobs most
-- jobs are.
--
-- Since v40 such a job's claim leaves its document as the enqueue wrote it (`queued`,
-- `ready_xid` set) and puts the running attempt on its lease; its end was the
-- document's one update, a new version of the 52-column row and an entry in each of its
-- indexes, and the old version left as dead space (46 % of the table after a drained
-- burst). Now the finish deletes the lease and appends the end: status, the attempt's
-- record (execution id, worker, attempts, start, last sign of life, claimed ahead), when
-- it ended and the result. The document keeps saying `queued`: a job with an end row has
-- ended, whatever its document says, as a job with a lease is running. `jobs`, the view
-- every reader reads, says so.
--
-- Only a success of a job whose claim left its document alone takes this path, and only
-- where nothing else must see the end on the document: no dependents (the enqueue of a
-- dependent reads its dependencies' status after locking their documents; a finish
-- share-locks the document, so one of the two waits for the other), no unique key (the
-- live-key index reads the document's status), no result still to come (its save
-- writes the document). Every other end writes the document as before.
--
-- Catalog changes only (an empty table, two views replaced): nothing is rewritten. Stop
-- the processes of the version before first: they read a succeeded job's status on its
-- document (docs/UPGRADING.md, "Schema v41").
CREATE TABLE job_ends (
    job_id text COLLATE "C" PRIMARY KEY,
    status text NOT NULL,
    execution_id bigint NOT NULL,
    worker_id text,
    attempts integer NOT NULL,
    started_at timestamptz NOT NULL,
    heartbeat_at timestamptz,
    finished_at timestamptz NOT NULL,
    claimed_ahead boolean NOT NULL,
    result json
) WITH (
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02
);
-- The retention's prune and the per-minute counts read the ends by when they ended.
CREATE INDEX job_ends_finished_idx ON job_ends (finished_at);

-- The documents keep their fillfactor (90, schema v27): the room is for the pulses of
-- jobs that report progress, which still write the document while they run.

-- What every reader reads: the document; where a lease is, the running attempt; where
-- an end row is, the end. v40's columns, in their order.
CREATE OR REPLACE VIEW jobs AS
SELECT d.id, d.task, d.queue, d.args, d.priority,
       CASE WHEN e.job_id IS NOT NULL THEN e.status
            WHEN l.job_id IS NOT NULL THEN 'running' ELSE d.status END AS status,
       d.run_at,
       CASE WHEN e.job_id IS NOT NULL THEN e.attempts
            WHEN l.job_id IS NOT NULL THEN l.attempts ELSE d.attempts END AS attempts,
       d.max_retries, d.retry_backoff, d.retry_backoff_max,
       CASE WHEN e.job_id IS NOT NULL THEN e.worker_id
            WHEN l.job_id IS NOT NULL THEN l.worker_id ELSE d.worker_id END AS worker_id,
       CASE WHEN e.job_id IS NOT NULL THEN e.execution_id
            WHEN l.job_id IS NOT NULL THEN l.execution_id ELSE d.execution_id END
           AS execution_id,
       CASE WHEN e.job_id IS NOT NULL THEN NULL
            WHEN l.job_id IS NOT NULL THEN l.lease_expires_at ELSE d.lease_expires_at END
           AS lease_expires_at,
       CASE WHEN e.job_id IS NOT NULL THEN e.heartbeat_at
            WHEN l.job_id IS NOT NULL THEN l.heartbeat_at ELSE d.heartbeat_at END
           AS heartbeat_at,
       CASE WHEN e.job_id IS NOT NULL AND d.progress_value IS NOT NULL THEN 1.0
            ELSE d.progress_value END AS progress_value,
       d.progress_stage, d.progress_message, d.checkpoint,
       CASE WHEN e.job_id IS NOT NULL THEN e.result ELSE d.result END AS result,
       d.error, d.dead_reason,
       CASE WHEN e.job_id IS NOT NULL THEN false ELSE d.cancel_requested END
           AS cancel_requested,
       d.created_at,
       CASE WHEN e.job_id IS NOT NULL THEN e.started_at
            WHEN l.job_id IS NOT NULL THEN l.started_at ELSE d.started_at END AS started_at,
       CASE WHEN e.job_id IS NOT NULL THEN e.finished_at ELSE d.finished_at END
           AS finished_at,
       CASE WHEN e.job_id IS NOT NULL THEN e.finished_at ELSE d.updated_at END
           AS updated_at,
       d.chosen, d.awaited, d.cancelled_by, d.result_pending,
       d.unique_key, d.schedule, d.concurrency_key, d.concurrency_limit, d.meta,
       d.has_dependents, d.waiting_for, d.on_dependency_failure, d.dependency_results,
       d.rate_key, d.rate_limit, d.rate_period,
       CASE WHEN e.job_id IS NOT NULL THEN e.claimed_ahead
            WHEN l.job_id IS NOT NULL THEN l.claimed_ahead ELSE d.claimed_ahead END
           AS claimed_ahead,
       d.holders,
       CASE WHEN e.job_id IS NOT NULL THEN NULL
            WHEN l.job_id IS NOT NULL THEN l.detached_until ELSE d.detached_until END
           AS detached_until,
       CASE WHEN e.job_id IS NOT NULL THEN NULL ELSE d.ready_xid END AS ready_xid,
       d.result_lost, d.snoozes, d.expires_at, d.fair_key, d.fair_weight
FROM job_documents AS d LEFT JOIN leases AS l ON l.job_id = d.id
LEFT JOIN job_ends AS e ON e.job_id = d.id;

-- An end row is also its attempt's execution record (a success: no error, no crash; a
-- job with a rate key never ends on one), shown unless an execution row of the same
-- attempt is (written by a worker of the version before, or a test's).
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
    WHERE e.job_id = j.id AND e.execution_id = j.execution_id)
UNION ALL
SELECT e.job_id, e.execution_id, e.worker_id, e.started_at, e.finished_at, e.status,
       NULL::text, NULL::json, NULL::text
FROM job_ends AS e
WHERE NOT EXISTS (
    SELECT 1 FROM ended_executions AS x
    WHERE x.job_id = e.job_id AND x.execution_id = e.execution_id);
