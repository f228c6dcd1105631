"""Only PostgreSQL: the settings of sessions heartq does not own or shares (a borrowed
connection, a transaction-mode pooler), and what a new session shows of heartq's
startup options."""

from __future__ import annotations

# Search paths on connections heartq does not own, or lends (store/postgres/borrowed.py):
# local to the transaction, so an error cannot leak them past it.
SEARCH_PATH = "SELECT current_setting('search_path') AS search_path"

SET_SEARCH_PATH = "SELECT set_config('search_path', %(search_path)s, true)"

# A connection lent to a task (`borrowed.task_scope`) gets PostgreSQL's defaults for the
# task's transaction: the search path, and the plan cache's own choice between generic
# and custom plans (heartq's sessions force the generic ones: `connection.py`).
TASK_DEFAULTS = """
SELECT set_config('search_path', boot_val, true), set_config('plan_cache_mode', 'auto', true)
FROM pg_settings WHERE name = 'search_path'
"""

# ...and heartq's own again once the task's block ended, for what heartq writes after it
# in that transaction (the attempt's end, committed with the task's writes): its schema,
# and the session's own plan cache mode (`reset_val`: what its startup options set).
TASK_DONE = """
SELECT set_config('search_path', %(search_path)s, true), set_config(name, reset_val, true)
FROM pg_settings WHERE name = 'plan_cache_mode'
"""

# Behind a transaction-mode pooler, the first statement of every transaction: what a
# direct connection sets at its start (`-c search_path=... -c
# idle_in_transaction_session_timeout=...`), for this transaction only, since the next
# one may run on another server session (`pooler.py`).
TRANSACTION_SCOPE = (
    "SELECT set_config('search_path', %(schema)s, true),"
    " set_config('idle_in_transaction_session_timeout', %(idle)s, true)"
)

# What a new direct session shows of heartq's startup options (`-c search_path=... -c
# idle_in_transaction_session_timeout=...`): a pooler told to ignore them leaves the
# role's own (`refusals.options_dropped`).
STARTUP_OPTIONS_APPLIED = (
    "SELECT current_setting('search_path') AS search_path, setting AS idle_ms"
    " FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'"
)
