"""Task declarations (heartq.policy): read, written, and followed by the queued jobs
whose caller did not choose (`REROUTE_JOBS`)."""

from __future__ import annotations

from heartq.store.postgres.queries.common import JOB_ID_ARRAY, T
from heartq.store.postgres.queries.ready_log import entry_of

# Task declarations (heartq.policy). `tasks` is a JSON array of TaskPolicy fields.
TASK_POLICIES = """
SELECT name, queue, priority, max_retries, retry_backoff, retry_backoff_max, timeout,
       heartbeat_timeout, extract(epoch from declared_at)::float8 AS declared_at, declared_by,
       parameters, rate_limit, rate_key, retry_rules::text AS retry_rules,
       uniqueness::text AS uniqueness, expires
FROM tasks WHERE %(all)s OR name = ANY(%(names)s::text[])
ORDER BY name
"""

DECLARE_TASKS = f"""
INSERT INTO tasks AS t (name, queue, priority, max_retries, retry_backoff, retry_backoff_max,
                        timeout, heartbeat_timeout, declared_at, declared_by, parameters,
                        rate_limit, rate_key, retry_rules, uniqueness, expires)
SELECT x.name, x.queue, x.priority, x.max_retries, x.retry_backoff, x.retry_backoff_max,
       x.timeout, x.heartbeat_timeout, {T}, %(worker_id)s, x.parameters, x.rate_limit,
       x.rate_key, x.retry_rules, x.uniqueness, x.expires
FROM json_to_recordset(%(tasks)s::json) AS x(
    name text, queue text, priority integer, max_retries integer, retry_backoff float8,
    retry_backoff_max float8, timeout float8, heartbeat_timeout float8, parameters json,
    rate_limit text, rate_key text, retry_rules json, uniqueness json, expires float8)
ON CONFLICT (name) DO UPDATE SET
    queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_retries = EXCLUDED.max_retries,
    retry_backoff = EXCLUDED.retry_backoff, retry_backoff_max = EXCLUDED.retry_backoff_max,
    timeout = EXCLUDED.timeout, heartbeat_timeout = EXCLUDED.heartbeat_timeout,
    declared_at = EXCLUDED.declared_at, declared_by = EXCLUDED.declared_by,
    parameters = EXCLUDED.parameters, rate_limit = EXCLUDED.rate_limit,
    rate_key = EXCLUDED.rate_key, retry_rules = EXCLUDED.retry_rules,
    uniqueness = EXCLUDED.uniqueness, expires = EXCLUDED.expires
"""

# Queued, waiting and blocked jobs of these tasks take the declaration for every option
# their caller did not choose (`chosen` bits, heartq.policy); rows already in line with
# it are left alone.
_DECLARED_QUEUE = "CASE WHEN j.chosen & %(queue_bit)s = 0 THEN t.queue ELSE j.queue END"

_DECLARED_PRIORITY = "CASE WHEN j.chosen & %(priority_bit)s = 0 THEN t.priority ELSE j.priority END"

_DECLARED_RETRIES = (
    "CASE WHEN j.chosen & %(retries_bit)s = 0 THEN t.max_retries ELSE j.max_retries END"
)

_DECLARED_BACKOFF = (
    "CASE WHEN j.chosen & %(backoff_bit)s = 0 THEN t.retry_backoff ELSE j.retry_backoff END"
)

_DECLARED_BACKOFF_MAX = (
    "CASE WHEN j.chosen & %(backoff_bit)s = 0 THEN t.retry_backoff_max ELSE j.retry_backoff_max END"
)

# A job re-routed leaves the ready log (its entry deleted, `ready_xid` cleared): its
# place there was in its old lane, and may be behind its new lane's frontier; it is a due
# job of its new queue. A job of the log whose entry is gone is running (a claim took it,
# or is taking it: the delete waits for that claim) and is left as it is, as every
# running job is.
_REROUTED = f"""SELECT j.id, j.queue, j.priority, j.fair_key, j.ready_xid
    FROM job_documents AS j JOIN tasks AS t ON j.task = t.name
    WHERE t.name = ANY(%(names)s::text[])
      AND j.status IN ('queued', 'waiting', 'blocked')
      AND (%(all)s OR j.id = ANY(%(ids)s::{JOB_ID_ARRAY}))
      AND (j.queue, j.priority, j.max_retries, j.retry_backoff, j.retry_backoff_max)
          IS DISTINCT FROM ({_DECLARED_QUEUE}, {_DECLARED_PRIORITY}, {_DECLARED_RETRIES},
                            {_DECLARED_BACKOFF}, {_DECLARED_BACKOFF_MAX})"""

REROUTE_JOBS = f"""
WITH target AS MATERIALIZED (
    {_REROUTED}
), moved AS (
    DELETE FROM ready AS r USING target AS x
    WHERE x.ready_xid IS NOT NULL AND {entry_of("r", "x")}
    RETURNING r.job_id
)
UPDATE job_documents AS j
SET queue = {_DECLARED_QUEUE}, priority = {_DECLARED_PRIORITY},
    max_retries = {_DECLARED_RETRIES}, retry_backoff = {_DECLARED_BACKOFF},
    retry_backoff_max = {_DECLARED_BACKOFF_MAX}, ready_xid = NULL, updated_at = {T}
FROM tasks AS t
WHERE j.task = t.name AND j.status IN ('queued', 'waiting', 'blocked')
  AND j.id IN (SELECT id FROM target WHERE ready_xid IS NULL
               UNION ALL SELECT job_id FROM moved)
RETURNING j.id, j.queue
"""
