"""The schema's own records: the deployment's id, and the migrations applied."""

from __future__ import annotations

# The id migration 0009 made for this database (the NATS transport's names).
DEPLOYMENT_ID = "SELECT id FROM heartq_deployment"

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS heartq_schema_migrations
(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)
"""

APPLIED_VERSIONS = "SELECT version FROM heartq_schema_migrations"

MIGRATIONS_PRESENT = """
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'heartq_schema_migrations'
"""

RECORD_MIGRATION = "INSERT INTO heartq_schema_migrations VALUES (:version, :now)"

# A version recorded under SQLite's old numbering, given the number of the one line
# (`store/sqlite/schema.py`, `OLD_NUMBERS`); its row keeps the time it was applied.
RENUMBER_MIGRATION = "UPDATE heartq_schema_migrations SET version = :new WHERE version = :old"
