"""Every SQL statement of the PostgreSQL backend, by name. They live in modules by role,
the same modules, with the same names in the same order, as the SQLite backend's
`queries/`, so the two dialects can be diffed module by module; the statements only
PostgreSQL has sit beside their kin, or in modules of their own (`notify.py`,
`settings.py`). This module re-exports every statement under its name: a store reads
`q.CLAIM` whichever module holds it.
Parameters are always bound; the only values written into the text are the constants of
heartq's advisory lock keys (`common.py`). A tuple is several statements run in order in
one transaction, the last one's rows being the answer (`store/sql/`).

The hot batches (an enqueue's jobs, finishes, releases, renewals, reports) travel as
typed arrays read with `unnest` (`batches.py`), the rarer ones (dependencies, task
declarations) as one JSON parameter read with `json_to_recordset`: either way claim,
heartbeat and finish are each ONE statement whatever the batch size.
"""

from __future__ import annotations

from heartq.store.postgres.queries.admin import *  # noqa: F403
from heartq.store.postgres.queries.batches import *  # noqa: F403
from heartq.store.postgres.queries.claim import *  # noqa: F403
from heartq.store.postgres.queries.common import *  # noqa: F403
from heartq.store.postgres.queries.controls import *  # noqa: F403
from heartq.store.postgres.queries.declarations import *  # noqa: F403
from heartq.store.postgres.queries.dependencies import *  # noqa: F403
from heartq.store.postgres.queries.enqueue import *  # noqa: F403
from heartq.store.postgres.queries.fencing import *  # noqa: F403
from heartq.store.postgres.queries.finish import *  # noqa: F403
from heartq.store.postgres.queries.inspection import *  # noqa: F403
from heartq.store.postgres.queries.keyed import *  # noqa: F403
from heartq.store.postgres.queries.leases import *  # noqa: F403
from heartq.store.postgres.queries.liveness import *  # noqa: F403
from heartq.store.postgres.queries.notify import *  # noqa: F403
from heartq.store.postgres.queries.reclaim import *  # noqa: F403
from heartq.store.postgres.queries.registry import *  # noqa: F403
from heartq.store.postgres.queries.schedules import *  # noqa: F403
from heartq.store.postgres.queries.schema import *  # noqa: F403
from heartq.store.postgres.queries.settings import *  # noqa: F403
