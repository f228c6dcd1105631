-- heartq schema v10 (SQLite): the parameters each task declares.
-- See the PostgreSQL migration of the same number for what it is for.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
--
-- `parameters`: a JSON array, one `{"name", "kind", "has_default"}` per parameter of the
-- task's function (its `ctx` aside); NULL for tasks declared by workers of older
-- versions: unknown, nothing is checked.
ALTER TABLE heartq_tasks ADD COLUMN parameters TEXT;
