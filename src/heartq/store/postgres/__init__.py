"""The PostgreSQL backend (psycopg 3 and psycopg_pool)."""

from heartq.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
