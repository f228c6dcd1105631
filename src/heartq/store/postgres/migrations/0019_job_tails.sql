-- heartq schema v19 (PostgreSQL): a shortened job id's tail found in a table of its own.
--
-- v12 indexed `right(id, 8)` on jobs itself. A claim and a finish cannot be heap-only
-- updates (status is in the predicates of the partial indexes), so every row version of
-- a job wrote a new entry into every index of jobs: the tail index took three entries
-- per job (enqueue, claim, finish; more for a retry), each at a random place, since the
-- tails are random. Measured on the benchmark machine (2 workers, no-op jobs): without
-- it, 1.07x to 1.17x the jobs/s (docs/BENCHMARKS.md, eighth session).
--
-- job_tails holds each job's tail once, written when the job is inserted and deleted
-- with it, by two statement-level triggers on jobs (one set-based insert or delete per
-- statement, whatever inserted or deleted the rows: every heartq version's statements,
-- an operator's), and never touched by a claim or a finish. A tail lookup is one probe
-- of its primary key, then the job's by its id. Its rows are written in the enqueuing
-- statement's transaction, so a job and its tail are committed together. The trigger
-- functions keep the search path they were made with (this schema), so a statement on
-- jobs from a session whose search path is elsewhere still finds job_tails.
--
-- Built and filled in the migration's transaction, as every index here: writes to jobs
-- wait while the existing jobs' tails are copied.
CREATE TABLE IF NOT EXISTS job_tails (
    tail text NOT NULL,
    job_id text NOT NULL,
    PRIMARY KEY (tail, job_id)
);

INSERT INTO job_tails (tail, job_id)
SELECT right(id, 8), id FROM jobs
ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION job_tails_insert() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO job_tails (tail, job_id) SELECT right(id, 8), id FROM inserted_jobs;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION job_tails_delete() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM job_tails AS t USING deleted_jobs AS d
    WHERE t.tail = right(d.id, 8) AND t.job_id = d.id;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS job_tails_insert ON jobs;
CREATE TRIGGER job_tails_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION job_tails_insert();

DROP TRIGGER IF EXISTS job_tails_delete ON jobs;
CREATE TRIGGER job_tails_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION job_tails_delete();

DROP INDEX IF EXISTS jobs_id_tail_idx;
