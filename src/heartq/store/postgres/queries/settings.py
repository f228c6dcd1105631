"""Only PostgreSQL: the settings of sessions heartq does not own or shares (a borrowed
connection, a transaction-mode pooler), and what a new session shows of heartq's
startup options."""

from __future__ import annotations

# Search paths on connections heartq does not own, or lends (store/postgres/borrowed.py):
# local to the transaction, so an error cannot leak them past it.
# What heartq reads of a caller's connection before its statements run there: the search
# path (put back after), the database it is on, and whether heartq's schema has a queue
# there (its jobs table): a connection to another database is refused in one line.
CALLERS_CONNECTION = """
SELECT current_setting('search_path') AS search_path, current_database() AS database,
       to_regclass(format('%%I.jobs', %(schema)s::text)) IS NOT NULL AS has_queue
"""

SET_SEARCH_PATH = "SELECT set_config('search_path', %(search_path)s, true)"

# The planner settings of heartq's own sessions (docs/design/claim.md, "Plans that cannot
# turn"): set at a direct session's start (`connection.py`, startup options), and behind
# a transaction-mode pooler by each transaction's first statement (`TRANSACTION_SCOPE`).
# No JIT: PostgreSQL compiles a statement whose estimated cost passes `jit_above_cost` at
# every run, and a generic plan's estimate grows with the statistics. No sequential and
# no bitmap scans: heartq's statements walk indexes, and a plan chosen from statistics
# that call a table small (analyzed empty, then a backlog) read it whole at every run.
PLANNER = {"jit": "off", "enable_seqscan": "off", "enable_bitmapscan": "off"}

_PLANNER_SET = ", ".join(
    f"set_config('{name}', '{value}', true)" for name, value in PLANNER.items()
)

# A connection lent to a task (`borrowed.task_scope`) gets PostgreSQL's defaults for the
# task's transaction: the search path, the plan cache's own choice between generic and
# custom plans, the planner's (`boot_val`: the server's built-in defaults).
_LENT = ", ".join(f"'{name}'" for name in ("search_path", "plan_cache_mode", *PLANNER))
TASK_DEFAULTS = f"SELECT set_config(name, boot_val, true) FROM pg_settings WHERE name IN ({_LENT})"

# ...and heartq's own again once the task's block ended, for what heartq writes after it
# in that transaction (the attempt's end, committed with the task's writes): its schema,
# its planner settings, and the session's own plan cache mode (`reset_val`: what its
# startup options set; behind a transaction-mode pooler, which sets none, the server's).
TASK_DONE = f"""
SELECT set_config('search_path', %(search_path)s, true), {_PLANNER_SET},
       set_config(name, reset_val, true)
FROM pg_settings WHERE name = 'plan_cache_mode'
"""

# Behind a transaction-mode pooler, the first statement of every transaction: what a
# direct connection sets at its start (its schema as the search path, the
# idle-in-transaction timeout, the planner's settings), for this transaction only, since
# the next one may run on another server session (`pooler.py`). Nothing is prepared
# there, so the plan cache's mode does not matter.
TRANSACTION_SCOPE = (
    "SELECT set_config('search_path', %(schema)s, true),"
    f" set_config('idle_in_transaction_session_timeout', %(idle)s, true), {_PLANNER_SET}"
)

# What a new direct session shows of heartq's startup options (`-c search_path=... -c
# idle_in_transaction_session_timeout=...`): a pooler told to ignore them leaves the
# role's own (`refusals.options_dropped`).
STARTUP_OPTIONS_APPLIED = (
    "SELECT current_setting('search_path') AS search_path, setting AS idle_ms"
    " FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'"
)
