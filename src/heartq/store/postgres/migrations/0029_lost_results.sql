-- heartq schema v29 (PostgreSQL): a result that was lost says so.
-- A job its task completed inside ctx.transaction() is succeeded at that commit; what the
-- task returns after is saved a moment later (result_pending, v16). When that save never
-- comes (its worker died, froze or lost the database in between: GIVE_UP_RESULTS), or
-- the task's code failed after the commit, the job keeps no result. result_lost holds
-- why, so that a reader tells a lost result from a task's own None: App.result() raises
-- heartq.ResultLost and a callback receives a heartq.LostResult in its place
-- (docs/design/pipelines.md, "Effects exactly once"). NULL for every other job: adding the column
-- rewrites nothing, and no index names it.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS result_lost text;
