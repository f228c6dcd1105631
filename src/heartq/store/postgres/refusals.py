"""Which PostgreSQL connection failures waiting cannot fix.

A worker waits for its database at startup: a server that is down (connection refused),
full ("too many clients", 53300), starting up or shutting down (57P03), or unreachable
for now will answer later. A wrong password (28P01), a role that may not log in (28000),
a database that does not exist (3D000) or malformed connection options will not: those
fail at once, for every command.

libpq reports a failed connection attempt as text, without its SQLSTATE (psycopg's
`sqlstate` is None then), so the server's message is matched as well. Servers whose
`lc_messages` is not English word these differently: such a refusal is then taken for
a passing failure and waited on, which is the safe side.
"""

from __future__ import annotations

from collections.abc import Mapping

import psycopg

REFUSED_SQLSTATES = frozenset(
    {
        "28P01",  # invalid_password
        "28000",  # invalid_authorization_specification: no pg_hba.conf entry, no such role
        "3D000",  # invalid_catalog_name: no such database
        "42501",  # insufficient_privilege: no CONNECT privilege on the database
    }
)
"""SQLSTATEs of refusals that no amount of waiting changes."""

REFUSED_MESSAGES = (
    "password authentication failed",
    "authentication failed for user",
    "no pg_hba.conf entry",
    "no password supplied",
    "password is required",
    'role "',  # role "x" does not exist / is not permitted to log in
    'database "',  # database "x" does not exist
    "permission denied for database",
    "for connection option",  # invalid integer value "x" for connection option "port"
    "invalid connection option",
    "invalid uri",
    "invalid sslmode",
    "unsupported startup parameter",  # a pooler that refuses heartq's startup options
)
"""Fragments (lowercase) of libpq's and the server's messages for those refusals."""

PASSING_MESSAGES = (
    "too many clients",
    "starting up",
    "shutting down",
    "in recovery mode",
    "connection refused",
)
"""Fragments of messages that pass: checked first, so a message that names a database
while saying it is starting up is not taken for a refusal."""


def refused_for_good(exc: BaseException) -> bool:
    """True if `exc`, raised by a connection attempt, will not pass by waiting."""
    if not isinstance(exc, psycopg.Error):
        return False
    if exc.sqlstate is not None:
        return exc.sqlstate in REFUSED_SQLSTATES
    if isinstance(exc, psycopg.ProgrammingError):
        return True  # the connection string itself is malformed
    text = str(exc).lower()
    if any(fragment in text for fragment in PASSING_MESSAGES):
        return False
    return any(fragment in text for fragment in REFUSED_MESSAGES)


POOLER_HINT = (
    " (a connection pooler in transaction mode? add ?pooler=transaction to the URL, or set "
    "HEARTQ_POOLER=transaction)"
)


POOLER_SQLSTATES = frozenset(
    {
        "42P05",  # duplicate_prepared_statement: "_pg3_0" already exists
        "26000",  # invalid_sql_statement_name: "_pg3_0" does not exist
    }
)
"""What psycopg's own prepared statements (named `_pg3_<n>`, prepared per session after
a statement ran 5 times) meet behind a transaction-mode pooler, where the next
transaction runs on another server session: there already (another client prepared it
there) or missing (prepared on the previous one)."""


def pooler_hint(exc: BaseException) -> str:
    """What to do about an error only a pooler in transaction mode gives heartq when it
    was not told of it (`?pooler=transaction`): a refusal of its startup options
    (`search_path`, the idle-in-transaction timeout; PgBouncer's `unsupported startup
    parameter`), or one of psycopg's prepared statements found on the wrong server
    session. The remedy is that mode, which sends no options and prepares nothing.
    Empty for any other error."""
    text = str(exc).lower()
    if "unsupported startup parameter" in text:
        return POOLER_HINT
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate in POOLER_SQLSTATES and '"_pg3_' in text:
        return POOLER_HINT
    return ""


def options_dropped(applied: Mapping[str, object], schema: str, idle_ms: int) -> str | None:
    """What a new session shows of heartq's startup options when something between
    heartq and the server dropped them (a pooler told to ignore `options`, PgBouncer's
    `ignore_startup_parameters`), else None. `applied`: `STARTUP_OPTIONS_APPLIED`'s row.

    Left unchecked, heartq ran on the role's own search path (`relation "jobs" does not
    exist`, or worse, another schema's tables), and where that path happened to name its
    schema it broke later, on prepared statements. Checked once per process, at the
    first connection (`ConnectionPool.reach`); `idle_ms` is the timeout heartq sent."""
    search_path = str(applied.get("search_path"))
    idle = str(applied.get("idle_ms"))
    if search_path != schema:
        shown = f"search_path is {search_path!r}, not {schema!r}"
    elif idle != str(idle_ms):
        shown = f"idle_in_transaction_session_timeout is {idle} ms, not {idle_ms}"
    else:
        return None
    return f"heartq's startup options were dropped on the way (the session's {shown})"
