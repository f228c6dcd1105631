-- heartq schema v27 (PostgreSQL): what a finished job keeps, smaller (issue 43: a third
-- of the storage; docs/BENCHMARKS.md, "Storage a finished job").
--
-- job_tails indexed by the tail alone. A tail lookup (`JOBS_BY_SUFFIX`) probes the tail
-- and checks each row it finds; it never needed the job id in the key. The primary key
-- (tail, job_id) held the job's whole id a second time in every entry, at a random
-- place: 87 bytes a job of index against 44 for the tail alone (100,000 tails inserted
-- in enqueue order). Tails are not unique (two ids may end alike), and nothing relied on
-- the key's uniqueness: a job id is unique in jobs, and the triggers write each job's
-- tail once.
--
-- jobs at fillfactor 90 instead of 80 (migration 0017). Since v25 a heartbeat writes its
-- worker's row, not its attempts', so the room a page keeps serves only the pulses of
-- jobs that report progress or a checkpoint; every finished job pays it. Measured on
-- 20,000 no-op jobs finished and vacuumed: 330 bytes a job of heap, 25.8 % free, at 80;
-- 300 bytes, 18.4 % free, at 90; 286 bytes, 14.3 %, at 100. The price, by
-- bench/hot_updates.py (200 jobs reporting progress every 0.5 s): 48.6 % of their
-- pulses heap-only at 90 against 71.7 % at 80 (12.6 % at 100). Only pages written from
-- now on take it; the rows already stored keep theirs.
--
-- The index is built in the migration's transaction, as every index here: writes to
-- jobs wait while it is built (docs/BENCHMARKS.md "Upgrading a million jobs"). Workers
-- already running keep running across it: none of their statements names the index,
-- and the triggers that write the table are unchanged.
CREATE INDEX IF NOT EXISTS job_tails_tail_idx ON job_tails (tail);
ALTER TABLE job_tails DROP CONSTRAINT IF EXISTS job_tails_pkey;
ALTER TABLE jobs SET (fillfactor = 90);
