-- append_one (migration 0012) as a sequence of plain statements instead of one statement of
-- seven parts: the same writes, under the same conditions, with the same answer; what an
-- append does not need is not run at all (no message to send, no run row to update, no
-- message to acknowledge or mark as progressing: most appends). Postgres starts and ends an
-- executor for every part of a statement whether or not it has rows to write, so the one
-- statement cost about the same for a bare append of two events as for one that did
-- everything: measured as the Postgres backend's CPU per append (/proc/<pid>/schedstat) in
-- batches of 8 of two events each, 300-406 us before and 224-264 us after, three rounds each
-- alternating on one connection (bench/README.md, "The append's server side").
--
-- Nothing is written unless the lease is held at this epoch, unexpired by the database clock,
-- and the run is not cancelled; the events' primary key is the compare-and-swap (a unique
-- violation aborts the caller's transaction, the whole batch of a group commit). The run's
-- agent version is read first, as the single statement read it in its snapshot: before this
-- append's own events (whose trigger may set it) were written.
-- VOLATILE: each statement sees what the calls before it in the batch, and the statements
-- before it here, wrote. PL/pgSQL keeps each statement's plan for the session.
CREATE OR REPLACE FUNCTION append_one(
    p_hand_limit int, p_hand_visibility_s float8, p_run_id uuid, p_stream text, p_holder text,
    p_epoch int, p_ttl_s float8, p_release boolean, p_agent text, p_first_seq int,
    p_events json, p_messages jsonb, p_ack_id bigint, p_progress_id bigint,
    p_update_run boolean, p_status text, p_set_output boolean, p_output jsonb,
    p_stop_reason text, p_set_error boolean, p_error jsonb, p_finished boolean)
RETURNS TABLE (o_leased bigint, o_appended bigint, o_notified bigint,
               o_agent_version text, o_handed text)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    v_agent_version text;
    v_appended bigint;
    v_notified bigint := 0;
    v_handed text;
BEGIN
    -- the run's agent version as of this append: the worker's version checks between steps
    -- and at a task message read it here instead of in a statement of their own
    SELECT r.agent_version INTO v_agent_version FROM runs r WHERE r.id = p_run_id;
    UPDATE toren_control.leases l
    SET expires_at = CASE WHEN p_release THEN now()
                          ELSE now() + p_ttl_s * interval '1 second' END
    WHERE l.run_id = p_run_id AND l.stream = p_stream AND l.holder = p_holder
      AND l.epoch = p_epoch AND l.expires_at > now()
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = p_run_id AND r.status = 'cancelled');
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint, v_agent_version, NULL::text;
        RETURN;
    END IF;
    INSERT INTO events (run_id, stream, seq, type, data)
    SELECT p_run_id, p_stream, p_first_seq + e.n::int - 1, e.doc->>'type', e.doc->'data'
    FROM json_array_elements(p_events) WITH ORDINALITY AS e(doc, n);
    GET DIAGNOSTICS v_appended = ROW_COUNT;
    IF jsonb_array_length(p_messages) > 0 THEN
        -- the first p_hand_limit messages due now go to this worker already claimed (hand-off:
        -- hidden for p_hand_visibility_s, one delivery counted, as a claim leaves them), so it
        -- works them without a claim of its own; their NOTIFY is not sent (not ready to others)
        WITH enqueued AS (
            INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at,
                                             attempts, claimed_by)
            SELECT p_agent, p_run_id, m.doc->>'kind', m.doc->'payload',
                   now() + CASE WHEN h.handed THEN p_hand_visibility_s
                                ELSE (m.doc->>'delay_s')::float8 END * interval '1 second',
                   CASE WHEN h.handed THEN 1 ELSE 0 END,
                   CASE WHEN h.handed THEN p_holder END
            FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS m(doc, n),
                 LATERAL (SELECT m.n <= p_hand_limit AND (m.doc->>'delay_s')::float8 <= 0
                          AS handed) AS h
            RETURNING id, kind, payload, claimed_by
        )
        SELECT json_agg(json_build_array(q.id, q.kind, q.payload) ORDER BY q.id)::text
        INTO v_handed FROM enqueued q WHERE q.claimed_by IS NOT NULL;
    END IF;
    IF p_update_run THEN
        UPDATE runs r SET
            status = COALESCE(p_status, r.status),
            output = CASE WHEN p_set_output THEN p_output ELSE r.output END,
            stop_reason = COALESCE(p_stop_reason, r.stop_reason),
            error = CASE WHEN p_set_error THEN p_error ELSE r.error END,
            finished_at = CASE WHEN p_finished THEN now() ELSE r.finished_at END,
            updated_at = now()
        WHERE r.id = p_run_id
          -- re-checked against a concurrently committed cancel: a finished run stays finished
          AND r.status NOT IN ('completed', 'stopped', 'failed', 'cancelled');
    END IF;
    IF p_ack_id IS NOT NULL THEN
        DELETE FROM toren_control.queue q WHERE q.id = p_ack_id AND q.claimed_by = p_holder;
    END IF;
    IF p_progress_id IS NOT NULL THEN
        -- this delivery made progress: earlier deliveries that died (next to a message that
        -- kills its worker, say) no longer count towards dead-lettering it
        UPDATE toren_control.queue q SET attempts = 1
        WHERE q.id = p_progress_id AND q.claimed_by = p_holder AND q.attempts > 1;
    END IF;
    -- wakes the live event streams of this run, if any (see watch_runs); NOTIFY is
    -- transactional, so it is delivered when, and only if, the caller's transaction commits
    IF EXISTS (SELECT 1 FROM toren_control.watched_runs w
               WHERE w.run_id = p_run_id AND w.expires_at > now()) THEN
        PERFORM pg_notify('toren_appends', p_run_id::text);
        v_notified := 1;
    END IF;
    RETURN QUERY SELECT 1::bigint, v_appended, v_notified, v_agent_version, v_handed;
END $$;
