-- heartq schema v24 (PostgreSQL): the attempt that succeeds a job is recorded on its job row.
-- A succeeded job's row already holds everything its last attempt's execution row held
-- (execution id, worker, start, end as finished_at; outcome succeeded, no error, no
-- crash), so FINISH no longer inserts that row into ended_executions: per job, one heap
-- row and its primary-key entry fewer (about 200 bytes kept for the retention, 270 of
-- WAL and a fifth of FINISH's work per job in `python -m bench.cost`). Jobs with a rate
-- key still get the row: the rate window counts a key's starts from ended_executions and
-- the running jobs (heartq/store/postgres/queries/common.py, RATE_STARTS).
-- The `executions` view shows the same attempts as before: the ended rows, the running
-- attempts, and a succeeded job's last attempt when it has no ended row (jobs that
-- succeeded before this version have one, and are shown from it, once). CREATE OR
-- REPLACE keeps the view's columns and the privileges granted on it. A catalog change
-- only: nothing is rewritten, and workers of v23 may keep running (their finishes write
-- the row, which the view then shows instead).
CREATE OR REPLACE VIEW executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM ended_executions
UNION ALL
SELECT id, execution_id, worker_id, started_at, NULL::timestamptz, NULL::text, NULL::text,
       NULL::json, rate_key
FROM jobs WHERE status = 'running'
UNION ALL
SELECT j.id, j.execution_id, j.worker_id, j.started_at, j.finished_at, 'succeeded'::text,
       NULL::text, NULL::json, j.rate_key
FROM jobs AS j
WHERE j.status = 'succeeded' AND NOT EXISTS (
    SELECT 1 FROM ended_executions AS e
    WHERE e.job_id = j.id AND e.execution_id = j.execution_id);
