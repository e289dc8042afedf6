-- Tool waits (issue 39, toren.wait_for_signal): a signal also wakes every task of the run with
-- an open tool wait of its name (a ToolWaitStarted with no ToolWaitEnded of the same call and
-- wait), by queueing that task's message in the transaction that records the signal.
--
-- send_signal is the statement of the send_signal query (control of migration 0017) as a
-- function of plain statements, because a function's statements each take a fresh snapshot:
-- the run's row is locked FOR SHARE first, and the look for open waits comes after it. A task
-- that starts a wait writes the run's row in the same append; so either its append waited for
-- this send (and the task's read of the signals, after its commit, sees this signal), or this
-- send waited for the append and its later statements see the wait. One round trip, as before.
CREATE INDEX IF NOT EXISTS events_tool_waits_idx ON events (run_id, stream)
    WHERE type IN ('ToolWaitStarted', 'ToolWaitEnded');

CREATE OR REPLACE FUNCTION send_signal(p_run_id uuid, p_agent text, p_type text, p_data json,
                                       p_key text, p_messages jsonb)
RETURNS TABLE (o_status text, o_appended int, o_seen int)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    v_status text;
    v_seen int;
    v_seq int;
BEGIN
    -- FOR SHARE orders this against the append that finishes the run (it updates the row): a
    -- finished run takes no signal, and a run never finishes with a signal committed after
    -- its last tick looked
    SELECT r.status INTO v_status FROM runs r WHERE r.id = p_run_id FOR SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::text, NULL::int, NULL::int;
        RETURN;
    END IF;
    -- the key's check and the append are one statement, so one snapshot: a signal with the
    -- same key committed before it is seen; one not yet committed took the number this one
    -- picks, so the primary key makes this fail (unique_violation) and the caller's retry
    -- sees it. Concurrent senders without a key are numbered apart the same way.
    WITH seen AS (
        SELECT e.seq FROM events e
        WHERE p_key IS NOT NULL AND e.run_id = p_run_id AND e.stream = 'signals'
          AND e.data->>'idempotency_key' = p_key
        LIMIT 1
    ), appended AS (
        INSERT INTO events (run_id, stream, seq, type, data)
        SELECT p_run_id, 'signals',
               (SELECT COALESCE(max(e.seq), 0) + 1 FROM events e
                WHERE e.run_id = p_run_id AND e.stream = 'signals'),
               p_type, p_data
        WHERE v_status NOT IN ('completed', 'stopped', 'failed', 'cancelled')
          AND NOT EXISTS (SELECT 1 FROM seen)
        RETURNING seq
    )
    SELECT (SELECT seq FROM seen), (SELECT seq FROM appended) INTO v_seen, v_seq;
    IF v_seq IS NULL THEN  -- a repeated key (its signal's number), or a finished run
        RETURN QUERY SELECT v_status, NULL::int, v_seen;
        RETURN;
    END IF;
    INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at)
    SELECT p_agent, p_run_id, m->>'kind', m->'payload',
           now() + (m->>'delay_s')::float8 * interval '1 second'
    FROM jsonb_array_elements(p_messages) AS m;
    -- one message per task with an open wait of this name (a task started long ago: its
    -- message needs only the task's id)
    INSERT INTO toren_control.queue (agent, run_id, kind, payload)
    SELECT p_agent, p_run_id, 'task',
           jsonb_build_object('task_id', substr(w.stream, 6), 'subagent', NULL,
                              'input', NULL, 'key', w.stream)
    FROM (SELECT DISTINCT s.stream FROM events s
          WHERE s.run_id = p_run_id AND s.type = 'ToolWaitStarted'
            AND s.data->>'name' = p_data->>'name'
            AND NOT EXISTS (SELECT 1 FROM events x
                            WHERE x.run_id = p_run_id AND x.stream = s.stream
                              AND x.type = 'ToolWaitEnded'
                              AND x.data->>'call_id' = s.data->>'call_id'
                              AND x.data->>'wait' = s.data->>'wait')) AS w;
    IF EXISTS (SELECT 1 FROM toren_control.watched_runs w
               WHERE w.run_id = p_run_id AND w.expires_at > now()) THEN
        PERFORM pg_notify('toren_appends', p_run_id::text);
    END IF;
    RETURN QUERY SELECT v_status, v_seq, NULL::int;
END $$;
