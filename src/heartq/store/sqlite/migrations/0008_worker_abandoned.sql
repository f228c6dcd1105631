-- heartq schema v8 (SQLite): how many attempts' code each worker has abandoned.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
--
-- `abandoned`: attempts whose end the worker decided (timed out, cancelled after its
-- grace, lease lost) while their code still runs: a thread cannot be killed, so it keeps
-- its slot until it returns (docs/design/leases.md, "Choosing a pool"). Written by each
-- heartbeat (the worker row's update it already makes), shown by `heartq workers`.
-- 0 for workers of older versions, which do not report it.
ALTER TABLE heartq_workers ADD COLUMN abandoned INTEGER NOT NULL DEFAULT 0;
