-- heartq schema v41 (SQLite): nothing to do. PostgreSQL's migration of the same number
-- writes the success of a job of the ready log as a narrow row of its own (`job_ends`),
-- so that the job's wide row is written once, by its enqueue
-- (docs/design-notes/hot-path.md, "The build, in stages"). SQLite keeps no dead row
-- versions, and its one-row store stays as it is.
-- Recorded all the same, so that each number names one change on both backends
-- (docs/UPGRADING.md, "One line of schema numbers").
SELECT 1;
