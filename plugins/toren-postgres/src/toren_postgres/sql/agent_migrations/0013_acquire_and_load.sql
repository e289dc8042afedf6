-- Taking a stream's lease and reading the stream for work, as one statement (the worker sends
-- one statement, not a pipeline of two): PostgresRunLog.acquire_and_load calls it.
-- Two statements inside, as before: a statement's snapshot predates a lock wait inside it,
-- so reading the stream in the acquiring statement could miss events the previous holder
-- committed while we waited. A VOLATILE PL/pgSQL function takes a new snapshot for each of
-- its statements, so the read sees everything committed once the lease is ours; and both run
-- in the calling statement's transaction. The first is the acquire_lease query of queries.sql
-- (keep the two the same).
--
-- The read: the stream from its latest checkpoint on (and, for the run stream, with every
-- task's TaskFinished), each as one JSON array built by the server in primary-key order: one
-- parse in the client instead of one per row. Also: seconds until the lease expires (if not
-- ours), and the run's RunCreated (seq 1 of the run stream, one primary-key lookup): when it
-- was written (with the run row) and its traceparent, which a tracing worker needs for the
-- run's spans without reading the run row; and the run's agent version, read under the lease
-- (a run tick checks the definition it was handed against it instead of reading it first).
-- o_epoch is the lease's epoch, NULL if another holder has it.
CREATE FUNCTION acquire_and_load(p_run_id uuid, p_stream text, p_holder text, p_ttl_s float8,
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
           (SELECT json_agg(json_build_array(e.stream, e.seq, e.data) ORDER BY e.stream)
            FROM events e
            WHERE p_with_finished AND e.run_id = p_run_id AND e.type = 'TaskFinished')::text,
           (SELECT greatest(0, extract(epoch FROM l.expires_at - now()))::float8
            FROM toren_control.leases l
            WHERE l.run_id = p_run_id AND l.stream = p_stream),
           r.created_at, r.data->>'traceparent',
           (SELECT v.agent_version FROM runs v WHERE v.id = p_run_id)
    FROM (SELECT 1) one
    LEFT JOIN events r ON r.run_id = p_run_id AND r.stream = 'run' AND r.seq = 1;
END $$;
