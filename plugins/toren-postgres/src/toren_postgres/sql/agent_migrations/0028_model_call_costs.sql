-- The costs report (GET /costs, the console's Costs page, issue 43): the model calls completed
-- in a window, found by when they were appended without reading the rest of the log; and the
-- forks' TaskForked markers, which say which of a fork's calls were copied from its source
-- (those before the marker: the source paid for them).
CREATE INDEX events_model_calls_idx ON events (created_at) WHERE type = 'ModelCallCompleted';
CREATE INDEX events_task_forked_idx ON events (run_id, stream, seq) WHERE type = 'TaskForked';
