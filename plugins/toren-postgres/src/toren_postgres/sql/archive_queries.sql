-- Retention's queries (toren_postgres.archive), procrastinate-style named blocks. {runs},
-- {events}, {tool_manifests} and {archived_runs} are bound to one agent's schema.

-- archivable_runs --
-- Finished runs past their retention that nothing refers to (docs/guides/retention.md, "What
-- is never archived"); oldest end first, a page after (after_at, after_id).
SELECT r.id, r.kind, r.status, r.input, r.output, r.stop_reason, r.error, r.idempotency_key,
       r.created_at, r.updated_at, r.finished_at, r.schedule, r.parent_agent,
       r.parent_run_id::text, r.parent_task, r.child_kind, r.depth, r.agent_version,
       r.agent_human_version
FROM {runs} r
WHERE r.status IN ('completed', 'stopped', 'failed', 'cancelled')
  AND r.finished_at < now() - %(older_than_s)s * interval '1 second'
  AND (%(after_at)s::timestamptz IS NULL
       OR (r.finished_at, r.id) > (%(after_at)s::timestamptz, %(after_id)s::uuid))
  AND NOT EXISTS (SELECT 1 FROM {archived_runs} a WHERE a.id = r.id)
  -- a message would still act on it (a late tick, a child's wake-up of a finished parent)
  AND NOT EXISTS (SELECT 1 FROM toren_control.queue q WHERE q.run_id = r.id)
  -- a worker still holds one of its streams
  AND NOT EXISTS (SELECT 1 FROM toren_control.leases l
                  WHERE l.run_id = r.id AND l.expires_at > now())
  -- someone follows it live (an open event stream of the HTTP API)
  AND NOT EXISTS (SELECT 1 FROM toren_control.watched_runs w
                  WHERE w.run_id = r.id AND w.expires_at > now())
  -- a person is still asked about one of its tool calls
  AND NOT EXISTS (SELECT 1 FROM toren_control.approvals p
                  WHERE p.run_id = r.id AND p.status = 'pending')
  -- toren schedules show reads the latest run of each schedule that is still in agent.yaml
  AND NOT EXISTS (
      SELECT 1 FROM toren_control.schedules s
      JOIN LATERAL (SELECT f.run_id FROM toren_control.schedule_fires f
                    WHERE f.agent = s.agent AND f.schedule = s.name
                    ORDER BY f.slot_at DESC LIMIT 1) latest ON true
      WHERE s.agent = %(agent)s AND s.enabled AND latest.run_id = r.id)
ORDER BY r.finished_at, r.id
LIMIT %(limit)s;

-- export_run --
SELECT id, kind, status, input, output, stop_reason, error, idempotency_key, created_at,
       updated_at, finished_at, schedule, parent_agent, parent_run_id::text, parent_task,
       child_kind, depth, agent_version, agent_human_version
FROM {runs} WHERE id = %(run_id)s;

-- export_events --
-- The order of load_events (queries.sql), so a run reads back in the order it read hot.
SELECT stream, seq, type, data, created_at FROM {events}
WHERE run_id = %(run_id)s
ORDER BY created_at, stream, seq;

-- export_tool_manifests --
SELECT scope, seq, parent_seq, step, epoch, call_id, full_state, entries, removed,
       total_bytes, created_at
FROM {tool_manifests} WHERE run_id = %(run_id)s ORDER BY scope, seq;

-- index_archived_run --
-- Written only if the run is as it was exported: still terminal, with the same number of
-- events. The row lock makes a concurrent cancel or append (which update the row) wait for
-- this short transaction, or this one see their result. sha256, object_bytes and
-- content_bytes bind the object to the run (agent migration 0015): reads refuse any other.
INSERT INTO {archived_runs} (id, kind, status, schedule, created_at, finished_at, location,
                             record, summary, sha256, object_bytes, content_bytes)
SELECT r.id, r.kind, r.status, r.schedule, r.created_at, r.finished_at, %(location)s,
       %(record)s, %(summary)s, %(sha256)s, %(object_bytes)s, %(content_bytes)s
FROM (SELECT * FROM {runs} WHERE id = %(run_id)s
      AND status IN ('completed', 'stopped', 'failed', 'cancelled') FOR UPDATE) r
WHERE (SELECT count(*) FROM {events} e WHERE e.run_id = r.id) = %(events)s
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- purge_events_batch --
-- One small batch of an archived run's events: its own short transaction (autocommit), so
-- live appends to other runs never wait behind a big delete.
DELETE FROM {events}
WHERE (run_id, stream, seq) IN (
    SELECT e.run_id, e.stream, e.seq FROM {events} e
    WHERE e.run_id = %(run_id)s
      AND EXISTS (SELECT 1 FROM {archived_runs} a WHERE a.id = %(run_id)s)
    LIMIT %(batch)s);

-- purge_run --
-- The run's row once its events are gone, and its queue priority and key (control migration
-- 0024's run_flow: a finished run has no message left to give them to).
WITH gone AS (
    DELETE FROM {runs} r
    WHERE r.id = %(run_id)s
      AND EXISTS (SELECT 1 FROM {archived_runs} a WHERE a.id = r.id)
      AND NOT EXISTS (SELECT 1 FROM {events} e WHERE e.run_id = r.id)
    RETURNING r.id
)
DELETE FROM toren_control.run_flow f USING gone WHERE f.run_id = gone.id;

-- unpurged_runs --
SELECT a.id::text FROM {archived_runs} a JOIN {runs} r ON r.id = a.id
ORDER BY a.archived_at LIMIT %(limit)s;

-- archived_run --
SELECT record, location, archived_at, summary, sha256, object_bytes, content_bytes
FROM {archived_runs} WHERE id = %(run_id)s;

-- list_archived_runs --
SELECT record, location, archived_at, summary, sha256, object_bytes, content_bytes
FROM {archived_runs}
WHERE (%(before_at)s::timestamptz IS NULL
       OR (created_at, id) < (%(before_at)s::timestamptz, %(before_id)s::uuid))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- unindex_archived_run --
DELETE FROM {archived_runs} WHERE id = %(run_id)s RETURNING id;

-- clear_hot_run --
-- What a died purge left of the run: its events, then its row (tool manifests go with it).
WITH gone AS (DELETE FROM {events} WHERE run_id = %(run_id)s)
DELETE FROM {runs} WHERE id = %(run_id)s;

-- restore_run --
INSERT INTO {runs} (id, kind, status, input, output, stop_reason, error, idempotency_key,
                    created_at, updated_at, finished_at, schedule, parent_agent, parent_run_id,
                    parent_task, child_kind, depth, agent_version, agent_human_version)
SELECT r.id, r.kind, r.status, r.input, r.output, r.stop_reason, r.error, r.idempotency_key,
       r.created_at, r.updated_at, r.finished_at, r.schedule, r.parent_agent, r.parent_run_id,
       r.parent_task, r.child_kind, r.depth, r.agent_version, r.agent_human_version
FROM jsonb_populate_record(NULL::{runs}, %(row)s) r;

-- restore_events --
INSERT INTO {events} (run_id, stream, seq, type, data, created_at)
SELECT %(run_id)s, e->>'stream', (e->>'seq')::int, e->>'type', e->'data',
       (e->>'created_at')::timestamptz
FROM json_array_elements(%(events)s) AS e;

-- restore_tool_manifests --
INSERT INTO {tool_manifests} (run_id, scope, seq, parent_seq, step, epoch, call_id, full_state,
                              entries, removed, total_bytes, created_at)
SELECT %(run_id)s, m.scope, m.seq, m.parent_seq, m.step, m.epoch, m.call_id, m.full_state,
       m.entries, m.removed, m.total_bytes, m.created_at
FROM jsonb_to_recordset(%(manifests)s) AS m(scope text, seq integer, parent_seq integer,
     step integer, epoch integer, call_id text, full_state boolean, entries jsonb,
     removed jsonb, total_bytes bigint, created_at timestamptz);

-- table_sizes --
SELECT c.relname, greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname IN ('runs', 'events', 'archived_runs')
  AND c.relkind IN ('r', 'p');
