"""Behind a connection pooler in transaction mode: which mode, and what it changes.

PgBouncer in `pool_mode = transaction` (Heroku, Supabase, Neon, many Kubernetes setups)
hands each *transaction* of a client connection to whichever server session is free.
Nothing that lives on a server session survives from one transaction to the next, so in
this mode (`?pooler=transaction`, else `HEARTQ_POOLER=transaction`) heartq keeps none:

- no server-side prepared statements (psycopg prepares a statement run often, per
  session, as `_pg3_0`; the next session has it already, or not at all:
  `DuplicatePreparedStatement`): every connection heartq opens has
  `prepare_threshold=None`;
- no startup `options`: the pooler refuses them or drops them. heartq's schema
  (`search_path`) and `idle_in_transaction_session_timeout` are set for each transaction
  instead (`TRANSACTION_SCOPE`, `set_config(..., true)`), as its first statement; the
  one-statement operations that commit by themselves (claim, finish, heartbeat) become
  transactions of their own for it;
- no session advisory lock for liveness and no LISTEN. A worker holds no lock (its row
  says so, `workers.liveness_lock`, so no probe takes its free lock for a death) and is
  judged by its heartbeats and leases alone; it polls for work, cancels and ends.

Unless a *direct* URL is given (`?direct_url=`, percent-encoded, else
`HEARTQ_DIRECT_URL`): a connection to the same database that bypasses the pooler, on
which the worker keeps its one lasting session (`session.py`) for its liveness lock and
its LISTENs, as without a pooler. Everything else still goes through the pooler.

Why a setting and not detection: nothing a client sees tells a pooler apart reliably.
`pg_backend_pid()` changing between transactions says so only when the pooler happens
to switch sessions (an idle pool hands the same one back every time), and PgBouncer's
`SHOW` commands need its admin console. A wrong guess either way breaks workers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from heartq.errors import ConfigError

ENV_POOLER = "HEARTQ_POOLER"
"""The environment variable that sets the pooler mode when the URL does not."""
ENV_DIRECT_URL = "HEARTQ_DIRECT_URL"
"""The environment variable that gives the direct URL when the URL does not."""
TRANSACTION = "transaction"
NONE = "none"
MODES = (TRANSACTION, NONE)
"""`transaction`: behind a transaction-mode pooler; `none` (the default): a direct
connection, or a session-mode pooler (each client connection is one server session)."""


@dataclass(frozen=True)
class Pooler:
    """How heartq reaches PostgreSQL: through a transaction-mode pooler or not, and the
    direct URL (the same database, bypassing the pooler) for its one lasting session."""

    transaction: bool = False
    direct_url: str | None = None

    @property
    def sessions(self) -> bool:
        """Whether a lasting session (liveness lock, LISTEN) can be had: always without
        a pooler, only on the direct URL behind one."""
        return not self.transaction or self.direct_url is not None


def choose(
    given: Mapping[str, str],
    parameter: str,
    variable: str,
    modes: tuple[str, ...],
    default: str,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """`(mode, where it came from)` of a heartq URL parameter that names one of `modes`:
    the URL's own (`given`), else the environment variable, in any case, else `default`;
    the URL wins. One clear `ConfigError` for a mode it does not know."""
    env = os.environ if environ is None else environ
    if parameter in given:
        raw, where = given[parameter], f"the URL's {parameter}"
    else:
        raw, where = env.get(variable, ""), variable
    mode = raw.strip().lower() or default
    if mode not in modes:
        raise ConfigError(f"{where} must be one of {', '.join(modes)}, got {raw!r}")
    return mode, where


def resolve_pooler(
    given: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> Pooler:
    """The pooler mode from the URL's own parameters (`given`: `pooler`, `direct_url`),
    else the environment; the URL wins. One clear `ConfigError` for a mode it does not
    know, or a direct URL without the transaction mode (it would be silently unused)."""
    env = os.environ if environ is None else environ
    mode, _ = choose(given, "pooler", ENV_POOLER, MODES, NONE, env)
    if "direct_url" in given:
        direct, direct_where = given["direct_url"], "the URL's direct_url"
    else:
        direct, direct_where = env.get(ENV_DIRECT_URL, ""), ENV_DIRECT_URL
    direct = direct.strip()
    if direct and mode != TRANSACTION:
        raise ConfigError(
            f"{direct_where} is only used behind a pooler in transaction mode: "
            f"add ?pooler=transaction (or set {ENV_POOLER}=transaction), or drop it"
        )
    return Pooler(transaction=mode == TRANSACTION, direct_url=direct or None)


class NoLock:
    """The liveness "lock" of a worker that holds none (behind a transaction-mode pooler
    without a direct URL): nothing to close; its heartbeats speak for it."""

    def close(self) -> None:
        """Nothing is held."""
