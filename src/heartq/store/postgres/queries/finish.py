"""The end of an attempt: `FINISH` (the fate its worker decided, or a reclaimer's) and
`RELEASE` (given back, not counted), each writing the attempt's execution record in its
job's transaction (an execution row, the job's document or, for most successes, the
job's end row).

Their `CASE` expressions restate two rules of `heartq.lifecycle.fate` (how a fate lands)
inside the fenced write: a retry after a cancel request ends the job cancelled, and
interrupted, released and snoozed attempts are not counted. tests/conformance/test_landed.py holds
the two to agreement."""

from __future__ import annotations

from heartq.store.postgres.queries.batches import FINISH_BATCH, LEASE_BATCH
from heartq.store.postgres.queries.common import T
from heartq.store.postgres.queries.fencing import _locked, held_by

# An attempt that would be retried (status 'queued') while a cancel was requested ends the
# job as 'cancelled' instead: the request is honoured, never lost to a retry. The
# execution keeps its own outcome (failed, timed_out, ...).
# An attempt ended `interrupted` (its worker lost the database), `released` (its worker
# does not know its task: heartq.lifecycle.fate) or `snoozed` (its task said it is too
# early, within its bound) is not counted as an attempt; a snooze is counted in `snoozes`
# (the claim hands the count to the worker, which judges the bound), and what the task
# said of it is its execution's, not the job's last error.
_QUEUED_AGAIN = "(locked.f_status = 'queued' AND NOT j.cancel_requested)"

# The attempt that succeeds a job is recorded on the job's row, which holds all of it
# (execution id, worker, start, finished_at; no error, no crash), and the `executions`
# view shows it from there (migration 0024): no execution row, unless the job has a rate
# key, whose window counts starts from the execution rows (`RATE_STARTS`).
_ON_ITS_JOB = "(status = 'succeeded' AND f_outcome = 'succeeded' AND rate_key IS NULL)"

# A result still to come keeps the committing attempt's lease (the lease reclaimer gives
# it up once that runs out, GIVE_UP_RESULTS): its effective lease at the commit on the
# row (its own deadline if detached, else the later of its floor and its worker's lease:
# docs/design/leases.md, "Leases and heartbeats"), and `detached_until` kept if detached
# (not renewed any more) so that an attached one's lease is read through its worker's,
# which its heartbeats go on renewing until the save.
_PENDING_LEASE = """coalesce(locked.detached_until, greatest(locked.lease_expires_at,
            (SELECT w.lease_expires_at FROM workers AS w WHERE w.id = locked.worker_id)))"""

# The running attempt, as its lease holds it, read with the lease's lock: what the end
# writes on the document as the attempt's record (and the pending result's lease).
_ATTEMPT = ("l.worker_id", "l.attempts", "l.started_at", "l.heartbeat_at", "l.lease_expires_at",
            "l.detached_until", "l.claimed_ahead")

# The attempt's record on the document, from its lease (the lease itself is deleted).
_RECORD = """execution_id = locked.execution_id,
        started_at = locked.started_at,
        heartbeat_at = locked.heartbeat_at,
        claimed_ahead = locked.claimed_ahead,
        ready_xid = NULL"""

# What the finish of each deleted lease says (its status, outcome, result, ...), read from
# the batch at the lease's place in it (`Batch.place`, `Batch.at`): no join of the batch
# with the leases, whose plan could read the whole batch again for each lease.
_FINISHED_KEYS = tuple(key for key, _ in FINISH_BATCH.fields[2:])
_FINISHED = ",\n           ".join(
    f"{FINISH_BATCH.at(key, 'p.place')} AS f_{key}" for key in _FINISHED_KEYS
)

# The place in the batch of lease `l`, for its execution id: looked for only where the
# batch's execution ids differ.
_PLACE_OF_LEASE = FINISH_BATCH.place("l.job_id", ("eid",))

# A lease's columns, in its table's order: what a deferred finish puts back.
_LEASE = ("job_id", "execution_id", "worker_id", "attempts", "started_at", "lease_expires_at",
          "heartbeat_at", "detached_until", "claimed_ahead")

# A lease the finish deleted whose document it did not write (its job has dependents):
# looked for only where fewer documents were written than leases deleted (a test of two
# counts, made once: the usual finish builds no set of the ids written).
_DEFERRED = """%(defer)s
      AND (SELECT count(*) FROM landed) + (SELECT count(*) FROM kept)
          < (SELECT count(*) FROM ended)
      AND job_id NOT IN (SELECT id FROM landed) AND job_id NOT IN (SELECT id FROM kept)"""

# A success whose end is a row of its own (`job_ends`, schema v41), its document left as
# its enqueue wrote it: a job its claim took from the ready log (its document still
# `queued`: the lease said it ran), without dependents (a dependent's enqueue reads its
# dependencies' status after locking their documents), a unique key (the live-key index
# reads the document's status), a rate key (its window counts the execution rows; such a
# job's claim marks its document anyway) or a result still to come (its save writes the
# document).
# The documents are share-locked, which a dependent's enqueue (`LOCK_DEPENDENCIES`)
# waits for or is waited for by: locked, a document is read as its newest version, so
# a dependent committed meanwhile is seen and the job's end written on its document, as
# every other end is.
_APPENDABLE = """j.status = 'queued' AND NOT j.has_dependents AND j.unique_key IS NULL
        AND j.rate_key IS NULL"""

# The finish deletes each attempt's lease first, and that delete is its lock step: the
# leases found by the batch's ids through their key (`= ANY`: one probe an id, in the
# key's order, so a finish and a heartbeat of one worker lock in the same order, byte-wise,
# whatever order the batch came in: tests/plans/test_batch_locks.py), fenced on the
# execution and the worker, a lease that moved meanwhile re-read after its lock. Each
# deleted lease's finish is read from the batch (`locked`). A success that may end on a
# row of its own (`_APPENDABLE`) appends it (`appended`); every other end writes the
# document once, with the attempt's record (`_RECORD`) and its end. Whether a job is deferred (it
# has dependents, and the caller settles those apart) is read by the update, from the
# document's newest version (a dependent's enqueue that committed while this statement
# waited for the document's lock is seen); a job not written is deferred: its lease is
# put back as it was (`restored`: a key deleted by this statement can be inserted again),
# so each job is either ended here or deferred with its lease, never neither.
FINISH = f"""
WITH ended AS (
    DELETE FROM leases AS l
    WHERE l.job_id = ANY({FINISH_BATCH.param("id")})
      AND l.execution_id = {FINISH_BATCH.at("eid", _PLACE_OF_LEASE)} AND {held_by("l")}
    RETURNING {", ".join(f"l.{column}" for column in _LEASE)}
), locked AS (
    SELECT e.job_id AS id, e.*,
           {_FINISHED}
    FROM ended AS e CROSS JOIN LATERAL (
        SELECT {FINISH_BATCH.place("e.job_id", _FINISHED_KEYS)} AS place
    ) AS p
), kept AS (
    SELECT l.id, l.execution_id, l.worker_id, l.attempts, l.started_at, l.heartbeat_at,
           l.claimed_ahead, l.f_result, j.awaited
    FROM locked AS l JOIN job_documents AS j ON j.id = l.id
    WHERE l.f_status = 'succeeded' AND l.f_pending IS NOT TRUE AND {_APPENDABLE}
    FOR SHARE OF j
), appended AS (
    INSERT INTO job_ends (job_id, status, execution_id, worker_id, attempts, started_at,
                          heartbeat_at, finished_at, claimed_ahead, result)
    SELECT id, 'succeeded', execution_id, worker_id, attempts, started_at, heartbeat_at,
           {T}, claimed_ahead, f_result::json
    FROM kept
), landed AS (
    UPDATE job_documents AS j
    SET status = CASE WHEN locked.f_status = 'queued' AND j.cancel_requested
                      THEN 'cancelled' ELSE locked.f_status END,
        run_at = CASE WHEN {_QUEUED_AGAIN} AND NOT locked.f_keep
                      THEN {T} + make_interval(secs => locked.f_delay) ELSE j.run_at END,
        attempts = CASE WHEN locked.f_outcome IN ('interrupted', 'released', 'snoozed')
                        THEN greatest(locked.attempts - 1, 0) ELSE locked.attempts END,
        {_RECORD},
        snoozes = CASE WHEN locked.f_outcome = 'snoozed' THEN j.snoozes + 1
                       ELSE j.snoozes END,
        result = locked.f_result::json,
        error = CASE WHEN locked.f_outcome = 'snoozed' THEN j.error
                     ELSE coalesce(locked.f_error, j.error) END,
        dead_reason = locked.f_dead_reason,
        progress_value = CASE WHEN locked.f_status = 'succeeded' AND j.progress_value IS NOT NULL
                              THEN 1.0 ELSE j.progress_value END,
        finished_at = CASE WHEN {_QUEUED_AGAIN} THEN NULL ELSE {T} END,
        worker_id = CASE WHEN {_QUEUED_AGAIN} THEN NULL ELSE locked.worker_id END,
        lease_expires_at = CASE WHEN locked.f_pending THEN {_PENDING_LEASE} END,
        result_pending = coalesce(locked.f_pending, false),
        detached_until = CASE WHEN locked.f_pending THEN locked.detached_until END,
        cancel_requested = false,
        updated_at = {T}
    FROM locked
    WHERE j.id = locked.id AND NOT (%(defer)s AND j.has_dependents)
      AND locked.id NOT IN (SELECT id FROM kept)
    RETURNING j.id, locked.execution_id AS execution_id, j.status, j.awaited,
              j.has_dependents, locked.worker_id AS ran_on, locked.started_at AS started_at,
              j.rate_key, locked.f_outcome, locked.f_error, locked.f_crash
), restored AS (
    INSERT INTO leases ({", ".join(_LEASE)})
    SELECT {", ".join(_LEASE)} FROM ended WHERE {_DEFERRED}
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, error, crash, rate_key)
    SELECT id, execution_id, ran_on, started_at, {T}, f_outcome, f_error, f_crash::json,
           rate_key
    FROM landed
    WHERE NOT {_ON_ITS_JOB}
)
SELECT id, execution_id, status, awaited, has_dependents, false AS deferred FROM landed
UNION ALL
SELECT id, execution_id, 'succeeded', awaited, false, false FROM kept
UNION ALL
SELECT job_id, execution_id, 'running', false, true, true FROM ended WHERE {_DEFERRED}
"""

# Released jobs go back to the queue, no attempt counted; one whose cancel was requested
# ends 'cancelled' instead (run_at and worker_id kept), so it never runs again. The
# attempt's execution row is written here, as FINISH writes it.
RELEASE = f"""
WITH {_locked(LEASE_BATCH, "g", *_ATTEMPT)}, ended AS (
    DELETE FROM leases WHERE job_id = ANY(ARRAY(SELECT id FROM locked))
), landed AS (
    UPDATE job_documents AS j
    SET status = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        attempts = greatest(locked.attempts - 1, 0),
        {_RECORD},
        worker_id = CASE WHEN j.cancel_requested THEN locked.worker_id END,
        lease_expires_at = NULL,
        detached_until = NULL,
        run_at = CASE WHEN j.cancel_requested THEN j.run_at ELSE {T} END,
        finished_at = CASE WHEN j.cancel_requested THEN {T} END,
        cancel_requested = false,
        updated_at = {T}
    FROM locked
    WHERE j.id = locked.id AND j.id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING j.id, locked.execution_id AS execution_id, j.status, j.awaited,
              j.has_dependents, locked.worker_id AS ran_on, locked.started_at AS started_at,
              j.rate_key
), closed AS (
    INSERT INTO ended_executions (job_id, execution_id, worker_id, started_at, ended_at,
                                  outcome, rate_key)
    SELECT id, execution_id, ran_on, started_at, {T}, 'released', rate_key FROM landed
)
SELECT id, execution_id, status, awaited, has_dependents FROM landed
"""
