"""Only PostgreSQL: notifications. They wake a queue's workers, a job's waiters, the
worker a cancel is for; they never decide ownership."""

from __future__ import annotations

from heartq.store.postgres.queries.common import JOB_ID_ARRAY

NOTIFY = "SELECT pg_notify(%(channel)s, %(queue)s)"

# Delayed jobs enqueued: idle workers wake when the soonest falls due (payload: seconds).
NOTIFY_DUE = "SELECT pg_notify(%(channel)s, %(seconds)s::float8::text)"

NOTIFY_ENDED = f"SELECT pg_notify(%(channel)s, id::text) FROM unnest(%(ids)s::{JOB_ID_ARRAY}) AS id"

# A cancel requested: the worker running the job hears it at once (payload: its id).
NOTIFY_CANCEL = "SELECT pg_notify(%(channel)s, %(worker_id)s)"
