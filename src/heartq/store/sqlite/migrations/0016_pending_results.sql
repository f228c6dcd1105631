-- heartq schema v16 (SQLite): results still to come, found by the reaper.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
CREATE INDEX heartq_jobs_pending_result_idx ON heartq_jobs (lease_expires_at)
    WHERE result_pending;
