-- Retention (docs/guides/retention.md): the index of this agent's archived runs. A run whose
-- retention has passed is written whole to the archive (TOREN_ARCHIVE: a directory or an S3
-- prefix), indexed here, and then deleted from runs and events in small batches. Reads of an
-- archived run find it here and read it back from location.
CREATE TABLE archived_runs (
    id          uuid PRIMARY KEY,
    kind        text NOT NULL,
    status      text NOT NULL,
    schedule    text,
    created_at  timestamptz,
    finished_at timestamptz,
    archived_at timestamptz NOT NULL DEFAULT now(),
    -- where the object is: file:///... or s3://bucket/key
    location    text NOT NULL,
    -- the run's row as it was (toren.core.retention.run_row), so the run reads the same
    record      jsonb NOT NULL,
    -- events, model and tool calls, tokens, cost (toren.core.retention.archive_summary)
    summary     jsonb NOT NULL
);
-- toren jobs list --archived: newest first, a page at a time.
CREATE INDEX archived_runs_created_idx ON archived_runs (created_at DESC, id);

-- The archive pass picks runs by when they ended: oldest first, terminal only.
CREATE INDEX runs_finished_idx ON runs (finished_at, id)
    WHERE status IN ('completed', 'stopped', 'failed', 'cancelled');
