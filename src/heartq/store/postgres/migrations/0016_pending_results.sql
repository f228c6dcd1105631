-- heartq schema v16 (PostgreSQL): results still to come, found by the reaper.
-- A job its task completed inside ctx.transaction() is succeeded at that commit and
-- carries result_pending until its worker saves what the task returned. If that worker
-- dies (or freezes) first, a reaper gives the result up once the committing attempt's
-- lease ran out (GIVE_UP_RESULTS), so that "no result" is final for every reader (a
-- group's callback, App.result) and a save that comes later is refused. This partial
-- index holds only those few jobs, so the reaper's look costs nothing at any backlog.
CREATE INDEX jobs_pending_result_idx ON jobs (lease_expires_at) WHERE result_pending;
