"""Enqueue: new jobs inserted in one statement whatever the batch, and a job with a
unique key, inserted only if no job holds the key."""

from __future__ import annotations

# One job, bound by value (the store uses it for a batch of one).
INSERT_JOB = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         concurrency_key, concurrency_limit, rate_key, rate_limit,
                         rate_period, fair_key, fair_weight, meta, expires_at)
VALUES (:id, :task, :queue, :args, :priority, 'queued', :now + :delay, :max_retries,
        :retry_backoff, :retry_backoff_max, :chosen, :now, :now, :concurrency_key,
        :concurrency_limit, :rate_key, :rate_limit, :rate_period, :fair_key, :fair_weight,
        :meta, :now + :expires_in)
"""

# Each job: {id, task, queue, args, priority, delay, max_retries, retry_backoff,
# retry_backoff_max, chosen, concurrency_key, concurrency_limit, rate_key, rate_limit,
# rate_period, fair_key, fair_weight, meta, expires_in} (store/documents.py)
INSERT_JOBS = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         concurrency_key, concurrency_limit, rate_key, rate_limit,
                         rate_period, fair_key, fair_weight, meta, expires_at)
SELECT json_extract(x.value, '$.id'), json_extract(x.value, '$.task'),
       json_extract(x.value, '$.queue'), json_extract(x.value, '$.args'),
       json_extract(x.value, '$.priority'), 'queued', :now + json_extract(x.value, '$.delay'),
       json_extract(x.value, '$.max_retries'), json_extract(x.value, '$.retry_backoff'),
       json_extract(x.value, '$.retry_backoff_max'), json_extract(x.value, '$.chosen'),
       :now, :now, json_extract(x.value, '$.concurrency_key'),
       json_extract(x.value, '$.concurrency_limit'), json_extract(x.value, '$.rate_key'),
       json_extract(x.value, '$.rate_limit'), json_extract(x.value, '$.rate_period'),
       json_extract(x.value, '$.fair_key'), json_extract(x.value, '$.fair_weight'),
       json_extract(x.value, '$.meta'), :now + json_extract(x.value, '$.expires_in')
FROM json_each(:jobs) AS x
"""

# An enqueue into a caller's transaction inserts the same way: there is no ready log, so
# no lane to enter first (the PostgreSQL dialect's INSERT_ENTERED_JOBS makes none).
INSERT_ENTERED_JOBS = INSERT_JOBS

# A job with a unique key (store/sql/ `enqueue`), bound by value. SQLite has one writer
# at a time, so nothing can come between the look (a job holding the key: queued or
# running, or finished within `unique_for`) and the insert. The partial unique index is
# the backstop (a replayed dead job): a live duplicate is dropped. The last statement
# answers the job that holds the key: this one, or the one found.
INSERT_UNIQUE_JOB = """
INSERT INTO heartq_jobs (id, task, queue, args, priority, status, run_at, max_retries,
                         retry_backoff, retry_backoff_max, chosen, created_at, updated_at,
                         unique_key, schedule, concurrency_key, concurrency_limit,
                         rate_key, rate_limit, rate_period, fair_key, fair_weight, meta,
                         expires_at)
SELECT :id, :task, :queue, :args, :priority, 'queued', :now + :delay, :max_retries,
       :retry_backoff, :retry_backoff_max, :chosen, :now, :now, :unique_key, :schedule,
       :concurrency_key, :concurrency_limit, :rate_key, :rate_limit, :rate_period,
       :fair_key, :fair_weight, :meta, :now + :expires_in
WHERE NOT EXISTS (
    SELECT 1 FROM heartq_jobs
    WHERE unique_key = :unique_key
      AND (status IN ('queued', 'running') OR finished_at >= :now - :unique_for))
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
DO NOTHING
"""

UNIQUE_HOLDER = """
SELECT id, id = :id AS inserted FROM heartq_jobs
WHERE unique_key = :unique_key
  AND (id = :id OR status IN ('queued', 'running') OR finished_at >= :now - :unique_for)
ORDER BY id = :id DESC, status IN ('queued', 'running') DESC, created_at DESC
LIMIT 1
"""

ENQUEUE_UNIQUE = (INSERT_UNIQUE_JOB, UNIQUE_HOLDER)
