"""Storage: the `Store` interface and `open_store(url)`, which picks the backend."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from heartq.config import resolve_url
from heartq.errors import ConfigError
from heartq.store.interface import Store

SECRET_PARAMETERS = ("password", "sslpassword")
"""Connection parameters whose values are secrets (libpq's names), hidden wherever a URL
or connection string is printed or logged."""

_SECRET_PARAMETER = re.compile(
    r"(?P<key>(?<![\w.-])(?:" + "|".join(SECRET_PARAMETERS) + r"))\s*=\s*"
    r"(?P<value>'(?:[^'\\]|\\.)*'?|[^&#\s'\"]*)",
    re.IGNORECASE,
)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]*")
_NESTED_URL = re.compile(r"(?P<key>(?<![\w.-])direct_url)=(?P<value>[^&#\s'\"]*)", re.IGNORECASE)
"""A URL inside a queue URL's query (PostgreSQL's `direct_url=`, percent-encoded or not),
whose own password is hidden as any URL's."""


def _hide_parameters(text: str) -> str:
    return _SECRET_PARAMETER.sub(r"\g<key>=***", _NESTED_URL.sub(_hide_nested, text))


def _hide_nested(match: re.Match[str]) -> str:
    raw = match["value"]
    hidden = redact(unquote(raw))
    return f"{match['key']}={quote(hidden, safe='*') if '%' in raw else hidden}"


def redact(url: str) -> str:
    """The URL with every secret replaced by `***`, safe to print and log: the password
    of `user:password@host`, the `password=` and `sslpassword=` query parameters, and
    those of a URL given in the query (`direct_url=`).
    A URL without secrets comes back unchanged.

    The user information is what precedes the last `@` before the first `/` (libpq reads
    up to the first `@`, URL parsers up to the last: hiding up to the last covers both)."""
    scheme_end = url.find("://")
    if scheme_end < 0:
        return _hide_parameters(url)
    start = scheme_end + 3
    slash = url.find("/", start)
    end = slash if slash >= 0 else len(url)
    userinfo, at, host = url[start:end].rpartition("@")
    if at and ":" in userinfo:
        url = f"{url[:start]}{userinfo.split(':', 1)[0]}:***@{host}{url[end:]}"
    head, question, query = url.partition("?")
    return head + question + _hide_parameters(query) if question else url


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (`redact`), and any `password=...` outside
    URLs too (a libpq connection string, `host=h password=secret`, quoted in an error)."""
    return _hide_parameters(_URL.sub(lambda m: redact(m.group(0)), text))


def open_store(url: str | None = None, *, pool_size: int | None = None) -> Store:
    """A store for `url` (else `HEARTQ_URL`, else `sqlite:///heartq.db`). Opens lazily.
    `pool_size`: PostgreSQL's pooled connections per process (SQLite has no pool)."""
    resolved = resolve_url(url)
    scheme = resolved.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from heartq.store.sqlite import SQLiteStore

        return SQLiteStore(resolved)
    if scheme in ("postgresql", "postgres"):
        try:
            from heartq.store.postgres import PostgresStore
        except ImportError as exc:
            raise ConfigError(
                f"the PostgreSQL backend needs psycopg: pip install 'heartq[postgres]' ({exc})"
            ) from None
        return PostgresStore(resolved, pool_size=pool_size)
    raise ConfigError(
        f"unsupported queue URL {redact(resolved)!r}: use sqlite:///path.db or postgresql://..."
    )


__all__ = ["Store", "open_store", "redact", "redact_text"]
