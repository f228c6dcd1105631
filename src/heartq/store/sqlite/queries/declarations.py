"""Task declarations (heartq.policy): read, written, and followed by the queued jobs
whose caller did not choose (`REROUTE_JOBS`)."""

from __future__ import annotations

from heartq.store.sqlite.queries.fair import left_line as _left_line

# Task declarations (heartq.policy). `tasks` is a JSON array of TaskPolicy fields.
TASK_POLICIES = """
SELECT name, queue, priority, max_retries, retry_backoff, retry_backoff_max, timeout,
       heartbeat_timeout, declared_at, declared_by, parameters, rate_limit, rate_key,
       retry_rules, uniqueness, expires
FROM heartq_tasks WHERE :all OR name IN (SELECT value FROM json_each(:names))
ORDER BY name
"""

DECLARE_TASKS = """
INSERT INTO heartq_tasks (name, queue, priority, max_retries, retry_backoff,
                          retry_backoff_max, timeout, heartbeat_timeout, declared_at,
                          declared_by, parameters, rate_limit, rate_key, retry_rules,
                          uniqueness, expires)
SELECT json_extract(x.value, '$.name'), json_extract(x.value, '$.queue'),
       json_extract(x.value, '$.priority'), json_extract(x.value, '$.max_retries'),
       json_extract(x.value, '$.retry_backoff'), json_extract(x.value, '$.retry_backoff_max'),
       json_extract(x.value, '$.timeout'), json_extract(x.value, '$.heartbeat_timeout'),
       :now, :worker_id, json_extract(x.value, '$.parameters'),
       json_extract(x.value, '$.rate_limit'), json_extract(x.value, '$.rate_key'),
       json_extract(x.value, '$.retry_rules'), json_extract(x.value, '$.uniqueness'),
       json_extract(x.value, '$.expires')
FROM json_each(:tasks) AS x WHERE true
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, max_retries = excluded.max_retries,
    retry_backoff = excluded.retry_backoff, retry_backoff_max = excluded.retry_backoff_max,
    timeout = excluded.timeout, heartbeat_timeout = excluded.heartbeat_timeout,
    declared_at = excluded.declared_at, declared_by = excluded.declared_by,
    parameters = excluded.parameters, rate_limit = excluded.rate_limit,
    rate_key = excluded.rate_key, retry_rules = excluded.retry_rules,
    uniqueness = excluded.uniqueness, expires = excluded.expires
"""

# Queued, waiting and blocked jobs of these tasks take the declaration for every option
# their caller did not choose (`chosen` bits, heartq.policy); rows already in line with
# it are left alone.
_DECLARED_QUEUE = "CASE WHEN j.chosen & :queue_bit = 0 THEN t.queue ELSE j.queue END"

_DECLARED_PRIORITY = "CASE WHEN j.chosen & :priority_bit = 0 THEN t.priority ELSE j.priority END"

_DECLARED_RETRIES = (
    "CASE WHEN j.chosen & :retries_bit = 0 THEN t.max_retries ELSE j.max_retries END"
)

_DECLARED_BACKOFF = (
    "CASE WHEN j.chosen & :backoff_bit = 0 THEN t.retry_backoff ELSE j.retry_backoff END"
)

_DECLARED_BACKOFF_MAX = (
    "CASE WHEN j.chosen & :backoff_bit = 0 THEN t.retry_backoff_max ELSE j.retry_backoff_max END"
)

# The jobs a declaration re-routes: its tasks' waiting jobs, all or those named, whose
# queue, priority, retries or backoff it changes.
_REROUTED = f"""t.name IN (SELECT value FROM json_each(:names)) AND j.task = t.name
  AND j.status IN ('queued', 'waiting', 'blocked')
  AND (:all OR j.id IN (SELECT value FROM json_each(:ids)))
  AND (j.queue, j.priority, j.max_retries, j.retry_backoff, j.retry_backoff_max)
      IS NOT ({_DECLARED_QUEUE}, {_DECLARED_PRIORITY}, {_DECLARED_RETRIES},
              {_DECLARED_BACKOFF}, {_DECLARED_BACKOFF_MAX})"""

# A job moved to another queue or priority loses its fair share tag (a place in its old
# tier's line), counted out of its key's line there first (`queries/fair.py`): the next
# claim of its new tier tags it there.
_NEW_TIER = f"(j.queue, j.priority) IS NOT ({_DECLARED_QUEUE}, {_DECLARED_PRIORITY})"
REROUTE_JOBS = (
    _left_line("heartq_jobs AS j, heartq_tasks AS t", f"{_REROUTED} AND {_NEW_TIER}"),
    f"""
UPDATE heartq_jobs AS j
SET queue = {_DECLARED_QUEUE}, priority = {_DECLARED_PRIORITY},
    max_retries = {_DECLARED_RETRIES}, retry_backoff = {_DECLARED_BACKOFF},
    retry_backoff_max = {_DECLARED_BACKOFF_MAX}, updated_at = :now,
    fair_tag = CASE WHEN {_NEW_TIER} THEN NULL ELSE j.fair_tag END
FROM heartq_tasks AS t
WHERE {_REROUTED}
RETURNING id, queue
""",
)
