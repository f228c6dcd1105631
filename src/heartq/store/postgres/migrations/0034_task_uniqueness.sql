-- heartq schema v34 (PostgreSQL): a task that keys its jobs by their arguments says so
-- in its declaration.
--
-- `uniqueness`: a JSON object, `{"unique_for": seconds | null}`
-- (`heartq.store.documents.task_doc`), for a task declared `unique=True`: each job an
-- enqueue makes of it, by name from a program without its code too, carries the unique
-- key its task and arguments give (`heartq.arguments.unique_args_key`), with the task's
-- window. NULL: the task keys nothing, and what workers of older versions declared.
-- A nullable column without a default: a catalog-only change, no table rewrite.

ALTER TABLE tasks ADD COLUMN IF NOT EXISTS uniqueness json;
