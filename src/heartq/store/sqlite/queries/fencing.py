"""How every write of a lease holder reaches its rows: fenced on the execution and the
worker that holds it (`_HELD_BY`). SQLite has one writer: no rows to lock first."""

from __future__ import annotations

# The worker part of the fencing key, in every write of a lease holder (see the PostgreSQL
# dialect): only a job that worker claimed; NULL (a reclaimer), the execution alone.
_HELD_BY = "(:worker_id IS NULL OR j.worker_id = :worker_id)"
