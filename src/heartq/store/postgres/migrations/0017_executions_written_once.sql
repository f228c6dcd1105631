-- heartq schema v17 (PostgreSQL): each execution row is written once, when its attempt ends.
--
-- The running attempt already lives on its job's row (worker_id, execution_id,
-- started_at, rate_key): the claim no longer inserts an execution row that every end then
-- updates. The rows of attempts that ended move to `ended_executions`, inserted complete
-- by the statement that ends the attempt (FINISH, RELEASE; every reclaim goes through
-- FINISH), and `executions` becomes a view of those rows plus one open row per running
-- job, made from the job row: every reader (a job's attempts, the rate limits' starts,
-- an operator's own SQL) reads what it read before. A job costs one row version and one
-- primary-key entry fewer.
--
-- The open rows of attempts running now are dropped: the view makes them from the job
-- rows, and the end of the attempt inserts its row.
ALTER TABLE executions RENAME TO ended_executions;
DELETE FROM ended_executions AS e USING jobs AS j
WHERE e.ended_at IS NULL AND j.id = e.job_id AND j.execution_id = e.execution_id
  AND j.status = 'running';
-- Rows are never updated now: full pages (the 80 % left room for the close's HOT update).
ALTER TABLE ended_executions SET (fillfactor = 100);

-- Which updates of a job can be heap-only (HOT: no new index entry, the old version
-- pruned without a vacuum): not the claim's nor the finish's (they change `status`, in
-- every partial index's predicate), not the heartbeat's (`lease_expires_at` is indexed,
-- for the reaper), but the pulse's and a checkpoint's (progress, checkpoint,
-- heartbeat_at: no index), when the row's page has room. Measured with
-- bench/hot_updates.py (200 jobs reporting progress every 0.5 s): 10.8 % of their
-- updates heap-only at fillfactor 100, 41.9 % at 90, 65.7 % at 80; the price is a heap a
-- quarter larger for the same backlog.
ALTER TABLE jobs SET (fillfactor = 80);

-- The starts of running rate-limited attempts, counted by the claim as the ended ones
-- are by executions_rate_idx: only running jobs with a rate key enter it.
CREATE INDEX IF NOT EXISTS jobs_running_rate_idx ON jobs (rate_key, started_at)
    WHERE status = 'running' AND rate_key IS NOT NULL;

CREATE VIEW executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM ended_executions
UNION ALL
SELECT id, execution_id, worker_id, started_at, NULL::timestamptz, NULL::text, NULL::text,
       NULL::json, rate_key
FROM jobs WHERE status = 'running';
