-- heartq schema v1 (PostgreSQL). Runs with search_path set to the heartq schema.
-- JSON columns are `json` (not jsonb) so arguments round-trip byte for byte.

CREATE TABLE jobs (
    id                text PRIMARY KEY,
    task              text NOT NULL,
    queue             text NOT NULL,
    args              json NOT NULL,
    priority          integer NOT NULL DEFAULT 0,
    status            text NOT NULL
                      CHECK (status IN ('queued', 'running', 'succeeded', 'dead', 'cancelled')),
    run_at            timestamptz NOT NULL,
    attempts          integer NOT NULL DEFAULT 0,
    max_retries       integer NOT NULL,
    retry_backoff     double precision NOT NULL,
    retry_backoff_max double precision NOT NULL,
    worker_id         text,
    execution_id      bigint NOT NULL DEFAULT 0,
    lease_expires_at  timestamptz,
    heartbeat_at      timestamptz,
    progress_value    double precision,
    progress_stage    text,
    progress_message  text,
    checkpoint        json,
    result            json,
    error             text,
    dead_reason       text,
    cancel_requested  boolean NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    updated_at        timestamptz NOT NULL
);

CREATE INDEX jobs_claim_idx ON jobs (queue, priority DESC, run_at, id) WHERE status = 'queued';
CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX jobs_worker_idx ON jobs (worker_id) WHERE status = 'running';
CREATE INDEX jobs_status_idx ON jobs (status, queue, created_at);
CREATE INDEX jobs_finished_idx ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE executions (
    job_id       text NOT NULL,
    execution_id bigint NOT NULL,
    worker_id    text,
    started_at   timestamptz NOT NULL,
    ended_at     timestamptz,
    outcome      text CHECK (outcome IS NULL OR outcome IN
                 ('succeeded', 'failed', 'crashed', 'timed_out', 'cancelled', 'released')),
    error        text,
    crash        json,
    PRIMARY KEY (job_id, execution_id)
);

CREATE TABLE workers (
    id                text PRIMARY KEY,
    name              text,
    hostname          text NOT NULL,
    pid               integer NOT NULL,
    queues            json NOT NULL,
    concurrency       integer NOT NULL,
    status            text NOT NULL CHECK (status IN ('active', 'stopped', 'inactive')),
    started_at        timestamptz NOT NULL,
    last_heartbeat_at timestamptz NOT NULL,
    stopped_at        timestamptz
);

CREATE INDEX workers_status_idx ON workers (status, last_heartbeat_at);
CREATE INDEX workers_name_idx ON workers (name) WHERE name IS NOT NULL;
