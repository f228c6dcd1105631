-- heartq schema v44 (SQLite): job ids checked, nothing changed. PostgreSQL's migration of
-- the same number keeps a job's id as a `uuid` instead of text; SQLite keeps its text,
-- which sorts and is looked up alike. From this version a store takes only a UUID in
-- lower case with its dashes as a caller's own job id and answers any other text as
-- naming no job, so a queue holding such an id (only a caller of the store's own
-- `NewJob.id` could plant one; the nil UUID is refused too, as on PostgreSQL, where it
-- is the claim's "before every id") is refused, as PostgreSQL's is, and nothing
-- changes. SQLite's RAISE takes no value, so the message says where the ids are.
CREATE TEMP TABLE heartq_v44_planted (id TEXT);

CREATE TEMP TRIGGER heartq_v44_refuse BEFORE INSERT ON heartq_v44_planted
BEGIN
    SELECT RAISE(ABORT, 'a job id is not a uuid in lower case with its dashes (heartq_jobs.id, heartq_job_dependencies.depends_on or heartq_pruned_successes.id; docs/UPGRADING.md, "Schema v44")');
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
           AND length(replace(id, '-', '')) = 32
           AND id <> '00000000-0000-0000-0000-000000000000')
LIMIT 1;

DROP TRIGGER heartq_v44_refuse;
DROP TABLE heartq_v44_planted;
