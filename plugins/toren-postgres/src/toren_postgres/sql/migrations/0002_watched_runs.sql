-- Runs someone follows live (an open event stream of the HTTP API). Appends to these runs, and
-- only these, NOTIFY toren_appends with the run id: a NOTIFY wakes every listening backend of
-- the database (Postgres 16 and older), so notifying on every append would cost each worker's
-- queue listener a transaction per append. watcher is one server process; it renews its rows
-- while its streams are open, and rows of a process that died expire.
CREATE TABLE toren_control.watched_runs (
    run_id     uuid NOT NULL,
    watcher    text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, watcher)
);
