-- heartq schema v37 (SQLite): nothing. PostgreSQL's ready log gains a lane per fairness
-- key (see the PostgreSQL migration of the same number); SQLite has no ready log, and its
-- fair shares came with v35.
SELECT 1;
