-- heartq schema v44 (SQLite): job ids checked, nothing changed. PostgreSQL's migration of
-- the same number keeps a job's id as a `uuid` instead of text; SQLite keeps its text,
-- which sorts and is looked up alike. From this version a store takes only a UUID in
-- lower case with its dashes as a caller's own job id and answers any other text as
-- naming no job, so a queue holding such an id (only a caller of the store's own
-- `NewJob.id` could plant one) is refused, as PostgreSQL's is, and nothing changes.
-- SQLite's RAISE takes no value, so the message says how to find the ids.
CREATE TEMP TABLE heartq_v44_planted (id TEXT);

CREATE TEMP TRIGGER heartq_v44_refuse BEFORE INSERT ON heartq_v44_planted
BEGIN
    SELECT RAISE(ABORT, 'a job id is not a uuid: SELECT id FROM heartq_jobs WHERE length(id) <> 36 OR id GLOB ''*[^0-9a-f-]*'' lists them (docs/UPGRADING.md, "Schema v44")');
END;

INSERT INTO heartq_v44_planted
SELECT id FROM (
    SELECT id FROM heartq_jobs
    UNION ALL SELECT depends_on FROM heartq_job_dependencies
    UNION ALL SELECT id FROM heartq_pruned_successes
)
WHERE NOT (length(id) = 36 AND id NOT GLOB '*[^0-9a-f-]*'
           AND substr(id, 9, 1) = '-' AND substr(id, 14, 1) = '-'
           AND substr(id, 19, 1) = '-' AND substr(id, 24, 1) = '-'
           AND length(replace(id, '-', '')) = 32)
LIMIT 1;

DROP TRIGGER heartq_v44_refuse;
DROP TABLE heartq_v44_planted;
