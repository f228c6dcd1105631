-- heartq schema v20 (PostgreSQL): each task's retry rules, declared with it.
--
-- `retry_rules`: a JSON object, `{"schedule", "jitter", "retry_on", "dont_retry_on"}`
-- (`heartq.store.documents.task_doc`): the shape of the task's waits between attempts
-- (exponential, linear or constant; with or without jitter) and the exceptions of its
-- code worth another attempt, by class name. NULL: the defaults (exponential, jittered,
-- every exception retried), and what workers of older versions declared. The worker
-- running a job decides with its own task's rules; a reclaimer (a crash) reads the
-- schedule here, so a crashed attempt waits the same shape of wait.
-- A nullable column without a default: a catalog-only change, no table rewrite.

ALTER TABLE tasks ADD COLUMN IF NOT EXISTS retry_rules json;
