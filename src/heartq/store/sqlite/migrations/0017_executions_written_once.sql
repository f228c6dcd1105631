-- heartq schema v17 (SQLite): each execution row is written once, when its attempt ends.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
ALTER TABLE heartq_executions RENAME TO heartq_ended_executions;
DELETE FROM heartq_ended_executions
WHERE ended_at IS NULL AND EXISTS (
    SELECT 1 FROM heartq_jobs AS j
    WHERE j.id = heartq_ended_executions.job_id
      AND j.execution_id = heartq_ended_executions.execution_id AND j.status = 'running');
CREATE INDEX heartq_jobs_running_rate_idx ON heartq_jobs (rate_key, started_at)
    WHERE status = 'running' AND rate_key IS NOT NULL;
CREATE VIEW heartq_executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM heartq_ended_executions
UNION ALL
SELECT id, execution_id, worker_id, started_at, NULL, NULL, NULL, NULL, rate_key
FROM heartq_jobs WHERE status = 'running';
