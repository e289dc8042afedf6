-- Finding and sorting runs (issue 43, the console's runs list; RunReader.search_runs and
-- run_totals):
-- * words in a run's input or output, whole words in any language ('simple': lower-cased, no
--   stemming), from the first 100,000 characters of each (a tsvector holds at most 1 MB);
--   a JSON string is searched as its text, any other JSON value as its JSON text;
-- * a run's totals (model calls, steps, cost) as its receipt counts them: run_totals() adds
--   up its model calls (read through events_model_calls_idx, never its whole log), and a run
--   keeps them in its row from the moment it finishes (the trigger below, on the update that
--   sets finished_at, whichever statement makes it: an append, a cancel), so sorting 100,000
--   runs by cost reads rows, not events. The same trigger records the run's calls' costs in
--   model_call_costs (agent migration 0028, the costs report). Runs still working (and runs
--   restored from the archive) have neither: readers add theirs up from their events
--   (runs_unsettled_idx finds them). Nothing is added to the appends of a run that works; a call
--   that completes after its run finished (a parallel task's, in flight when the run ended)
--   is recorded by append_one, which already reads the run's row.
CREATE INDEX runs_text_idx ON runs USING gin (
    (to_tsvector('simple', left(COALESCE(input #>> '{}', ''), 100000))
     || to_tsvector('simple', left(COALESCE(output #>> '{}', ''), 100000))));

CREATE INDEX events_model_calls_idx ON events (run_id)
    WHERE type IN ('ModelCallCompleted', 'TaskForked');

ALTER TABLE runs ADD COLUMN model_calls integer, ADD COLUMN steps integer,
    ADD COLUMN cost_usd float8, ADD COLUMN cost_unknown_calls integer;

-- Every model call and step in the run's log (a fork's copied ones included); the cost of the
-- calls after each task's TaskForked (a fork's copied calls were paid for by its source).
CREATE FUNCTION run_totals(p_run_id uuid, OUT model_calls integer, OUT steps integer,
                           OUT cost_usd float8, OUT cost_unknown_calls integer)
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT count(*)::int,
           (count(*) FILTER (WHERE COALESCE(e.data->>'purpose', 'step') = 'step'))::int,
           COALESCE(sum((e.data->>'cost_usd')::float8)
                    FILTER (WHERE f.fork_at IS NULL OR e.seq > f.fork_at), 0),
           (count(*) FILTER (WHERE (f.fork_at IS NULL OR e.seq > f.fork_at)
                             AND json_typeof(e.data->'cost_usd') IS DISTINCT FROM 'number'))::int
    FROM events e
    LEFT JOIN (SELECT stream, max(seq) AS fork_at FROM events
               WHERE run_id = p_run_id AND type = 'TaskForked' GROUP BY stream) f
           ON f.stream = e.stream
    WHERE e.run_id = p_run_id AND e.type = 'ModelCallCompleted'
$$;

-- The calls a run paid for itself (not those a fork copied from its source), as the costs
-- report counts them: model_call_costs' rows.
CREATE FUNCTION model_call_cost_rows(p_run_id uuid)
RETURNS TABLE (run_id uuid, stream text, seq integer, created_at timestamptz, model text,
               cost_usd float8, input_tokens bigint, output_tokens bigint)
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT e.run_id, e.stream, e.seq, e.created_at, COALESCE(d.model, ''), d.cost_usd,
           COALESCE((d.usage->>'input_tokens')::bigint, 0),
           COALESCE((d.usage->>'output_tokens')::bigint, 0)
    FROM events e
    CROSS JOIN LATERAL json_to_record(e.data) AS d(model text, cost_usd float8, usage json)
    LEFT JOIN (SELECT f.stream, max(f.seq) AS fork_at FROM events f
               WHERE f.run_id = p_run_id AND f.type = 'TaskForked' GROUP BY f.stream) f
           ON f.stream = e.stream
    WHERE e.run_id = p_run_id AND e.type = 'ModelCallCompleted'
      AND (f.fork_at IS NULL OR e.seq > f.fork_at)
$$;

CREATE FUNCTION record_model_call_costs(p_run_id uuid) RETURNS void
LANGUAGE sql VOLATILE SET search_path FROM CURRENT AS $$
    INSERT INTO model_call_costs (run_id, stream, seq, created_at, model, cost_usd,
                                  input_tokens, output_tokens)
    SELECT * FROM model_call_cost_rows(p_run_id)
    ON CONFLICT DO NOTHING
$$;

CREATE FUNCTION runs_keep_totals() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM record_model_call_costs(NEW.id);
    SELECT t.model_calls, t.steps, t.cost_usd, t.cost_unknown_calls
    INTO NEW.model_calls, NEW.steps, NEW.cost_usd, NEW.cost_unknown_calls
    FROM run_totals(NEW.id) t;
    RETURN NEW;
END $$;

CREATE TRIGGER runs_keep_totals BEFORE UPDATE OF finished_at ON runs FOR EACH ROW
    WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION runs_keep_totals();

-- append_one (migration 0014) as it was, but for what it reads first: whether the run had
-- finished, from the row it already reads for the agent version. A run that works costs
-- nothing more; only an append of a model call to a finished run records it.
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

-- the runs that keep no totals (still working, or restored from the archive): the costs
-- report and the runs list add theirs up from their events
CREATE INDEX runs_unsettled_idx ON runs (created_at) WHERE model_calls IS NULL;
-- a sort by a total reads the finished runs in its order, as many as the page needs
CREATE INDEX runs_cost_idx ON runs (cost_usd) WHERE model_calls IS NOT NULL;
CREATE INDEX runs_model_calls_idx ON runs (model_calls) WHERE model_calls IS NOT NULL;
CREATE INDEX runs_steps_idx ON runs (steps) WHERE model_calls IS NOT NULL;

UPDATE runs r SET (model_calls, steps, cost_usd, cost_unknown_calls) = (
    SELECT t.model_calls, t.steps, t.cost_usd, t.cost_unknown_calls FROM run_totals(r.id) t)
WHERE r.finished_at IS NOT NULL;
