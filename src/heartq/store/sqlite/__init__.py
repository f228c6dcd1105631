"""The SQLite backend (standard library `sqlite3`)."""

from heartq.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
