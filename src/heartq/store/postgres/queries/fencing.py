"""How every write of a lease holder reaches its rows: fenced on the execution and the
worker that holds it (`_HELD_BY`), and locked in id order first (`_locked`)."""

from __future__ import annotations

from heartq.store.postgres.queries.batches import Batch

# Heartbeat, finish, release, pulse and the start of claimed-ahead jobs lock their
# attempts' leases in id order before they write (the `locked` CTE; the finish's delete of
# the leases is its lock step, `finish.py`), and write only what they locked: two
# statements of one worker that touch the same jobs (a heartbeat and a finish racing)
# then wait for each other instead of each holding a row the other needs
# ("deadlock detected"). Fencing: only leases of the execution the batch names, held by
# the worker the statement names (`held_by`), are locked; an attempt that ended or was
# taken has no such lease, and its batch row changes nothing. The lock step finds each
# lease by its key alone (one lookup `l.job_id = <the batch row's id>` per batch row),
# whatever the statistics say: a test the planner can fit to another index (the
# worker's, a status's predicate on the jobs table before schema v40) made it walk that
# index for each row of a batch, quadratic in the jobs a worker holds once statistics
# lagged (a heartbeat of minutes with a million queued: BENCHMARKS.md, 2026-11-24).
# The writes find the locked rows by key again, not by the `ctid` the lock step saw: a
# row another statement updated while this one waited for its lock (a heartbeat, a
# cancel request) is locked in its newest version, which this statement's snapshot
# does not see, so a write by that ctid matches nothing and the finish is lost (tried:
# the update by ctid landed no row, by id it landed the row). By key, the write finds
# the version its snapshot sees and follows it to the locked one.
# A write of the locked rows names them by key too (`= ANY(ARRAY(SELECT id FROM
# locked))`, beside a document's join with `locked` for the batch's fields): joined
# alone, with statistics that lag (a table analyzed empty, then filled), the planner
# merged the sorted batch with a walk of the whole primary key.
# tests/plans/test_batch_locks.py pins the order (byte-wise, whatever order the batch
# came in) and the probes under a prepared statement's generic plan.


# The worker part of the fencing key (docs/design/database-bad-days.md, "A failover that forgets a
# claim"): the lease holder's writes name their worker, and match only a job that worker
# claimed, so an execution id a database issued again after forgetting a claim fences
# out the attempt of the forgotten one. `worker_id` NULL: a reclaimer, which read and
# locked the rows it finishes in its own transaction (or a lease made without its
# worker), fenced on the execution alone. One parameter per statement: no byte per job.
def held_by(alias: str) -> str:
    """The fence on the worker, over `alias` (a lease, or a document that keeps its last
    attempt's worker). `IS NOT DISTINCT FROM`, not `=` (the same where the worker is
    given): no index serves it, so a statement that finds its attempt by key cannot be
    planned through the leases' index by worker instead (a plan made while the table
    looked empty walked all of a worker's leases for each row of its batch)."""
    return (
        f"(%(worker_id)s::text IS NULL OR {alias}.worker_id IS NOT DISTINCT FROM"
        " %(worker_id)s::text)"
    )


_HELD_BY = held_by("j")


def _locked(
    batch: Batch,
    alias: str,
    *columns: str,
    carry: tuple[str, ...] = (),
    lock_document: bool = False,
) -> str:
    """The CTE `alias` of `batch`'s rows, and the `locked` CTE described above over it:
    written once for every statement that changes a batch of a worker's rows but the
    finish (which deletes them). What is
    locked is each attempt's lease (`l`, schema v40: a running attempt is a lease; its
    document `d`, joined only where a column of it is asked for, is read, not locked: a
    write of it follows the lease's lock, and reads the document's newest version as it
    updates it). `locked` has `id`, `status`
    (`running`: only running attempts have a lease), `execution_id` and the further
    `columns` (of `l` and `d`), and the batch's fields `carry` as `<alias>_<key>`: the
    update then reads its batch from the locked rows alone, joined to nothing else. Each
    row is found by one probe of the primary key per batch row, in id order (a `LATERAL`
    lookup of the batch's rows sorted by id, which locks as it goes): whatever the
    planner estimates of the batch (a prepared statement's generic plan takes an array
    parameter for 10 rows; a join of the batch with the rows it found then rescanned the
    whole batch for each row, twice a finish's instructions at 100 jobs).
    `lock_document`: each document is share-locked after its lease, so that what the
    statement reads of it is its newest version (an operator's cancel request, written
    under the lease's lock, is seen by a start that waited for that lock)."""
    carried = tuple(f"{alias}.{key} AS {alias}_{key}" for key in carry)
    found = ", ".join(
        ("l.job_id AS id", "'running'::text AS status", "l.execution_id", *columns)
    )
    document = lock_document or any(column.startswith("d.") for column in columns)
    joined = " JOIN job_documents AS d ON d.id = l.job_id" if document else ""
    return f"""{alias} AS (
    SELECT * FROM {batch.rows(alias)} ORDER BY id
), locked AS (
    SELECT j.*{"".join(f", {c}" for c in carried)}
    FROM {alias} CROSS JOIN LATERAL (
        SELECT {found} FROM leases AS l{joined}
        WHERE l.job_id = {alias}.id AND l.execution_id = {alias}.eid AND {held_by("l")}
        FOR UPDATE OF l{" FOR SHARE OF d" if lock_document else ""}
    ) AS j
)"""
