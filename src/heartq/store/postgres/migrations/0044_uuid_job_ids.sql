-- heartq schema v44 (PostgreSQL): a job's id is a `uuid` (16 bytes), not 36 characters
-- of text (37 bytes in a heap tuple and in an index entry).
--
-- After a drained burst the id stays in four places a job: the document's heap and key,
-- the end row's heap and key, and the keys of `ready` and `leases`, whose pages a burst
-- leaves behind; as a `uuid` about 160 bytes a finished job fewer (docs/design-notes/
-- hot-path.md, "Stage 3, its next part"). A `uuid` orders by its bytes as the text did by
-- its hex digits, so ids still sort by time and every index keeps its order; statements
-- that lock several jobs still lock them in id order.
--
-- Every id heartq makes is a UUIDv7 and is kept as it was. An id that is not a UUID in
-- lower case with its dashes, or is the nil UUID (the claim's marks' "before every id"),
-- could only be a caller's own (the store's `NewJob.id`) and cannot be kept: the
-- migration refuses, naming one, and changes nothing. A view of the operator's own on
-- `jobs` or `executions` stops it too (PostgreSQL names it); so would a column's own
-- grant on those views, which is not carried over (a table's grant is).
--
-- Every table that holds job ids is rewritten, and each index on them built again, under
-- an ACCESS EXCLUSIVE lock until the migration commits: stop every worker first (docs/
-- UPGRADING.md, "Schema v44"); a statement a running worker's session prepared earlier
-- returns `id` as text, and PostgreSQL refuses to run it again ("cached plan must not
-- change result type"). Measured on a million jobs: docs/BENCHMARKS.md, "Upgrading a
-- million jobs" (bench/upgrade.py). The views `jobs` and `executions` read these columns,
-- so they are dropped and made again from their own definitions, with the privileges
-- they had (as v23 did).

DO $$
DECLARE
    planted text;
BEGIN
    SELECT id INTO planted FROM (
        SELECT id FROM job_documents
        UNION ALL SELECT id FROM pruned_successes
        UNION ALL SELECT depends_on FROM job_dependencies
        UNION ALL SELECT job_id FROM ended_executions
        UNION ALL SELECT last_job_id FROM schedules WHERE last_job_id IS NOT NULL
    ) AS ids(id)
    WHERE id !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
       OR id = '00000000-0000-0000-0000-000000000000'  -- the marks' "before every id"
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job id % is not a uuid heartq can keep (docs/UPGRADING.md, "Schema v44")',
            quote_literal(planted);
    END IF;
END $$;

-- The views' definitions and privileges, kept for the transaction.
SELECT set_config('heartq.' || c.relname || '_view', pg_get_viewdef(c.oid), true),
       set_config('heartq.' || c.relname || '_acl', coalesce(c.relacl::text, ''), true)
FROM pg_class AS c
WHERE c.oid IN ('jobs'::regclass, 'executions'::regclass);

DROP VIEW executions;
DROP VIEW jobs;
-- An index on an expression of the id as text is built again below.
DROP INDEX job_documents_tail_idx;

ALTER TABLE job_documents ALTER COLUMN id TYPE uuid USING id::uuid;
ALTER TABLE leases ALTER COLUMN job_id TYPE uuid USING job_id::uuid;
ALTER TABLE ready ALTER COLUMN job_id TYPE uuid USING job_id::uuid;
ALTER TABLE job_ends ALTER COLUMN job_id TYPE uuid USING job_id::uuid;
ALTER TABLE ended_executions ALTER COLUMN job_id TYPE uuid USING job_id::uuid;
ALTER TABLE job_dependencies
    ALTER COLUMN job_id TYPE uuid USING job_id::uuid,
    ALTER COLUMN depends_on TYPE uuid USING depends_on::uuid;
ALTER TABLE pruned_successes ALTER COLUMN id TYPE uuid USING id::uuid;
ALTER TABLE schedules ALTER COLUMN last_job_id TYPE uuid USING last_job_id::uuid;
-- A mark's "before every id" was the empty text; it is the least uuid.
ALTER TABLE claim_marks
    ALTER COLUMN frontier_id TYPE uuid
        USING coalesce(nullif(frontier_id, ''), '00000000-0000-0000-0000-000000000000')::uuid,
    ALTER COLUMN pending_after TYPE uuid[]
        USING array_replace(pending_after, '', '00000000-0000-0000-0000-000000000000')::uuid[];

-- A shortened id's tail (schema v42): the last 8 characters of the id as printed.
CREATE INDEX job_documents_tail_idx ON job_documents (right(id::text, 8));

DO $$
DECLARE
    view_name text;
    grant_row record;
BEGIN
    FOREACH view_name IN ARRAY ARRAY['jobs', 'executions'] LOOP
        EXECUTE format('CREATE VIEW %I AS %s', view_name,
                       current_setting('heartq.' || view_name || '_view'));
        -- Each grantee's privileges, except the owner's own (the role that migrates).
        FOR grant_row IN
            SELECT a.privilege_type, a.grantee, a.is_grantable
            FROM aclexplode(nullif(current_setting('heartq.' || view_name || '_acl'), '')
                            ::aclitem[]) AS a
            WHERE a.grantee <> (SELECT relowner FROM pg_class
                                WHERE oid = view_name::regclass)
        LOOP
            EXECUTE format('GRANT %s ON %I TO %s%s', grant_row.privilege_type, view_name,
                           CASE WHEN grant_row.grantee = 0 THEN 'PUBLIC'
                                ELSE grant_row.grantee::regrole::text END,
                           CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION'
                                ELSE '' END);
        END LOOP;
    END LOOP;
END $$;

-- A column whose type changes loses its statistics: a queue that holds jobs has them
-- taken again (a new one is left never analyzed, as every migration before leaves it).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM job_documents) THEN
        ANALYZE job_documents, leases, ready, job_ends, ended_executions, job_dependencies,
            pruned_successes, claim_marks;
    END IF;
END $$;
