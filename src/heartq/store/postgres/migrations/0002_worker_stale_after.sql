-- heartq schema v2 (PostgreSQL): each worker records its own staleness threshold
-- (seconds), so a worker is judged stale by its own settings, never by the observer's.
-- NULL (workers of older versions): the observer's threshold applies.
-- Nullable with no default: a catalog-only change, no table rewrite.

ALTER TABLE workers ADD COLUMN IF NOT EXISTS stale_after double precision;
