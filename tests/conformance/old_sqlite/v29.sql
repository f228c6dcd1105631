-- A SQLite queue at schema v29 of the old numbering (make.py).
BEGIN TRANSACTION;
CREATE TABLE heartq_deployment (
    id         TEXT NOT NULL PRIMARY KEY,
    created_at REAL NOT NULL
);
INSERT INTO "heartq_deployment" VALUES('14ecd0ce3a23d298',1.79577233795601725577e+09);
CREATE TABLE "heartq_ended_executions" (
    job_id       TEXT NOT NULL,
    execution_id INTEGER NOT NULL,
    worker_id    TEXT,
    started_at   REAL NOT NULL,
    ended_at     REAL,
    outcome      TEXT CHECK (outcome IS NULL OR outcome IN
                 ('succeeded', 'failed', 'crashed', 'interrupted', 'timed_out', 'cancelled',
                  'released')),
    error        TEXT,
    crash        TEXT, rate_key TEXT,
    PRIMARY KEY (job_id, execution_id)
) WITHOUT ROWID;
INSERT INTO "heartq_ended_executions" VALUES('00000000-0000-7000-8000-000000000001',1,'w1',1.79577233896201205257e+09,1.79577233996201205256e+09,'failed','ValueError: boom',NULL,NULL);
CREATE TABLE heartq_job_dependencies (
    job_id     TEXT NOT NULL,
    depends_on TEXT NOT NULL,
    position   INTEGER NOT NULL,
    ended      TEXT, result_as TEXT, holds INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, depends_on)
) WITHOUT ROWID;
INSERT INTO "heartq_job_dependencies" VALUES('00000000-0000-7000-8000-000000000006','00000000-0000-7000-8000-000000000004',0,NULL,NULL,0);
CREATE TABLE "heartq_jobs" (
    id                    TEXT PRIMARY KEY,
    task                  TEXT NOT NULL,
    queue                 TEXT NOT NULL,
    args                  TEXT NOT NULL,
    priority              INTEGER NOT NULL DEFAULT 0,
    status                TEXT NOT NULL
                          CHECK (status IN ('waiting', 'blocked', 'queued', 'running',
                                            'succeeded', 'dead', 'cancelled')),
    run_at                REAL NOT NULL,
    attempts              INTEGER NOT NULL DEFAULT 0,
    max_retries           INTEGER NOT NULL,
    retry_backoff         REAL NOT NULL,
    retry_backoff_max     REAL NOT NULL,
    worker_id             TEXT,
    execution_id          INTEGER NOT NULL DEFAULT 0,
    lease_expires_at      REAL,
    heartbeat_at          REAL,
    progress_value        REAL,
    progress_stage        TEXT,
    progress_message      TEXT,
    checkpoint            TEXT,
    result                TEXT,
    error                 TEXT,
    dead_reason           TEXT,
    cancel_requested      INTEGER NOT NULL DEFAULT 0,
    created_at            REAL NOT NULL,
    started_at            REAL,
    finished_at           REAL,
    updated_at            REAL NOT NULL,
    chosen                INTEGER NOT NULL DEFAULT 15,
    awaited               INTEGER NOT NULL DEFAULT 0,
    cancelled_by          TEXT,
    result_pending        INTEGER NOT NULL DEFAULT 0,
    unique_key            TEXT,
    schedule              TEXT,
    concurrency_key       TEXT,
    concurrency_limit     INTEGER,
    meta                  TEXT,
    has_dependents        INTEGER NOT NULL DEFAULT 0,
    waiting_for           INTEGER NOT NULL DEFAULT 0,
    on_dependency_failure TEXT,
    dependency_results    INTEGER NOT NULL DEFAULT 0,
    rate_key              TEXT,
    rate_limit            INTEGER,
    rate_period           REAL,
    claimed_ahead         INTEGER NOT NULL DEFAULT 0,
    holders               INTEGER NOT NULL DEFAULT 0
, detached_until REAL, result_lost TEXT);
INSERT INTO "heartq_jobs" VALUES('00000000-0000-7000-8000-000000000005','succeeds','default','{"n": 1}',3,'succeeded',1.79577233796201205257e+09,1,3,5.0,3600.0,'w1',1,NULL,1.79577233896201205257e+09,NULL,NULL,NULL,NULL,'"forty-two"',NULL,NULL,0,1.79577233796201205257e+09,1.79577233896201205257e+09,1.79577233996201205256e+09,1.79577233996201205256e+09,15,0,NULL,0,NULL,NULL,NULL,NULL,NULL,0,0,NULL,0,NULL,NULL,NULL,0,0,NULL,NULL);
INSERT INTO "heartq_jobs" VALUES('00000000-0000-7000-8000-000000000001','fails','default','{"n": 2}',2,'dead',1.79577233796201205257e+09,1,0,5.0,3600.0,'w1',1,NULL,1.79577233896201205257e+09,NULL,NULL,NULL,NULL,NULL,'ValueError: boom','permanent failure: ValueError: boom',0,1.79577233796201205257e+09,1.79577233896201205257e+09,1.79577233996201205256e+09,1.79577233996201205256e+09,15,0,NULL,0,NULL,NULL,NULL,NULL,NULL,0,0,NULL,0,NULL,NULL,NULL,0,0,NULL,NULL);
INSERT INTO "heartq_jobs" VALUES('00000000-0000-7000-8000-000000000004','runs','default','{"n": 3}',1,'running',1.79577233796201205257e+09,1,3,5.0,3600.0,'w1',1,1.79577236896201205247e+09,1.79577233896201205257e+09,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0,1.79577233796201205257e+09,1.79577233896201205257e+09,NULL,1.79577233896201205257e+09,15,0,NULL,0,NULL,NULL,NULL,NULL,NULL,1,0,NULL,0,NULL,NULL,NULL,0,0,1.79577236896201205247e+09,NULL);
INSERT INTO "heartq_jobs" VALUES('00000000-0000-7000-8000-000000000006','waits','default','{"n": 4}',0,'waiting',1.79577233796201205257e+09,0,3,5.0,3600.0,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0,1.79577233796201205257e+09,NULL,NULL,1.79577233796201205257e+09,15,0,NULL,0,NULL,NULL,NULL,NULL,NULL,0,1,'block',0,NULL,NULL,NULL,0,0,NULL,NULL);
INSERT INTO "heartq_jobs" VALUES('00000000-0000-7000-8000-000000000002','later','default','{"n": 5}',0,'queued',4.1024448e+09,0,3,5.0,3600.0,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0,1.79577233796201205257e+09,NULL,NULL,1.79577233796201205257e+09,15,0,NULL,0,'once',NULL,NULL,NULL,NULL,0,0,NULL,0,NULL,NULL,NULL,0,0,NULL,NULL);
INSERT INTO "heartq_jobs" VALUES('00000000-0000-7000-8000-000000000003','now','default','{"n": 6}',0,'queued',1.79577234096201205247e+09,0,3,5.0,3600.0,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0,1.79577234096201205247e+09,NULL,NULL,1.79577234096201205247e+09,15,0,NULL,0,NULL,NULL,NULL,NULL,NULL,0,0,NULL,0,NULL,NULL,NULL,0,0,NULL,NULL);
CREATE TABLE heartq_pruned_successes (
    id TEXT PRIMARY KEY
) WITHOUT ROWID;
CREATE TABLE heartq_schedules (
    name         TEXT PRIMARY KEY,
    task         TEXT NOT NULL,
    spec         TEXT NOT NULL,
    last_tick    REAL,
    next_tick    REAL,
    last_job_id  TEXT,
    updated_at   REAL NOT NULL,
    updated_by   TEXT
);
CREATE TABLE heartq_schema_migrations
(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL);
INSERT INTO "heartq_schema_migrations" VALUES(1,1.79577233795400571826e+09);
INSERT INTO "heartq_schema_migrations" VALUES(2,1.79577233795400571826e+09);
INSERT INTO "heartq_schema_migrations" VALUES(3,1.79577233795400571826e+09);
INSERT INTO "heartq_schema_migrations" VALUES(4,1.79577233795400571826e+09);
INSERT INTO "heartq_schema_migrations" VALUES(5,1.79577233795501136782e+09);
INSERT INTO "heartq_schema_migrations" VALUES(6,1.79577233795501136782e+09);
INSERT INTO "heartq_schema_migrations" VALUES(7,1.79577233795501136782e+09);
INSERT INTO "heartq_schema_migrations" VALUES(8,1.79577233795601725577e+09);
INSERT INTO "heartq_schema_migrations" VALUES(9,1.79577233795601725577e+09);
INSERT INTO "heartq_schema_migrations" VALUES(10,1.79577233795601725577e+09);
INSERT INTO "heartq_schema_migrations" VALUES(11,1.79577233795601725577e+09);
INSERT INTO "heartq_schema_migrations" VALUES(13,1.79577233795698285099e+09);
INSERT INTO "heartq_schema_migrations" VALUES(14,1.79577233795798873895e+09);
INSERT INTO "heartq_schema_migrations" VALUES(16,1.79577233795798873895e+09);
INSERT INTO "heartq_schema_migrations" VALUES(17,1.79577233795798873895e+09);
INSERT INTO "heartq_schema_migrations" VALUES(18,1.79577233795798873895e+09);
INSERT INTO "heartq_schema_migrations" VALUES(20,1.7957723379589943885e+09);
INSERT INTO "heartq_schema_migrations" VALUES(21,1.7957723379589943885e+09);
INSERT INTO "heartq_schema_migrations" VALUES(22,1.79577233796100616458e+09);
INSERT INTO "heartq_schema_migrations" VALUES(23,1.79577233796100616458e+09);
INSERT INTO "heartq_schema_migrations" VALUES(24,1.79577233796100616458e+09);
INSERT INTO "heartq_schema_migrations" VALUES(29,1.79577233796100616458e+09);
CREATE TABLE heartq_tasks (
    name              TEXT PRIMARY KEY,
    queue             TEXT NOT NULL,
    priority          INTEGER NOT NULL,
    max_retries       INTEGER NOT NULL,
    retry_backoff     REAL NOT NULL,
    retry_backoff_max REAL NOT NULL,
    timeout           REAL,
    heartbeat_timeout REAL,
    declared_at       REAL NOT NULL,
    declared_by       TEXT
, parameters TEXT, rate_limit TEXT, rate_key TEXT, retry_rules TEXT);
CREATE TABLE heartq_workers (
    id                TEXT PRIMARY KEY,
    name              TEXT,
    hostname          TEXT NOT NULL,
    pid               INTEGER NOT NULL,
    queues            TEXT NOT NULL,
    concurrency       INTEGER NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('active', 'stopped', 'inactive')),
    started_at        REAL NOT NULL,
    last_heartbeat_at REAL NOT NULL,
    stopped_at        REAL
, stale_after REAL, contact_since REAL, abandoned INTEGER NOT NULL DEFAULT 0, lease_expires_at REAL);
INSERT INTO "heartq_workers" VALUES('w1','old-worker','old-host',4242,'["default"]',4,'active',1.79577233796201205257e+09,1.79577233796201205257e+09,NULL,NULL,1.79577233796201205257e+09,0,NULL);
CREATE INDEX heartq_workers_status_idx ON heartq_workers (status, last_heartbeat_at);
CREATE INDEX heartq_workers_name_idx ON heartq_workers (name) WHERE name IS NOT NULL;
CREATE INDEX heartq_job_dependencies_depends_on_idx
    ON heartq_job_dependencies (depends_on);
CREATE INDEX heartq_executions_rate_idx
    ON "heartq_ended_executions" (rate_key, started_at) WHERE rate_key IS NOT NULL;
CREATE INDEX heartq_jobs_key_running_idx ON heartq_jobs (concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
CREATE INDEX heartq_jobs_worker_idx ON heartq_jobs (worker_id) WHERE status = 'running';
CREATE INDEX heartq_jobs_finished_idx
    ON heartq_jobs (status, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX heartq_jobs_dead_idx ON heartq_jobs (queue, created_at) WHERE status = 'dead';
CREATE UNIQUE INDEX heartq_jobs_unique_live_idx ON heartq_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX heartq_jobs_unique_key_idx ON heartq_jobs (unique_key, finished_at)
    WHERE unique_key IS NOT NULL;
CREATE INDEX heartq_jobs_waiting_idx ON heartq_jobs (queue) WHERE status = 'waiting';
CREATE INDEX heartq_jobs_claim_idx ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NULL AND rate_key IS NULL;
CREATE INDEX heartq_jobs_keyed_claim_idx ON heartq_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'queued' AND concurrency_key IS NOT NULL AND rate_key IS NULL;
CREATE INDEX heartq_jobs_rated_claim_idx
    ON heartq_jobs (rate_key, priority DESC, run_at, id)
    WHERE status = 'queued' AND rate_key IS NOT NULL;
CREATE INDEX heartq_jobs_pending_result_idx ON heartq_jobs (lease_expires_at)
    WHERE result_pending;
CREATE INDEX heartq_jobs_running_rate_idx ON heartq_jobs (rate_key, started_at)
    WHERE status = 'running' AND rate_key IS NOT NULL;
CREATE VIEW heartq_executions AS
SELECT job_id, execution_id, worker_id, started_at, ended_at, outcome, error, crash, rate_key
FROM heartq_ended_executions
UNION ALL
SELECT id, execution_id, worker_id, started_at, NULL, NULL, NULL, NULL, rate_key
FROM heartq_jobs WHERE status = 'running'
UNION ALL
SELECT j.id, j.execution_id, j.worker_id, j.started_at, j.finished_at, 'succeeded', NULL, NULL,
       j.rate_key
FROM heartq_jobs AS j
WHERE j.status = 'succeeded' AND NOT EXISTS (
    SELECT 1 FROM heartq_ended_executions AS e
    WHERE e.job_id = j.id AND e.execution_id = j.execution_id);
CREATE INDEX heartq_workers_lease_idx ON heartq_workers (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
CREATE INDEX heartq_jobs_detached_idx ON heartq_jobs (detached_until)
    WHERE status = 'running' AND detached_until IS NOT NULL;
COMMIT;
