-- heartq schema v23 (PostgreSQL): job ids compared byte by byte (`COLLATE "C"`).
--
-- Every column that holds a job id took the database's collation, `C.UTF-8` or a
-- language's, whose comparisons go through the C library's collation routines: counted
-- with callgrind, about 26 k server instructions a job (issue 44) in the primary-key
-- probes, the claim indexes' last key and the joins of the claim and the finish. Under
-- "C" a comparison is a memcmp (and a sort's abbreviated keys are exact), and an index
-- range of ids is exact without the `left(id, n)` recheck a language collation needs.
--
-- Orders stay what the code relies on. Statements that lock several jobs lock them in
-- id order (`ORDER BY j.id FOR UPDATE`: FINISH, RELEASE, the heartbeat, the pulse,
-- LOCK_DEPENDENCIES, SHIFT_HOLDERS, CLAIM_IDS), all by the same column and so by the
-- same order, so racing statements still wait for each other instead of deadlocking.
-- And byte order of UTF-8 is code-point order: the order Python's `sorted` gives ids
-- (store/records.py sorts the claimed jobs as the claim's ORDER BY priority DESC,
-- run_at, id does) and SQLite's BINARY collation, which its ids always had. Job ids
-- are UUIDv7 (ASCII hex) or a caller's own text: a language collation sorted a
-- caller's ids with capitals, accents or punctuation by its own rules; "C" sorts them
-- as SQLite and Python do.
--
-- No table is rewritten: the type stays `text`, only the collation changes, so each
-- `ALTER COLUMN ... TYPE` is a catalog change plus a rebuild of every index that
-- includes the column (jobs_pkey and the three claim indexes, executions_pkey,
-- job_dependencies' two, job_tails_pkey, pruned_successes_pkey), under an ACCESS
-- EXCLUSIVE lock on each table until the migration commits. The view `executions` reads
-- `ended_executions.job_id` and `jobs.id`, so it is dropped and made again as v17 made
-- it (a view cannot keep a column whose collation changes), and given back the
-- privileges it had (a read-only role granted SELECT on it keeps it).
--
-- Every worker must be stopped first (docs/OPERATIONS.md, "Upgrading across schema
-- v23"): a statement a running worker's session prepared earlier returns `id` with the
-- old collation, and PostgreSQL refuses to run it again ("cached plan must not change
-- result type"); meanwhile its heartbeats would wait for the locks. Measured on a
-- million jobs: docs/BENCHMARKS.md, "Upgrading a million jobs" (bench/upgrade.py).

SELECT set_config('heartq.executions_acl', coalesce(relacl::text, ''), true)
FROM pg_class WHERE oid = 'executions'::regclass;

DROP VIEW executions;

ALTER TABLE jobs ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE ended_executions ALTER COLUMN job_id TYPE text COLLATE "C";
ALTER TABLE job_dependencies
    ALTER COLUMN job_id TYPE text COLLATE "C",
    ALTER COLUMN depends_on TYPE text COLLATE "C";
-- A tail is the end of an id, looked up by equality: byte-wise as well.
ALTER TABLE job_tails
    ALTER COLUMN tail TYPE text COLLATE "C",
    ALTER COLUMN job_id TYPE text COLLATE "C";
ALTER TABLE pruned_successes ALTER COLUMN id TYPE text COLLATE "C";
-- In no index: a catalog change only, so that its join with jobs.id is byte-wise too.
ALTER TABLE schedules ALTER COLUMN last_job_id TYPE text COLLATE "C";

-- As v17 made it; its `job_id` is "C" from both sides of the union.
CREATE VIEW executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM ended_executions
UNION ALL
SELECT id, execution_id, worker_id, started_at, NULL::timestamptz, NULL::text, NULL::text,
       NULL::json, rate_key
FROM jobs WHERE status = 'running';

-- The privileges the view had, granted again by the role that migrates (its owner now):
-- each grantee's, except the owner's own, which it has already.
DO $$
DECLARE
    grant_row record;
BEGIN
    FOR grant_row IN
        SELECT a.privilege_type, a.grantee, a.is_grantable
        FROM aclexplode(nullif(current_setting('heartq.executions_acl'), '')::aclitem[]) AS a
        WHERE a.grantee <> (SELECT relowner FROM pg_class
                            WHERE oid = 'executions'::regclass)
    LOOP
        EXECUTE format('GRANT %s ON executions TO %s%s', grant_row.privilege_type,
                       CASE WHEN grant_row.grantee = 0 THEN 'PUBLIC'
                            ELSE grant_row.grantee::regrole::text END,
                       CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION'
                            ELSE '' END);
    END LOOP;
END
$$;
