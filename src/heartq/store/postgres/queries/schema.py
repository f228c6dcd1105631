"""The schema's own records: the deployment's id, and the migrations applied."""

from __future__ import annotations

from heartq.store.postgres.queries.common import LOCK_NAMESPACE, MIGRATION_LOCK

# The id migration 0009 made for this schema (the NATS transport's names).
DEPLOYMENT_ID = "SELECT id FROM deployment"

MIGRATIONS_PRESENT = (
    "SELECT to_regclass(format('%%I.schema_migrations', %(schema)s::text)) IS NOT NULL AS present"
)

MIGRATION_START = f"SELECT pg_advisory_xact_lock({LOCK_NAMESPACE}, {MIGRATION_LOCK})"

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations
(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())
"""

APPLIED_VERSIONS = "SELECT version FROM schema_migrations"

RECORD_MIGRATION = "INSERT INTO schema_migrations (version) VALUES (%(version)s)"
