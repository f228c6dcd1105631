-- heartq schema v31 (PostgreSQL): periodic schedules added, changed, paused and removed
-- while workers run (`heartq periodic add|remove|pause|resume`, App.add_schedule and its
-- kin; heartq.runtime_schedules).
-- A runtime schedule is a row of `schedules`, the table whose row per schedule already
-- makes each tick one job across the fleet: `definition` holds what a code schedule says
-- in `@app.periodic` (cron or every, tz, args, catch_up, queue), NULL for a schedule
-- declared in code. Every worker with `periodic` on reads the table each scheduler pass
-- (at least once a second), so a schedule added or changed runs without a restart.
-- `paused` (any schedule, code or runtime): its ticks pass and enqueue nothing.
-- `changed_at` / `changed_by`: the operator's last change (`updated_*` is the last tick's).
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS definition jsonb;
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false;
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS changed_at timestamptz;
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS changed_by text;
