-- heartq schema v9 (SQLite): the deployment id.
-- Runs once, in the migration's BEGIN IMMEDIATE transaction with its version row.
--
-- One row, made here and never changed: 16 random hex digits that name this queue's
-- database to the outside world. The NATS transport derives its stream, subjects and
-- consumers from it (docs/NATS.md, "Names"), so two deployments on one NATS server never
-- share them, whatever their settings. A copy of the file keeps the id (it is the same
-- queue, copied).
CREATE TABLE heartq_deployment (
    id         TEXT NOT NULL PRIMARY KEY,
    created_at REAL NOT NULL
);
INSERT INTO heartq_deployment (id, created_at)
VALUES (lower(hex(randomblob(8))), (julianday('now') - 2440587.5) * 86400.0);
