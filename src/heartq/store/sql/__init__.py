"""The SQL store, written once: every operation of `Store` over a dialect's statements.

A backend is a dialect: its connections, its statements, and a few hooks where it truly
needs something else. Everything else (which statements an operation runs, in which
transaction, with which parameters, and what their rows mean) lives here, so a feature is
written once for SQLite and PostgreSQL.

One module per role of the store, each a mixin over `base.py` (the dialect's hooks and
the shared plumbing), composed into `SqlStore` by `store.py`: `enqueue.py` (jobs,
schedules and task declarations in), `leases.py` (claims, renewals, a holder's ends),
`reclaim.py` (the jobs of gone holders), `registry.py` (workers' rows), `inspection.py`
(reads), `admin.py` (an operator's writes, and pruning). The roles are those of the
protocols of `store/interface.py`, but for `crash_attempt` (a `LeaseHolder` call, made as
a reclaim: see `leases.py`) and the liveness locks and wake-ups, which each dialect
implements itself. Backends never log: events are emitted by the worker and the
maintenance pass.
"""
