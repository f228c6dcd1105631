-- heartq schema v28 (PostgreSQL): the index of running jobs by worker holds the running
-- jobs of a named worker, and only a statement that names a worker can walk it
-- (docs/design/claim.md, "Plans that cannot turn").
--
-- Every running job has its worker, so the index holds the same entries as before. But
-- its predicate was `status = 'running'` alone, which every read of running jobs
-- implies: the count of a concurrency key's running jobs (the keyed claim) walked it
-- whole, filtering each entry's row by key, instead of probing `jobs_key_running_idx`,
-- whenever the statistics said that few jobs ran (taken while nothing ran): at every
-- claim of keyed jobs, each key cost a read of every running job. With `worker_id IS NOT
-- NULL` in the predicate, only a statement that names a worker (`worker_id = ...`,
-- which implies it) can use it; what names none cannot.
--
-- Built beside the old one, then put in its place: the running jobs only, a small index
-- built in the migration's transaction.
CREATE INDEX IF NOT EXISTS jobs_named_worker_idx ON jobs (worker_id)
    WHERE status = 'running' AND worker_id IS NOT NULL;
DROP INDEX IF EXISTS jobs_worker_idx;
ALTER INDEX jobs_named_worker_idx RENAME TO jobs_worker_idx;
