-- heartq schema v42 (PostgreSQL): a shortened job id's tail indexed on the job's
-- document (`right(id, 8)`), in place of the table of tails (`job_tails`, v19).
--
-- v19 took the tails off the jobs table because every row version of a job wrote an
-- entry into every index of it, and a job had three (enqueue, claim, end), each entry at
-- a random place. Since v41 the job most jobs are (a success of the ready log) has one:
-- its claim puts the attempt on a lease row and its end appends an end row, and its
-- document stays as its enqueue wrote it. So the index takes one entry for such a job,
-- where the table took a row and an entry (about 120 bytes a job after a drained burst,
-- and a trigger's insert at every enqueue and its delete at every prune). A job whose
-- document is written again (a delayed job's or a retry's claim, a failure, a job with
-- dependents, keys or a saved result) takes an entry per version, as before v19.
--
-- The index is built in the migration's transaction, as every index here: writes to
-- job_documents wait while it is built (docs/UPGRADING.md, "Schema v42"). A process of
-- the version before that looks up a shortened id reads job_tails, which is gone: stop
-- them first, as for v41.
CREATE INDEX IF NOT EXISTS job_documents_tail_idx ON job_documents (right(id, 8));
DROP TRIGGER IF EXISTS job_tails_insert ON job_documents;
DROP TRIGGER IF EXISTS job_tails_delete ON job_documents;
DROP FUNCTION IF EXISTS job_tails_insert();
DROP FUNCTION IF EXISTS job_tails_delete();
DROP TABLE IF EXISTS job_tails;
