-- One agent's schema (agent_<name>): its runs and their event log.
-- Applied with search_path set to that schema, so names here are unqualified.

CREATE TABLE runs (
    id              uuid PRIMARY KEY,
    status          text NOT NULL DEFAULT 'queued',
    input           jsonb NOT NULL,
    output          jsonb,
    stop_reason     text,
    error           jsonb,
    idempotency_key text UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX runs_status_created_idx ON runs (status, created_at DESC);
CREATE INDEX runs_created_idx ON runs (created_at DESC, id);

-- The event log. The primary key is the compare-and-swap: two writers can never both
-- append sequence number N to the same stream of the same run. data is json, not jsonb:
-- the log is written once and read whole (a resume reads every event of a stream), and
-- json is stored and returned as written, without a conversion each way.
CREATE TABLE events (
    run_id     uuid NOT NULL,
    stream     text NOT NULL,
    seq        integer NOT NULL,
    type       text NOT NULL,
    data       json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, stream, seq)
);

-- A resume reads a task stream from its latest checkpoint on.
CREATE INDEX events_checkpoint_idx ON events (run_id, stream, seq) WHERE type = 'TaskCheckpoint';

-- The orchestrator reads the outcome of every finished task of a run on each tick.
CREATE INDEX events_task_finished_idx ON events (run_id) WHERE type = 'TaskFinished';
