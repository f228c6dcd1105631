"""Every SQL statement of the SQLite backend, by name. They live in modules by role, the
same modules, with the same names in the same order, as the PostgreSQL backend's
`queries/`, so the two dialects can be diffed module by module. This module re-exports
every statement under its name: a store reads `q.CLAIM` whichever module holds it.
Parameters are always bound. A tuple is several statements run in order in one
transaction, the last one's rows being the answer (`store/sql/`): SQLite has no
data-modifying CTE, so where PostgreSQL ends a job and writes its execution in one
statement, SQLite takes two.

Batches travel as one JSON parameter read with `json_each`, so a statement's text (and its
prepared form in the statement cache) is the same whatever the batch size. Statements that
update jobs from a batch name the primary-key index (`INDEXED BY
sqlite_autoindex_heartq_jobs_1`, the index SQLite makes for `id TEXT PRIMARY KEY`): left
to itself the planner walks every running job and re-reads the whole batch for each,
which costs running jobs x batch size instead of one key lookup per batch element.
"""

from __future__ import annotations

from heartq.store.sqlite.queries.admin import *  # noqa: F403
from heartq.store.sqlite.queries.claim import *  # noqa: F403
from heartq.store.sqlite.queries.common import *  # noqa: F403
from heartq.store.sqlite.queries.controls import *  # noqa: F403
from heartq.store.sqlite.queries.declarations import *  # noqa: F403
from heartq.store.sqlite.queries.dependencies import *  # noqa: F403
from heartq.store.sqlite.queries.enqueue import *  # noqa: F403
from heartq.store.sqlite.queries.fencing import *  # noqa: F403
from heartq.store.sqlite.queries.finish import *  # noqa: F403
from heartq.store.sqlite.queries.inspection import *  # noqa: F403
from heartq.store.sqlite.queries.keyed import *  # noqa: F403
from heartq.store.sqlite.queries.leases import *  # noqa: F403
from heartq.store.sqlite.queries.liveness import *  # noqa: F403
from heartq.store.sqlite.queries.reclaim import *  # noqa: F403
from heartq.store.sqlite.queries.registry import *  # noqa: F403
from heartq.store.sqlite.queries.schedules import *  # noqa: F403
from heartq.store.sqlite.queries.schema import *  # noqa: F403
