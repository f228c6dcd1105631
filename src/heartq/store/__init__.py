"""Storage: the `Store` interface and `open_store(url)`, which picks the backend."""

from __future__ import annotations

from heartq.config import resolve_url
from heartq.errors import ConfigError
from heartq.store.interface import Store
from heartq.store.redaction import SECRET_PARAMETERS, redact, redact_text


def open_store(
    url: str | None = None, *, pool_size: int | None = None, reading: bool = False
) -> Store:
    """A store for `url` (else `HEARTQ_URL`, else `sqlite:///heartq.db`). Opens lazily.
    `pool_size`: PostgreSQL's pooled connections per process (SQLite has no pool).
    `reading`: only reads are asked of it (a SQLite file it may not write is read)."""
    resolved = resolve_url(url)
    scheme = resolved.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from heartq.store.sqlite import SQLiteStore

        return SQLiteStore(resolved, reading=reading)
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


__all__ = ["SECRET_PARAMETERS", "Store", "open_store", "redact", "redact_text"]
