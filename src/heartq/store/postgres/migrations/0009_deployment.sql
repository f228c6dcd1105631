-- heartq schema v9 (PostgreSQL): the deployment id.
--
-- One row, made here and never changed: 16 random hex digits that name this queue (this
-- schema: two schemas of one database are two deployments) to the outside world. The
-- NATS transport derives its stream, subjects and consumers from it (docs/NATS.md,
-- "Names"), so two deployments on one NATS server never share them, whatever their
-- settings. md5 of random() and the clock rather than gen_random_uuid(): any version.
-- A dump restored elsewhere keeps the id (it is the same queue, copied).
CREATE TABLE IF NOT EXISTS deployment (
    id         text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO deployment (id)
SELECT left(md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text), 16)
WHERE NOT EXISTS (SELECT 1 FROM deployment);
