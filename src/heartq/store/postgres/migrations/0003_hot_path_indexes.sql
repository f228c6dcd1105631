-- heartq schema v3 (PostgreSQL): fewer index writes per job, and autovacuum that keeps up.
--
-- jobs_status_idx (status, queue, created_at) went: it got an entry at every change of
-- a job's row (enqueue, claim, finish: every update of a job changes its status, so none
-- is HOT), and on a table whose statistics lag behind a burst of enqueues (autovacuum
-- analyzes once a minute at most) the planner took it for the claim, read every queued
-- row of the queue and sorted them (12 ms for a claim of 100 with 14,000 queued, where
-- the claim index answers in 0.2 ms). Listing dead jobs, what operators do, keeps an
-- index of its own that only dead jobs enter.
DROP INDEX IF EXISTS jobs_status_idx;
CREATE INDEX IF NOT EXISTS jobs_dead_idx ON jobs (queue, created_at) WHERE status = 'dead';

-- Every job is updated twice (claim, finish): dead row versions pile up at thousands per
-- second. Vacuum the job and execution tables after 1 % of their rows (plus 1,000) have
-- changed instead of 20 %, without the cost delay, so the claim and reap index walks step
-- over few dead entries; analyze as often so plans follow the backlog. Executions are
-- written once and closed once (no indexed column changes): room left on each page lets
-- that close be a HOT update, with no new index entry.
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE executions SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_vacuum_cost_delay = 0
);
