-- Failover fencing (issue 45; see control migration 0030): a lease is taken on, and honoured
-- by, one database server. acquire_and_load (agent migration 0017) records the server that
-- grants a lease and takes over at once a lease another server granted (its holder's appends
-- are refused here: it cannot write again); append_one (agent migration 0029) writes nothing
-- for a lease another server granted, as for an expired one, nor at a sequence number the
-- stream does not reach (a gap), and PostgresRunLog tells its worker why (LeaseFenced: the
-- work resumes from this server's log). Otherwise both unchanged.
CREATE OR REPLACE FUNCTION acquire_and_load(p_run_id uuid, p_stream text, p_holder text, p_ttl_s float8,
                                 p_with_finished boolean)
RETURNS TABLE (o_epoch int, o_events text, o_finished text, o_retry_in_s float8,
               o_created_at timestamptz, o_traceparent text, o_agent_version text)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    v_epoch int;
BEGIN
    INSERT INTO toren_control.leases AS l (run_id, stream, holder, epoch, expires_at,
                                           server_started_at)
    VALUES (p_run_id, p_stream, p_holder, 1, now() + p_ttl_s * interval '1 second',
            pg_postmaster_start_time())
    ON CONFLICT (run_id, stream) DO UPDATE
    SET holder = EXCLUDED.holder, epoch = l.epoch + 1, expires_at = EXCLUDED.expires_at,
        server_started_at = EXCLUDED.server_started_at
    WHERE l.expires_at <= now() OR l.server_started_at <> EXCLUDED.server_started_at
    RETURNING l.epoch INTO v_epoch;
    RETURN QUERY
    SELECT v_epoch,
           (SELECT json_agg(json_build_array(e.seq, e.type, e.data) ORDER BY e.seq)
            FROM events e
            WHERE e.run_id = p_run_id AND e.stream = p_stream
              AND e.seq >= COALESCE((SELECT max(c.seq) FROM events c
                                     WHERE c.run_id = p_run_id AND c.stream = p_stream
                                       AND c.type = 'TaskCheckpoint'), 1))::text,
           (SELECT json_agg(json_build_array(e.stream, e.seq, e.data, e.type)
                            ORDER BY e.stream, e.seq)
            FROM events e
            WHERE p_with_finished AND e.run_id = p_run_id
              AND (e.type = 'TaskFinished' OR e.stream = 'signals'))::text,
           (SELECT greatest(0, extract(epoch FROM l.expires_at - now()))::float8
            FROM toren_control.leases l
            WHERE l.run_id = p_run_id AND l.stream = p_stream),
           r.created_at, r.data->>'traceparent',
           (SELECT v.agent_version FROM runs v WHERE v.id = p_run_id)
    FROM (SELECT 1) one
    LEFT JOIN events r ON r.run_id = p_run_id AND r.stream = 'run' AND r.seq = 1;
END $$;

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
    v_finished boolean;
BEGIN
    -- the run's agent version as of this append: the worker's version checks between steps
    -- and at a task message read it here instead of in a statement of their own; and whether
    -- the run had finished (a call completing after that is recorded below)
    SELECT r.agent_version, r.finished_at IS NOT NULL INTO v_agent_version, v_finished
    FROM runs r WHERE r.id = p_run_id;
    -- the stream must end right before this append (one primary-key probe): a log shorter
    -- than the writer believes lost events it appended (a failover to a replica that had not
    -- received them), and what it holds in memory is ahead of it. The lease check below
    -- catches that too, unless the lease itself was taken again since by the same holder at
    -- the same epoch (a lease row lost with the rest); o_appended -1 says why nothing was
    -- written, and the lease is left as it is.
    IF p_first_seq > 1 AND json_array_length(p_events) > 0 AND NOT EXISTS (
            SELECT 1 FROM events e
            WHERE e.run_id = p_run_id AND e.stream = p_stream AND e.seq = p_first_seq - 1) THEN
        RETURN QUERY SELECT 1::bigint, -1::bigint, 0::bigint, v_agent_version, NULL::text;
        RETURN;
    END IF;
    UPDATE toren_control.leases l
    SET expires_at = CASE WHEN p_release THEN now()
                          ELSE now() + p_ttl_s * interval '1 second' END
    WHERE l.run_id = p_run_id AND l.stream = p_stream AND l.holder = p_holder
      AND l.epoch = p_epoch AND l.expires_at > now()
      -- granted by this server (not by a primary this one replaced, whose log may have been
      -- longer than this one's: see control migration 0030)
      AND (l.server_started_at IS NULL OR l.server_started_at = pg_postmaster_start_time())
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = p_run_id AND r.status = 'cancelled');
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint, v_agent_version, NULL::text;
        RETURN;
    END IF;
    INSERT INTO events (run_id, stream, seq, type, data)
    SELECT p_run_id, p_stream, p_first_seq + e.n::int - 1, e.doc->>'type', e.doc->'data'
    FROM json_array_elements(p_events) WITH ORDINALITY AS e(doc, n);
    GET DIAGNOSTICS v_appended = ROW_COUNT;
    IF v_finished AND EXISTS (SELECT 1 FROM json_array_elements(p_events) AS e(doc)
                              WHERE e.doc->>'type' = 'ModelCallCompleted') THEN
        -- a model call that completed after its run finished (a parallel task's, in flight
        -- when the run ended): it was paid for, so its cost and the run's totals count it
        PERFORM record_model_call_costs(p_run_id);
        UPDATE runs r SET (model_calls, steps, cost_usd, cost_unknown_calls) = (
            SELECT t.model_calls, t.steps, t.cost_usd, t.cost_unknown_calls
            FROM run_totals(p_run_id) t)
        WHERE r.id = p_run_id;
    END IF;
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
