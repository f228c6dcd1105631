-- heartq schema v39 (PostgreSQL): the jobs table is renamed `job_documents`, and `jobs`
-- becomes a view of it, the first step of the narrow lease row
-- (docs/design-notes/hot-path.md, "The build, in stages", stage 1). The statements that
-- write a job or lock it name `job_documents`; the readers read `jobs`. Today the view
-- is the table under another name (PostgreSQL expands it into every plan, so each plan
-- is the table's, and it is updatable: workers of the version before keep writing
-- through it). Stage 1's next version makes it show the running attempt from its lease
-- row, and every reader stays right without a change.
--
-- A catalog change only: the rename and the view take the table's lock for an instant
-- (writers of the version before wait for it), nothing is rewritten. The indexes, the
-- triggers, the `executions` view and the privileges granted on the table follow it
-- under its new name; the view gets the same privileges, so a role that read `jobs`
-- still does. A column added to `job_documents` later must be added to the view too
-- (`SELECT *` is expanded when the view is made).
ALTER TABLE jobs RENAME TO job_documents;
CREATE OR REPLACE VIEW jobs AS SELECT * FROM job_documents;

-- Each grantee's privileges on the table, granted on the view by the role that migrates
-- (its owner): all but the owner's own, which it has already.
DO $$
DECLARE
    grant_row record;
BEGIN
    FOR grant_row IN
        SELECT a.privilege_type, a.grantee, a.is_grantable
        FROM pg_class AS c CROSS JOIN LATERAL aclexplode(c.relacl) AS a
        WHERE c.oid = 'job_documents'::regclass
          AND a.grantee <> (SELECT relowner FROM pg_class WHERE oid = 'jobs'::regclass)
    LOOP
        EXECUTE format('GRANT %s ON jobs TO %s%s', grant_row.privilege_type,
                       CASE WHEN grant_row.grantee = 0 THEN 'PUBLIC'
                            ELSE grant_row.grantee::regrole::text END,
                       CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION'
                            ELSE '' END);
    END LOOP;
END
$$;
