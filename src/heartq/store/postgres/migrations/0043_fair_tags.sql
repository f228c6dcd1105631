-- heartq schema v43 (PostgreSQL): nothing to do. SQLite's migration of the same number
-- gives the jobs that take turns their start tags (start-time fair queuing), so its claim
-- reads one index in the order of the turns; PostgreSQL's claim still takes its ready
-- log's lanes in rotation (docs/design/limits.md, "Fair shares").
-- Recorded all the same, so that each number names one change on both backends
-- (docs/UPGRADING.md, "One line of schema numbers").
SELECT 1;
