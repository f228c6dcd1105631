"""Choosing whether a claim's commit waits for its flush (`?claim_commit=`,
`HEARTQ_CLAIM_COMMIT`): where it comes from, what it changes in the connections heartq
opens, and one clear line for what is wrong. No server is needed: a store opens its
connections lazily. What a crash does to each: tests/integration/test_claim_commit.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heartq.errors import ConfigError
from heartq.store.postgres.claim_commit import DURABLE_AFTER_START, ENV_CLAIM_COMMIT, SETTING
from heartq.store.postgres.connection import ConnectionPool
from heartq.store.postgres.store import PostgresStore

URL = "postgresql://app:s3cret@db.example:5432/q?schema=jobs"


@pytest.fixture(autouse=True)
def _no_claim_commit_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(ENV_CLAIM_COMMIT, raising=False)
    yield


def test_by_default_every_claim_waits_for_its_flush() -> None:
    pool = ConnectionPool(URL)
    assert pool.claim_async_after is None
    assert SETTING not in pool.connect_kwargs["options"]


def test_async_rides_on_each_connection_with_the_servers_uptime_it_waits_for() -> None:
    pool = ConnectionPool(f"{URL}&claim_commit=async")
    assert pool.claim_async_after == DURABLE_AFTER_START
    assert f"-c {SETTING}={DURABLE_AFTER_START:g}" in pool.connect_kwargs["options"]
    assert pool.conninfo == "postgresql://app:s3cret@db.example:5432/q"  # not given to libpq


def test_the_environment_sets_it_and_the_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CLAIM_COMMIT, " Async ")
    assert ConnectionPool(URL).claim_async_after == DURABLE_AFTER_START
    assert ConnectionPool(f"{URL}&claim_commit=flush").claim_async_after is None


@pytest.mark.parametrize(
    ("suffix", "env", "message"),
    [
        ("&claim_commit=later", None, "the URL's claim_commit must be one of flush, async"),
        ("", "sometimes", f"{ENV_CLAIM_COMMIT} must be one of flush, async, got 'sometimes'"),
        ("&claim_commit=async&pooler=transaction", None, "not a pooler in transaction mode"),
    ],
)
def test_a_bad_choice_is_one_clear_line_without_the_password(
    monkeypatch: pytest.MonkeyPatch, suffix: str, env: str | None, message: str
) -> None:
    if env is not None:
        monkeypatch.setenv(ENV_CLAIM_COMMIT, env)
    with pytest.raises(ConfigError, match=message) as refused:
        ConnectionPool(URL + suffix)
    assert "\n" not in str(refused.value) and "s3cret" not in str(refused.value)


def test_the_link_says_which_for_the_workers_start_line() -> None:
    """`worker_started`'s `claim_commit` field reads it."""
    assert PostgresStore(URL).link.claim_commit == "flush"
    assert PostgresStore(f"{URL}&claim_commit=async").link.claim_commit == "async"
