"""What every statement module shares: the keys of heartq's advisory locks, the time.

Time: `T` is the database clock (`now()`, stable within a transaction) unless the caller
passes `now` (seconds since the epoch), which tests use to drive the protocol.
"""

from __future__ import annotations

from heartq.ids import LEAST_JOB_ID

LOCK_NAMESPACE = 0x4851
"""First key of heartq's advisory locks (the second is a hash of the worker id, or one of
the keys below)."""

MIGRATION_LOCK = 0
"""Second key of the lock a migration holds for its transaction: one at a time."""

PROBE_NAMESPACE = 0x4850
"""First key of the lock a liveness probe holds for its transaction; the second is a hash
of the queue's schema (`PROBE_KEY`). One probe at a time per queue, so two probers never
take each other's try-locks for a worker's own; the queues of other schemas of the same
database have other workers, and probe on their own."""

PROBE_KEY = f"{PROBE_NAMESPACE}, hashtext(current_schema())"

UNIQUE_NAMESPACE = 0x4855
"""First key of the transaction locks an enqueue with a unique key takes (the second is
a hash of the key): a namespace of its own, so a key's hash can never wait on a worker's
liveness lock."""

CONCURRENCY_NAMESPACE = 0x484B
"""First key of the transaction locks a claim of jobs with a concurrency key takes (the
second is a hash of the key): its own namespace, apart from liveness and unique keys."""

RATE_NAMESPACE = 0x4852
"""First key of the transaction locks a claim of jobs with a rate key takes (the second
is a hash of the key): its own namespace, so a rate key never meets a concurrency key."""

LANE_NAMESPACE = 0x484C
"""First key of the transaction locks on a lane of the ready log (the second is
`LANE_KEY`'s hash): every enqueue into a lane holds one shared until it commits, and the
lane is pruned only under one exclusive, so never while a transaction that entered it
runs (docs/design/claim.md, "The claim")."""


def lane_key(queue: str, priority: str, fair_key: str) -> str:
    """The second key of a lane's lock, for the SQL expressions `queue`, `priority` and
    `fair_key` ('' for the jobs without one): a hash of the schema's name and the lane's
    (a lane without a key hashes as lanes did before they had keys, so a worker of the
    version before and one of this version lock the same lane alike)."""
    return (
        f"hashtext(current_schema() || '/' || {queue} || '/' || {priority}::text"
        f" || CASE WHEN {fair_key} = '' THEN '' ELSE '/' || {fair_key} END)"
    )


JOB_ID_TYPE = "uuid"
"""The SQL type of a job's id (a UUIDv7, 16 bytes, ordered by its bytes as its text is
by its hex digits, so by time; schema v44), where a parameter, a record's field or an
array is read as job ids: named once, so a statement says which of its values are job
ids and which are worker ids, queue names or keys. Rows read it as `str`
(`postgres/adapters.py`)."""

JOB_ID_ARRAY = f"{JOB_ID_TYPE}[]"
"""An array of job ids (`JOB_ID_TYPE`)."""

BEFORE_EVERY_JOB_ID = f"'{LEAST_JOB_ID}'::{JOB_ID_TYPE}"
"""The job id that sorts before every one (`ids.LEAST_JOB_ID`): a ready log mark's
frontier and a pending transaction's last entry taken, before any entry."""

T = "coalesce(to_timestamp(%(now)s::float8), now())"

T_STATEMENT = "coalesce(to_timestamp(%(now)s::float8), statement_timestamp())"
"""The claim's time: its own statement's, not its transaction's. psycopg sends BEGIN as a
round trip of its own, so a worker frozen between BEGIN and its claim (a SIGSTOP, a VM
pause) would otherwise date the new execution's start, and its lease, from before the
freeze: before the previous execution of the job had even ended (I2)."""

T_SNAPSHOT = "coalesce(to_timestamp(%(now)s::float8), (SELECT clock_timestamp()))"
"""The time of a read that judges what is due in its own snapshot (`HAS_PENDING`), read
once that snapshot is taken (an init plan: once a statement, and a bound an index can
use). Not `now()`: its transaction's start, which psycopg's BEGIN, a round trip of its
own, fixes before the statement's snapshot. A transaction that began after that BEGIN
and committed before the snapshot dates what it made runnable (an enqueue, a dependent
released) from its own `now()`, later: read against the BEGIN's time, that job was seen
but not due, and a drain or a burst worker stopped with it queued. Every transaction the
snapshot sees began before it, so its `now()` is never past this time."""


RATE_STARTS = """(
    SELECT rate_key, started_at FROM ended_executions
    UNION ALL
    SELECT rate_key, started_at FROM job_documents WHERE status = 'running'
)"""
"""The starts a rate window counts: every ended attempt's (a job with a rate key keeps its
last attempt's execution row, migration 0024) and the running ones'. Read with `rate_key
IS NOT NULL AND rate_key = <key>`, each side through its rate index
(executions_rate_idx, jobs_running_rate_idx); the `executions` view would add the
succeeded jobs' last attempts, which no index by rate key reaches. A running job with a
rate key was claimed by the rated claim, which marks its document `running` with its
start (never through the ready log): its document says so exactly."""


def _secs(name: str) -> str:
    return f"make_interval(secs => %({name})s::float8)"


NOW = f"SELECT extract(epoch from {T})::float8 AS now"

# The server's current time on a caller's connection, whose transaction may be old
# (store/sql/enqueue.py: an enqueue into it dates its jobs from now, not from its start).
WALL_CLOCK = "SELECT extract(epoch from clock_timestamp())::float8 AS now"

# The worker's lease (docs/design/leases.md, "Leases and heartbeats"): a running attempt's
# effective lease is its own deadline once detached (`detached_until`), else the later of
# its floor (the job row's `lease_expires_at`, set by its claim or its start) and its
# worker's lease, which the heartbeat renews; and its last sign of life is the later of
# its row's (claim, pulse, checkpoint) and, while attached, its worker's last heartbeat.
# Over `j` (jobs) and `w` (its worker's row, LEFT JOINed: NULL without one).
EFFECTIVE_LEASE = """CASE WHEN j.detached_until IS NOT NULL THEN j.detached_until
         ELSE greatest(j.lease_expires_at, w.lease_expires_at) END"""
EFFECTIVE_BEAT = """CASE WHEN j.detached_until IS NOT NULL THEN j.heartbeat_at
         ELSE greatest(j.heartbeat_at, w.last_heartbeat_at) END"""
