"""What a lease holder writes while its attempts run: the heartbeat (its worker's row, the
lease of every attempt it holds attached), the start of jobs it claimed ahead, a result saved after
`ctx.transaction()`, a checkpoint, the pulse, and the cancels its pulse reads."""

from __future__ import annotations

from heartq.store.postgres.queries.batches import LEASE_BATCH, RENEWAL_BATCH, REPORT_BATCH
from heartq.store.postgres.queries.common import JOB_ID_ARRAY, T, _secs
from heartq.store.postgres.queries.fencing import _HELD_BY, _locked, held_by

# A heartbeat that comes over half the worker's staleness threshold after its previous
# one ends a pause in its contact with the database: its unbroken contact starts again.
_CONTACT_SINCE = f"""CASE WHEN last_heartbeat_at < {T} - make_interval(secs => stale_after / 2)
        THEN {T} ELSE coalesce(contact_since, started_at) END"""

# What a renewal or a report carries of its task's progress (`documents`: `hp`, has
# progress; `pv`, `ps`, `pm`), read from the locked rows, and how it lands.
_PROGRESS = ("hp", "pv", "ps", "pm")
_PROGRESS_SET = """\
progress_value = CASE WHEN locked.r_hp THEN locked.r_pv ELSE j.progress_value END,
    progress_stage = CASE WHEN locked.r_hp THEN locked.r_ps ELSE j.progress_stage END,
    progress_message = CASE WHEN locked.r_hp THEN locked.r_pm ELSE j.progress_message END"""

# The heartbeat renews one row, its worker's: the lease of every attempt the worker holds
# attached (docs/design/leases.md, "Leases and heartbeats"). The rows it names are locked in id
# order, as every batch of a worker's rows is, and read for the answer (renewed, lost,
# cancel requested), but written only on a change: an attempt named detached is attached
# again (its task spoke again in time, or its claim detached it), and a renewal that
# carries progress lands it. Under a held xmin horizon the statement meets its worker
# row's versions (one a beat), never one per attempt and beat (docs/BENCHMARKS.md, "The
# heartbeat and the reclaim scan under a held horizon, counted").
# What the worker no longer covers is detached at the effective lease it had before this
# beat (`prior`), written once (`detached_until IS NULL`): the leases it names with `dt`
# (silent tasks, attempts it dropped without a written or refused end). A worker without
# a row renews each named attempt's own deadline instead (a store used directly): no
# worker lease covers it.
_DETACH = """detached_until = greatest(l.lease_expires_at, (SELECT lease_expires_at FROM prior)),
        heartbeat_at = greatest(l.heartbeat_at, (SELECT last_heartbeat_at FROM prior))"""

HEARTBEAT = f"""
WITH prior AS MATERIALIZED (
    SELECT lease_expires_at, last_heartbeat_at FROM workers WHERE id = %(worker_id)s
), touched AS (
    UPDATE workers SET last_heartbeat_at = {T}, status = 'active', stopped_at = NULL,
        contact_since = {_CONTACT_SINCE}, lease_expires_at = {T} + {_secs("lease")}
    WHERE id = %(worker_id)s
    RETURNING id
), {_locked(RENEWAL_BATCH, "r", "l.detached_until", "d.cancel_requested",
              carry=(*_PROGRESS, "dt"))}, renewed AS (
    UPDATE leases AS l
    SET detached_until = CASE WHEN EXISTS (SELECT 1 FROM touched) THEN NULL
                              ELSE {T} + {_secs("lease")} END,
        heartbeat_at = CASE WHEN EXISTS (SELECT 1 FROM touched) THEN l.heartbeat_at
                            ELSE {T} END
    WHERE l.job_id = ANY(ARRAY(
        SELECT id FROM locked
        WHERE NOT r_dt AND (detached_until IS NOT NULL OR NOT EXISTS (SELECT 1 FROM touched))))
), progressed AS (
    UPDATE job_documents AS j
    SET updated_at = {T},
        {_PROGRESS_SET}
    FROM locked
    WHERE j.id = locked.id AND j.id = ANY(ARRAY(SELECT id FROM locked))
      AND NOT locked.r_dt AND locked.r_hp
), detached AS (
    UPDATE leases AS l
    SET {_DETACH}
    WHERE l.job_id = ANY(ARRAY(SELECT id FROM locked WHERE r_dt AND detached_until IS NULL))
)
SELECT id, execution_id, cancel_requested FROM locked
WHERE status = 'running' AND NOT r_dt
"""

# A heartbeat's sweep (store/sql/ `heartbeat`, just before it, only after a claim of the
# worker raised: its answer may be lost, the job running under the worker unknown to it;
# or after its session came back: its server may have lost an end, worker/liveness_events.py):
# every running attempt of the worker that the heartbeat names neither way is detached at
# its effective lease, found through `leases_worker_idx` once (a statement of its own, so
# no beat without a sweep plans that walk; one locked elsewhere is being ended,
# reclaimed or claimed: skipped, and named by the next beat if it is the worker's).
SWEEP = f"""
WITH prior AS MATERIALIZED (
    SELECT lease_expires_at, last_heartbeat_at FROM workers WHERE id = %(worker_id)s
)
UPDATE leases AS l
SET {_DETACH}
WHERE l.job_id = ANY(ARRAY(
    SELECT s.job_id FROM leases AS s
    WHERE s.worker_id = %(worker_id)s AND s.detached_until IS NULL
      AND NOT (s.job_id = ANY({RENEWAL_BATCH.param("id")}))
    FOR UPDATE SKIP LOCKED
))
"""

# `abandoned`: attempts whose end the worker decided while their code still runs (its
# pulse writes the count when it changed).
RECORD_ABANDONED = "UPDATE workers SET abandoned = %(abandoned)s WHERE id = %(worker_id)s"

# The start of jobs a worker claimed ahead (its prefetch buffer), recorded before their
# code runs: from here on a reclaim counts their attempt (docs/design/claim.md, "Claim ahead").
# Fenced like a heartbeat; a job whose cancel was requested is not started (its worker
# releases it, which ends it 'cancelled' without counting an attempt). The start sets
# the attempt's floor (and a detached one's deadline) anew and moves `started_at` to the
# real start. Locked in id order, as every
# batch of a worker's rows is.
START_AHEAD = f"""
WITH {_locked(LEASE_BATCH, "s", "d.cancel_requested", lock_document=True)}
UPDATE leases AS l
SET claimed_ahead = false,
    started_at = {T},
    heartbeat_at = {T},
    lease_expires_at = {T} + {_secs("lease")},
    detached_until = CASE WHEN l.detached_until IS NOT NULL
                          THEN greatest(l.detached_until, {T} + {_secs("lease")}) END
WHERE l.job_id = ANY(ARRAY(SELECT id FROM locked WHERE NOT cancel_requested))
  AND l.claimed_ahead
RETURNING l.job_id AS id, l.execution_id
"""

# The result of a job its task already completed inside `ctx.transaction()` (or why it
# has none: `lost`, its code failed after the commit; the job keeps its worker once it
# succeeded: fenced like the completion).
SAVE_RESULT = f"""
UPDATE job_documents AS j
SET result = %(result)s::json, result_lost = %(lost)s, result_pending = false,
                lease_expires_at = NULL, detached_until = NULL, updated_at = {T}
WHERE id = %(job_id)s AND execution_id = %(execution_id)s AND status = 'succeeded'
  AND result_pending AND {_HELD_BY}
RETURNING id, status, awaited
"""

SAVE_CHECKPOINT = f"""
WITH held AS (
    SELECT l.job_id FROM leases AS l
    WHERE l.job_id = %(job_id)s AND l.execution_id = %(execution_id)s AND {held_by("l")}
    FOR UPDATE
), beat AS (
    UPDATE leases AS l SET heartbeat_at = {T} FROM held WHERE l.job_id = held.job_id
)
UPDATE job_documents AS j
SET checkpoint = %(checkpoint)s::json, updated_at = {T}
FROM held
WHERE j.id = held.job_id
RETURNING j.cancel_requested
"""

# The pulse: what running tasks reported (progress, checkpoint) since the last pulse, for
# every attempt of a worker in one statement, fenced like a heartbeat; the lease is not
# renewed (that stays the heartbeat's), but a report is a sign of life: `heartbeat_at`
# moves, so a crash's timing runs to it (heartq/inspect/attempts.py), as does a saved
# checkpoint's. Each report: {id, eid, hp, pv, ps, pm, hc, cp}.
PULSE = f"""
WITH {_locked(REPORT_BATCH, "r", carry=(*_PROGRESS, "hc", "cp"))}, beat AS (
    UPDATE leases AS l SET heartbeat_at = {T}
    WHERE l.job_id = ANY(ARRAY(SELECT id FROM locked))
)
UPDATE job_documents AS j
SET {_PROGRESS_SET},
    checkpoint = CASE WHEN locked.r_hc THEN locked.r_cp::json ELSE j.checkpoint END,
    updated_at = {T}
FROM locked
WHERE j.id = locked.id AND j.id = ANY(ARRAY(SELECT id FROM locked))
RETURNING j.id, locked.execution_id, j.cancel_requested
"""

# Which of the attempts a worker holds had their cancel requested: what a pulse reads
# when a notification says one was (or at every pulse where none can: a transaction-mode
# pooler). The jobs of the leases it holds are looked up by their own keys, fenced on the
# worker (and, by the caller, on each lease's execution), so the read walks only those
# jobs' row versions: a read by worker, through the index of running jobs by worker,
# walks under a held xmin horizon one dead entry per running version of every job that
# worker ever ran (docs/design-notes/hot-path.md, "The rule"). One probe of the primary
# key per id, whatever the statistics say: the LATERAL subquery's LIMIT keeps the tests
# of worker, status and cancel out of it (in the same scan they match the predicate of
# that index, which the planner then took), and a lookup per id leaves it no seq scan to
# prefer (`id = ANY(...)` over 2,000 held leases read all 20,000 jobs instead).
RUNNING_CANCELS = f"""
SELECT a.id, a.execution_id
FROM unnest(%(ids)s::{JOB_ID_ARRAY}) AS h(id)
CROSS JOIN LATERAL (
    SELECT j.id, j.execution_id, j.worker_id, j.status, j.cancel_requested
    FROM jobs AS j WHERE j.id = h.id LIMIT 1
) AS a
WHERE a.worker_id = %(worker_id)s AND a.status = 'running' AND a.cancel_requested
"""
