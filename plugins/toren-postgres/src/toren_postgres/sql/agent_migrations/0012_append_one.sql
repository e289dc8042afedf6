-- One append (the worker's durable step) as a function: the append query of queries.sql calls
-- it for an append alone, and append_batch once per append of a group commit's batch, in
-- order, in that statement's transaction, so a batch is one statement instead of one per
-- append: the worker pays one send and one result for the batch.
-- Nothing is written unless the lease is held at this epoch, unexpired by the database clock,
-- and the run is not cancelled; the events' primary key is the compare-and-swap.
-- VOLATILE: each call sees what the calls before it in the batch wrote. PL/pgSQL, not SQL: a
-- session keeps the plan of its query from one batch to the next (a SQL function's body
-- would be planned again in every batch).
CREATE FUNCTION append_one(
    p_hand_limit int, p_hand_visibility_s float8, p_run_id uuid, p_stream text, p_holder text,
    p_epoch int, p_ttl_s float8, p_release boolean, p_agent text, p_first_seq int,
    p_events json, p_messages jsonb, p_ack_id bigint, p_progress_id bigint,
    p_update_run boolean, p_status text, p_set_output boolean, p_output jsonb,
    p_stop_reason text, p_set_error boolean, p_error jsonb, p_finished boolean)
RETURNS TABLE (o_leased bigint, o_appended bigint, o_notified bigint,
               o_agent_version text, o_handed text)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
RETURN QUERY
WITH lease AS (
    UPDATE toren_control.leases
    SET expires_at = CASE WHEN p_release THEN now()
                          ELSE now() + p_ttl_s * interval '1 second' END
    WHERE run_id = p_run_id AND stream = p_stream AND holder = p_holder
      AND epoch = p_epoch AND expires_at > now()
      AND NOT EXISTS (SELECT 1 FROM runs WHERE id = p_run_id AND status = 'cancelled')
    RETURNING run_id
), appended AS (
    INSERT INTO events (run_id, stream, seq, type, data)
    SELECT lease.run_id, p_stream, p_first_seq + e.n::int - 1, e.doc->>'type', e.doc->'data'
    FROM lease, json_array_elements(p_events) WITH ORDINALITY AS e(doc, n)
    RETURNING seq
), enqueued AS (
    -- the first p_hand_limit messages due now go to this worker already claimed (hand-off:
    -- hidden for p_hand_visibility_s, one delivery counted, as a claim leaves them), so it
    -- works them without a claim of its own; their NOTIFY is not sent (not ready to others)
    INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at, attempts,
                                     claimed_by)
    SELECT p_agent, lease.run_id, m.doc->>'kind', m.doc->'payload',
           now() + CASE WHEN handed THEN p_hand_visibility_s
                        ELSE (m.doc->>'delay_s')::float8 END * interval '1 second',
           CASE WHEN handed THEN 1 ELSE 0 END,
           CASE WHEN handed THEN p_holder END
    FROM lease, jsonb_array_elements(p_messages) WITH ORDINALITY AS m(doc, n),
         LATERAL (SELECT m.n <= p_hand_limit AND (m.doc->>'delay_s')::float8 <= 0
                  AS handed) AS h
    RETURNING id, kind, payload, claimed_by
), run_update AS (
    UPDATE runs r SET
        status = COALESCE(p_status, r.status),
        output = CASE WHEN p_set_output THEN p_output ELSE r.output END,
        stop_reason = COALESCE(p_stop_reason, r.stop_reason),
        error = CASE WHEN p_set_error THEN p_error ELSE r.error END,
        finished_at = CASE WHEN p_finished THEN now() ELSE r.finished_at END,
        updated_at = now()
    FROM lease WHERE r.id = lease.run_id AND p_update_run
      -- re-checked against a concurrently committed cancel: a finished run stays finished
      AND r.status NOT IN ('completed', 'stopped', 'failed', 'cancelled')
), acked AS (
    DELETE FROM toren_control.queue q USING lease
    WHERE q.id = p_ack_id AND q.claimed_by = p_holder
), progressed AS (
    -- this delivery made progress: earlier deliveries that died (next to a message that
    -- kills its worker, say) no longer count towards dead-lettering it
    UPDATE toren_control.queue q SET attempts = 1 FROM lease
    WHERE q.id = p_progress_id AND q.claimed_by = p_holder AND q.attempts > 1
), notified AS (
    -- wakes the live event streams of this run, if any (see watch_runs); NOTIFY is
    -- transactional, so it is delivered when, and only if, this statement commits
    SELECT pg_notify('toren_appends', lease.run_id::text) FROM lease
    WHERE EXISTS (SELECT 1 FROM toren_control.watched_runs w
                  WHERE w.run_id = lease.run_id AND w.expires_at > now())
)
SELECT (SELECT count(*) FROM lease), (SELECT count(*) FROM appended),
       (SELECT count(*) FROM notified),
       -- the run's agent version as of this append: the worker's version checks between
       -- steps and at a task message read it here instead of in a statement of their own
       (SELECT agent_version FROM runs WHERE id = p_run_id),
       (SELECT json_agg(json_build_array(id, kind, payload) ORDER BY id) FROM enqueued
        WHERE claimed_by IS NOT NULL)::text;
END $$;
