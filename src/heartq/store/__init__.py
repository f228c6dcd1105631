"""Storage: the `Store` interface and `open_store(url)`, which picks the backend."""

from __future__ import annotations

from heartq.config import resolve_url
from heartq.errors import ConfigError
from heartq.store.interface import Store


def redact(url: str) -> str:
    """The URL with any password replaced, safe to print and log."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_store(url: str | None = None) -> Store:
    """A store for `url` (else `HEARTQ_URL`, else `sqlite:///heartq.db`). Opens lazily."""
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
        return PostgresStore(resolved)
    raise ConfigError(
        f"unsupported queue URL {redact(resolved)!r}: use sqlite:///path.db or postgresql://..."
    )


__all__ = ["Store", "open_store", "redact"]
