"""`SqlStore`: the store's roles composed over one dialect's statements.

Why a module of its own: the roles know nothing of each other (each stands on `SqlBase`
alone), and this is the one place that puts them together, so a dialect subclasses
`SqlStore` and overrides the hooks of `base.py`, whichever role runs them.
"""

from __future__ import annotations

from heartq.store.sql.admin import AdminOps
from heartq.store.sql.enqueue import EnqueueOps
from heartq.store.sql.inspection import InspectOps
from heartq.store.sql.leases import LeaseOps
from heartq.store.sql.reclaim import ReclaimOps
from heartq.store.sql.registry import RegistryOps


class SqlStore(EnqueueOps, LeaseOps, ReclaimOps, RegistryOps, InspectOps, AdminOps):
    """`Store` over SQL: every role's operations, over the hooks a dialect provides
    (`base.py`). `SQLiteStore` and `PostgresStore` are its two dialects."""
