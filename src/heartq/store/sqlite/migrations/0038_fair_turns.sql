-- heartq schema v38 (SQLite): nothing. PostgreSQL's claims take fairness keys in rotation
-- (see the PostgreSQL migration of the same number); SQLite's fair shares are unchanged.
SELECT 1;
