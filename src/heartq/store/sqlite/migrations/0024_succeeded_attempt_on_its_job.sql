-- heartq schema v24 (SQLite): the attempt that succeeds a job is recorded on its job row.
-- See the PostgreSQL migration of the same number for what it is for. A job with a rate
-- key keeps its execution row (the rate window counts starts from heartq_ended_executions
-- and the running jobs). The view shows the same attempts as before; a job that succeeded
-- before this version is shown from its execution row, once.
DROP VIEW heartq_executions;
CREATE VIEW heartq_executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM heartq_ended_executions
UNION ALL
SELECT id, execution_id, worker_id, started_at, NULL, NULL, NULL, NULL, rate_key
FROM heartq_jobs WHERE status = 'running'
UNION ALL
SELECT j.id, j.execution_id, j.worker_id, j.started_at, j.finished_at, 'succeeded', NULL, NULL,
       j.rate_key
FROM heartq_jobs AS j
WHERE j.status = 'succeeded' AND NOT EXISTS (
    SELECT 1 FROM heartq_ended_executions AS e
    WHERE e.job_id = j.id AND e.execution_id = j.execution_id);
