"""What a lease holder writes while its attempts run: the heartbeat (its worker's row and
every lease it holds), the start of jobs it claimed ahead, a result saved after
`ctx.transaction()`, a checkpoint, the pulse, and the cancels its pulse reads."""

from __future__ import annotations

from heartq.store.sqlite.queries.fencing import _HELD_BY

# The heartbeat, as the PostgreSQL dialect's (see it for the why), in three statements
# whatever the number of attempts: the named attempts' rows are written where they change
# (`RENEW`), before the worker's row and lease are renewed (`TOUCH_WORKER`), so that what
# it detaches is detached at the effective lease it had before this beat; then the named
# ones are read for the answer (`RENEWED`). Each renewal: {id, eid, hp (has progress), pv,
# ps, pm, dt (to detach)} (store/documents.py).
_PRIOR_LEASE = """max(j.lease_expires_at, coalesce(
        (SELECT w.lease_expires_at FROM heartq_workers AS w WHERE w.id = :worker_id),
        j.lease_expires_at))"""
_PRIOR_BEAT = """max(j.heartbeat_at, coalesce(
        (SELECT w.last_heartbeat_at FROM heartq_workers AS w WHERE w.id = :worker_id),
        j.heartbeat_at))"""

_HAS_ROW = "EXISTS (SELECT 1 FROM heartq_workers AS w WHERE w.id = :worker_id)"
_DT = "json_extract(r.value, '$.dt')"

# A renewal attaches a named attempt found detached (a worker without a row renews its own
# deadline instead) and lands the progress it carries; one to detach (`dt`) is detached,
# once. Nothing else is written.
RENEW = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET detached_until = CASE WHEN {_DT} THEN {_PRIOR_LEASE}
                          WHEN {_HAS_ROW} THEN NULL ELSE :now + :lease END,
    heartbeat_at = CASE WHEN {_DT} THEN {_PRIOR_BEAT}
                        WHEN {_HAS_ROW} THEN j.heartbeat_at ELSE :now END,
    updated_at = :now,
    progress_value = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.pv') ELSE j.progress_value END,
    progress_stage = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.ps') ELSE j.progress_stage END,
    progress_message = CASE WHEN json_extract(r.value, '$.hp')
                            THEN json_extract(r.value, '$.pm') ELSE j.progress_message END
FROM json_each(:renewals) AS r
WHERE j.id = json_extract(r.value, '$.id')
  AND j.execution_id = json_extract(r.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
  AND CASE WHEN {_DT} THEN j.detached_until IS NULL
           ELSE json_extract(r.value, '$.hp') OR j.detached_until IS NOT NULL
                OR NOT {_HAS_ROW} END
"""

# A heartbeat that comes over half the worker's staleness threshold after its previous
# one ends a pause in its contact with the database: its unbroken contact starts again.
TOUCH_WORKER = """
UPDATE heartq_workers SET last_heartbeat_at = :now, status = 'active', stopped_at = NULL,
    contact_since = CASE WHEN last_heartbeat_at < :now - stale_after / 2
                         THEN :now ELSE coalesce(contact_since, started_at) END,
    lease_expires_at = :now + :lease
WHERE id = :worker_id
"""

RENEWED = f"""
SELECT j.id, j.execution_id, j.cancel_requested
FROM json_each(:renewals) AS r
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
  ON j.id = json_extract(r.value, '$.id')
WHERE NOT {_DT}
  AND j.execution_id = json_extract(r.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
"""

HEARTBEAT = (RENEW, TOUCH_WORKER, RENEWED)

# A heartbeat's sweep, just before it, only after a claim of the worker raised (its
# answer may be lost) or its session came back (worker/liveness_events.py): every running
# attempt of it that it names nowhere, once, through the index of running jobs by
# worker, detached at the effective lease it has.
SWEEP = f"""
UPDATE heartq_jobs AS j INDEXED BY heartq_jobs_worker_idx
SET detached_until = {_PRIOR_LEASE}, heartbeat_at = {_PRIOR_BEAT}, updated_at = :now
WHERE j.worker_id = :worker_id AND j.status = 'running' AND j.detached_until IS NULL
  AND j.id NOT IN (SELECT json_extract(r.value, '$.id') FROM json_each(:renewals) AS r)
"""

# `abandoned`: attempts whose end the worker decided while their code still runs (its
# pulse writes the count when it changed).
RECORD_ABANDONED = "UPDATE heartq_workers SET abandoned = :abandoned WHERE id = :worker_id"

# The start of jobs a worker claimed ahead, recorded before their code runs (see the
# PostgreSQL statement of the same name). Each lease: {id, eid}.
START_AHEAD = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET claimed_ahead = 0,
    started_at = :now,
    heartbeat_at = :now,
    lease_expires_at = :now + :lease,
    detached_until = CASE WHEN j.detached_until IS NOT NULL
                          THEN max(j.detached_until, :now + :lease) END,
    updated_at = :now
FROM json_each(:leases) AS s
WHERE j.id = json_extract(s.value, '$.id')
  AND j.execution_id = json_extract(s.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running' AND j.claimed_ahead AND NOT j.cancel_requested
RETURNING id, execution_id
"""

# The result of a job its task already completed inside `ctx.transaction()` (or why it
# has none: `lost`, its code failed after the commit).
SAVE_RESULT = f"""
UPDATE heartq_jobs AS j SET result = :result, result_lost = :lost, result_pending = 0,
                       lease_expires_at = NULL, detached_until = NULL, updated_at = :now
WHERE id = :job_id AND execution_id = :execution_id AND status = 'succeeded'
  AND result_pending AND {_HELD_BY}
RETURNING id, status, awaited
"""

SAVE_CHECKPOINT = f"""
UPDATE heartq_jobs AS j SET checkpoint = :checkpoint, heartbeat_at = :now, updated_at = :now
WHERE id = :job_id AND execution_id = :execution_id AND status = 'running' AND {_HELD_BY}
RETURNING cancel_requested
"""

# The pulse: what running tasks reported (progress, checkpoint) since the last pulse, for
# every attempt of a worker in one statement, fenced like a heartbeat; the lease is not
# renewed (that stays the heartbeat's), but a report is a sign of life: `heartbeat_at`
# moves, so a crash's timing runs to it (heartq/inspect/attempts.py), as does a saved
# checkpoint's. Each report: {id, eid, hp, pv, ps, pm, hc, cp}.
PULSE = f"""
UPDATE heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1
SET progress_value = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.pv') ELSE j.progress_value END,
    progress_stage = CASE WHEN json_extract(r.value, '$.hp')
                          THEN json_extract(r.value, '$.ps') ELSE j.progress_stage END,
    progress_message = CASE WHEN json_extract(r.value, '$.hp')
                            THEN json_extract(r.value, '$.pm') ELSE j.progress_message END,
    checkpoint = CASE WHEN json_extract(r.value, '$.hc')
                      THEN json_extract(r.value, '$.cp') ELSE j.checkpoint END,
    heartbeat_at = :now,
    updated_at = :now
FROM json_each(:reports) AS r
WHERE j.id = json_extract(r.value, '$.id')
  AND j.execution_id = json_extract(r.value, '$.eid') AND {_HELD_BY}
  AND j.status = 'running'
RETURNING id, execution_id, cancel_requested
"""

# Which of the attempts a worker holds had their cancel requested: what its pulse reads
# every tick, SQLite having no notifications. Their jobs are looked up by their own keys,
# fenced on the worker (and, by the caller, on each lease's execution): see the
# PostgreSQL statement of the same name (one model, whose read never walks the worker's
# past jobs). The ids come as a JSON array of strings: a JSON object per lease, read
# with `json_extract`, cost 2 to 20 ms at 2,000 leases on a busy machine, against 0.7 ms.
RUNNING_CANCELS = """
SELECT j.id, j.execution_id
FROM json_each(:ids) AS h
JOIN heartq_jobs AS j INDEXED BY sqlite_autoindex_heartq_jobs_1 ON j.id = h.value
WHERE j.worker_id = :worker_id AND j.status = 'running' AND j.cancel_requested
"""
