-- heartq schema v35 (PostgreSQL): a job's fairness key and weight (see the SQLite
-- migration of the same number for what they are for). PostgreSQL's claim does not take
-- keys in turn yet, so its enqueue refuses a job with a key (`fair_key`), in one line,
-- rather than run it first in, first out; the columns are here so that both schemas
-- hold the same jobs. Nullable columns without a default: a catalog-only change, no
-- table rewrite.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS fair_key text COLLATE "C";
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS fair_weight float8;
