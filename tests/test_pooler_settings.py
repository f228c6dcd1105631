"""Choosing the transaction-pooler mode (`?pooler=transaction`, `HEARTQ_POOLER`) and its
direct URL (`?direct_url=`, `HEARTQ_DIRECT_URL`): where each comes from, what the mode
changes in the connections heartq opens, and one clear line for what is wrong. No
server is needed: a store opens its connections lazily."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest

from heartq.errors import ConfigError
from heartq.store.postgres.connection import ConnectionPool, parse_pooler
from heartq.store.postgres.pooler import ENV_DIRECT_URL, ENV_POOLER
from heartq.store.postgres.store import PostgresStore

URL = "postgresql://app@pooler.example:6432/q?schema=jobs"
DIRECT = "postgresql://app:s3cret@db.example:5432/q"


@pytest.fixture(autouse=True)
def _no_pooler_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(ENV_POOLER, raising=False)
    monkeypatch.delenv(ENV_DIRECT_URL, raising=False)
    yield


def test_by_default_connections_carry_the_schema_and_may_prepare() -> None:
    pool = ConnectionPool(URL)
    assert not pool.pooler.transaction and pool.sessions
    assert "search_path=jobs" in pool.connect_kwargs["options"]
    assert "prepare_threshold" not in pool.connect_kwargs  # psycopg's default: prepare


def test_the_transaction_mode_sends_no_startup_options_and_prepares_nothing() -> None:
    pool = ConnectionPool(f"{URL}&pooler=transaction")
    assert pool.pooler.transaction and not pool.sessions
    assert "options" not in pool.connect_kwargs
    assert pool.connect_kwargs["prepare_threshold"] is None
    assert pool.conninfo == "postgresql://app@pooler.example:6432/q"  # not given to libpq
    with pytest.raises(ConfigError, match="direct URL"):
        pool.connect()  # no lasting session to be had


def test_a_store_behind_the_pooler_holds_no_lock_and_polls() -> None:
    store = PostgresStore(f"{URL}&pooler=transaction")
    assert (store.link.holds_liveness_lock, store.link.supports_notify) == (False, False)
    direct = PostgresStore(f"{URL}&pooler=transaction&direct_url={quote(DIRECT, safe='')}")
    assert (direct.link.holds_liveness_lock, direct.link.supports_notify) == (True, True)
    plain = PostgresStore(URL)
    assert (plain.link.holds_liveness_lock, plain.link.supports_notify) == (True, True)


def test_the_environment_sets_the_mode_and_the_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_POOLER, "Transaction")
    monkeypatch.setenv(ENV_DIRECT_URL, DIRECT)
    from_env = parse_pooler(URL)
    assert (from_env.transaction, from_env.direct_url) == (True, DIRECT)
    assert ConnectionPool(URL).sessions  # its lasting session on the direct URL
    other = "postgresql://other@db2/q"
    given = parse_pooler(f"{URL}&direct_url={quote(other, safe='')}")
    assert given.direct_url == other
    monkeypatch.delenv(ENV_DIRECT_URL)
    assert parse_pooler(f"{URL}&pooler=none").transaction is False


@pytest.mark.parametrize(
    ("url", "env", "message"),
    [
        (f"{URL}&pooler=session-ish", {}, "the URL's pooler must be one of transaction, none"),
        (URL, {ENV_POOLER: "yes"}, "HEARTQ_POOLER must be one of transaction, none"),
        (
            f"{URL}&direct_url={quote(DIRECT, safe='')}",
            {},
            "the URL's direct_url is only used behind a pooler in transaction mode",
        ),
        (URL, {ENV_DIRECT_URL: DIRECT}, "HEARTQ_DIRECT_URL is only used behind a pooler"),
        (
            f"{URL}&pooler=transaction&direct_url={quote(DIRECT + '?schema=x', safe='')}",
            {},
            "takes connection options only, not schema",
        ),
        (
            f"{URL}&pooler=transaction&direct_url={quote('mysql://app:s3cret@db/q', safe='')}",
            {},
            "not a PostgreSQL URL",
        ),
    ],
)
def test_what_is_wrong_is_one_line_without_the_password(
    url: str, env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        PostgresStore(url)
    text = str(raised.value)
    assert message in text
    assert "\n" not in text and "s3cret" not in text
