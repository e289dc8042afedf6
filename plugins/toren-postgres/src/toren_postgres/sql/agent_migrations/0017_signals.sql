-- Signals (issue 39): the run stream's read for work (p_with_finished, the orchestrator's
-- tick) also returns every event of the run's 'signals' stream, which senders append without a
-- lease; each row of o_finished now carries its type as a fourth element (TaskFinished or
-- SignalReceived). Otherwise the function of migration 0013, unchanged: the same single
-- statement, so a tick still costs one round trip. The signals come from the primary key
-- (run_id, stream, seq), the finished tasks from events_task_finished_idx.
CREATE OR REPLACE FUNCTION acquire_and_load(p_run_id uuid, p_stream text, p_holder text, p_ttl_s float8,
                                 p_with_finished boolean)
RETURNS TABLE (o_epoch int, o_events text, o_finished text, o_retry_in_s float8,
               o_created_at timestamptz, o_traceparent text, o_agent_version text)
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    v_epoch int;
BEGIN
    INSERT INTO toren_control.leases AS l (run_id, stream, holder, epoch, expires_at)
    VALUES (p_run_id, p_stream, p_holder, 1, now() + p_ttl_s * interval '1 second')
    ON CONFLICT (run_id, stream) DO UPDATE
    SET holder = EXCLUDED.holder, epoch = l.epoch + 1, expires_at = EXCLUDED.expires_at
    WHERE l.expires_at <= now()
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
