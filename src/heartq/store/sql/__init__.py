"""The SQL store, written once: every operation of `Store` over a dialect's statements.

A backend is a dialect object (its connections, its statements, the few answers where
it truly differs: `Dialect` in `base.py`) and its own objects for what is not SQL
(liveness locks; the link: pool, sessions, notifications, `Link` in
`store/link.py`). Everything else (which statements an operation runs, in which
transaction, with which parameters, and what their rows mean) lives here, so a feature
is written once for SQLite and PostgreSQL; a dialect never calls back into it.

One module per role of the store, each a plain class that holds the dialect and reads top
to bottom: `enqueue.py` (jobs, schedules and task declarations in), `leases.py` (claims,
renewals, a holder's ends, and `JobEnds`: a job's end whoever ends it), `reclaim.py`
(the jobs of gone holders), `registry.py` (workers' rows), `inspection.py` (reads),
`admin.py` (an operator's writes, and pruning); `keyed.py` the claim's keyed half.
`store.py` builds them into `SqlStore`, whose explicit methods say which role answers
each `Store` call.
Backends never log: events are emitted by the worker and the maintenance pass.
"""
