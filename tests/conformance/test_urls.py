"""Secrets in URLs are never printed: `redact` (URLs the code holds) and `scrub` (free
text, such as a driver's error message, that may quote one) hide the same things."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from heartq.cli.common import scrub
from heartq.store import redact

REDACTED = [
    # (case, url, expected)
    (
        "userinfo",
        "postgresql://app:hunter2@db.example:5432/q",
        "postgresql://app:***@db.example:5432/q",
    ),
    ("password-param", "postgresql://db/q?password=hunter2", "postgresql://db/q?password=***"),
    (
        "sslpassword-param",
        "postgresql://db/q?sslmode=verify-full&sslpassword=hunter2&schema=s",
        "postgresql://db/q?sslmode=verify-full&sslpassword=***&schema=s",
    ),
    (
        "both-and-more",
        "postgres://app:hunter2@db/q?password=hunter2&application_name=w&sslpassword=hunter2",
        "postgres://app:***@db/q?password=***&application_name=w&sslpassword=***",
    ),
    ("upper-case-key", "postgresql://db/q?PassWord=hunter2", "postgresql://db/q?PassWord=***"),
    ("empty-password", "postgresql://db/q?password=", "postgresql://db/q?password=***"),
    ("fragment-kept", "postgresql://db/q?password=hunter2#x", "postgresql://db/q?password=***#x"),
    ("no-path", "postgresql://app:hunter2@db", "postgresql://app:***@db"),
    ("no-path-query", "postgresql://db?password=hunter2", "postgresql://db?password=***"),
    (
        "encoded-password",
        "postgresql://app:hun%40ter%2F2@db/q",
        "postgresql://app:***@db/q",
    ),
    ("raw-at-in-password", "postgresql://app:hun@ter2@db/q", "postgresql://app:***@db/q"),
    (
        "direct-url-encoded",
        "postgresql://app:hunter2@pooler/q?pooler=transaction"
        "&direct_url=postgresql%3A%2F%2Fapp%3Ahunter2%40db%2Fq%3Fpassword%3Dhunter2",
        "postgresql://app:***@pooler/q?pooler=transaction"
        "&direct_url=postgresql%3A%2F%2Fapp%3A***%40db%2Fq%3Fpassword%3D***",
    ),
    (
        "direct-url-raw",
        "postgresql://pooler/q?pooler=transaction&direct_url=postgresql://app:hunter2@db/q",
        "postgresql://pooler/q?pooler=transaction&direct_url=postgresql://app:***@db/q",
    ),
    (
        "multi-host",
        "postgresql://app:hunter2@db1:5432,db2:5433/q?target_session_attrs=read-write",
        "postgresql://app:***@db1:5432,db2:5433/q?target_session_attrs=read-write",
    ),
]

UNCHANGED = [
    "sqlite:///heartq.db",
    "sqlite:////var/lib/heartq/heartq.db?busy_timeout=5",
    "postgresql://app@db:5432/q?schema=heartq&sslmode=require",
    "postgresql://db/q?application_name=no-password-here&passfile=/etc/pgpass",
    "postgresql://db/q?mypassword=not-a-libpq-parameter",
    "postgresql://pooler/q?pooler=transaction&direct_url=postgresql%3A%2F%2Fapp%40db%2Fq",
    "postgresql://app@db1:5432,db2:5433/q?target_session_attrs=read-write&schema=s",
]


@pytest.mark.parametrize(
    ("url", "expected"), [c[1:] for c in REDACTED], ids=[c[0] for c in REDACTED]
)
def test_redact_hides_every_secret(url: str, expected: str) -> None:
    assert redact(url) == expected
    assert "hunter2" not in redact(url)
    assert redact(redact(url)) == redact(url)


@pytest.mark.parametrize("url", UNCHANGED)
def test_redact_leaves_urls_without_secrets_unchanged(url: str) -> None:
    assert redact(url) == url


@pytest.mark.parametrize(
    ("url", "expected"), [c[1:] for c in REDACTED], ids=[c[0] for c in REDACTED]
)
def test_scrub_hides_the_same_secrets_in_text(url: str, expected: str) -> None:
    assert scrub(url) == expected
    for template in ("cannot reach {} now", "not a queue URL: '{}'", '"{}"', "({}).", "{}, then"):
        scrubbed = scrub(template.format(url))
        assert "hunter2" not in scrubbed
        assert expected in scrubbed
        # the text around stays; punctuation glued to a password's end may go with it
        head = template.split("{}")[0]
        assert scrubbed.startswith(head + expected)


def test_scrub_hides_several_urls_and_connection_strings() -> None:
    text = (
        "tried postgresql://a:one@h1/q and postgresql://h2/q?password=two, then "
        "conninfo host=h3 user=u password=three sslpassword='four five' dbname=q"
    )
    scrubbed = scrub(text)
    for secret in ("one", "two", "three", "four", "five"):
        assert secret not in scrubbed, scrubbed
    assert "postgresql://a:***@h1/q" in scrubbed
    assert "postgresql://h2/q?password=***" in scrubbed
    assert "host=h3 user=u password=*** sslpassword=*** dbname=q" in scrubbed


def test_scrub_leaves_text_without_secrets_alone() -> None:
    text = "job 01H failed: password authentication failed for user 'app' (sqlite:///q.db)"
    assert scrub(text) == text


def test_a_multi_host_url_keeps_its_hosts_and_gives_heartq_its_options() -> None:
    """A failover-aware URL (Patroni, pg_auto_failover, RDS: docs/OPERATIONS.md): libpq
    gets every host and `target_session_attrs`, heartq takes its schema and pool size."""
    conninfo_to_dict = pytest.importorskip("psycopg.conninfo").conninfo_to_dict
    from heartq.store.postgres.connection import ConnectionPool, parse_url, resolve_pool_size

    url = "postgresql://app@db1:5432,db2:5433/q?target_session_attrs=read-write"
    url += "&schema=jobs&pool_size=3&connect_timeout=2"
    conninfo, schema = parse_url(url)
    assert schema == "jobs" and resolve_pool_size(url) == 3
    assert conninfo_to_dict(conninfo) == {
        "user": "app",
        "host": "db1,db2",
        "port": "5432,5433",
        "dbname": "q",
        "target_session_attrs": "read-write",
        "connect_timeout": "2",
    }
    # libpq's connect_timeout (per host) is the URL's when it gives one, else heartq's 5 s
    assert "connect_timeout" not in ConnectionPool(url).connect_kwargs
    assert (
        ConnectionPool(url.replace("&connect_timeout=2", "")).connect_kwargs["connect_timeout"] == 5
    )


def test_every_connection_notices_a_vanished_peer_unless_the_url_says_otherwise() -> None:
    """Pooled connections as well as lasting sessions get TCP keepalives and
    `tcp_user_timeout` (docs/OPERATIONS.md, "Partitions and slow links"): a statement sent
    into a partition the kernels notice fails within ~10 s instead of ~15 minutes, and a
    connection idle in the pool through one is replaced. The URL's own settings win, for
    the pool and for a direct URL's sessions alike."""
    pytest.importorskip("psycopg")
    from heartq.store.postgres.connection import (
        SESSION_KEEPALIVES,
        SESSION_TCP_USER_TIMEOUT_MS,
        ConnectionPool,
    )

    pool = ConnectionPool("postgresql://app@db/q")
    for kwargs in (pool.connect_kwargs, pool.session_kwargs()):
        for option, value in SESSION_KEEPALIVES.items():
            assert kwargs[option] == value
        assert kwargs["tcp_user_timeout"] == SESSION_TCP_USER_TIMEOUT_MS
    own = ConnectionPool("postgresql://app@db/q?keepalives_idle=60&tcp_user_timeout=30000")
    for kwargs in (own.connect_kwargs, own.session_kwargs()):
        assert "keepalives_idle" not in kwargs and "tcp_user_timeout" not in kwargs
        assert kwargs["keepalives_interval"] == SESSION_KEEPALIVES["keepalives_interval"]
    direct = "postgresql://app@db:5432/q?tcp_user_timeout=20000"
    pooled = ConnectionPool(
        f"postgresql://app@bouncer:6432/q?pooler=transaction&direct_url={quote(direct)}"
    )
    assert pooled.connect_kwargs["tcp_user_timeout"] == SESSION_TCP_USER_TIMEOUT_MS
    assert "tcp_user_timeout" not in pooled.session_kwargs()
