-- heartq schema v10 (PostgreSQL): the parameters each task declares.
--
-- `parameters`: a JSON array, one object per parameter of the task's function (its
-- `ctx` aside), `{"name", "kind", "has_default"}` (`kind`: `positional_or_keyword`,
-- `keyword_only`, `var_keyword`, `var_positional`, `positional_only`), written by each
-- worker's declaration as it starts. An enqueue by name (a program without the task's
-- code, `heartq enqueue`) binds the job's arguments against it, so a misspelled or
-- missing argument is the caller's `TypeError` and nothing is stored. NULL for tasks
-- declared by workers of older versions: unknown, nothing is checked.
-- A nullable column without a default: a catalog-only change, no table rewrite.

ALTER TABLE tasks ADD COLUMN IF NOT EXISTS parameters json;
