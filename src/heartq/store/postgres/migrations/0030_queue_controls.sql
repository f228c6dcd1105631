-- heartq schema v30 (PostgreSQL): queues an operator controls while workers run
-- (`heartq queues pause|resume|scale`, App.pause_queue and its kin).
-- One row per queue ever controlled, written by an operator, read by every worker of the
-- queue once a second (heartq.worker.controls): a paused queue's jobs keep their place
-- and none starts; `concurrency` caps how many of the queue's jobs each worker runs at
-- once (NULL: its own concurrency). Stored, so a worker started later obeys it too.
-- A row is never deleted by heartq: a resumed, unscaled queue keeps a row that says so.
CREATE TABLE IF NOT EXISTS queue_controls (
    queue text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false,
    concurrency integer CHECK (concurrency IS NULL OR concurrency >= 0),
    changed_at timestamptz NOT NULL,
    changed_by text NOT NULL
);
