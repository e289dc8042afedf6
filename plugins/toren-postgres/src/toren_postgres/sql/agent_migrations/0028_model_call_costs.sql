-- The costs report (GET /costs, the console's Costs page, issue 43): what each model call a run
-- made cost, in a narrow table of its own, kept by the trigger below in the transaction of the
-- append (as runs.agent_version is, migration 0010), so that no writer of events has to know
-- about it. Adding up the events themselves parses every call's JSON (its text included) at
-- every read: 15-40 us a call, seconds for a year of a busy agent; this table is read from
-- one index, without parsing anything.
--
-- A fork's calls copied from its source (those before its task's TaskForked, written in the
-- same statement as the marker: an AFTER trigger sees the whole statement's rows) are not
-- recorded: the source made and paid for them, and the receipt shows them at no cost. Rows
-- outlive the archiving of their run (the cost history stays whole, and a restored run's
-- calls are not recorded twice: the primary key).
CREATE TABLE model_call_costs (
    run_id        uuid NOT NULL,
    stream        text NOT NULL,
    seq           integer NOT NULL,
    created_at    timestamptz NOT NULL,
    -- the UTC day, which the report groups by: a column of its own has statistics, so the
    -- planner knows there are a few hundred groups (a hash), where date_trunc() of created_at
    -- left it guessing hundreds of thousands (a sort spilled to disk: 2.5x slower)
    day           date GENERATED ALWAYS AS ((created_at AT TIME ZONE 'UTC')::date) STORED,
    model         text NOT NULL,
    cost_usd      float8,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    PRIMARY KEY (run_id, stream, seq)
);
-- the report reads a window of days from this index alone (an index-only scan once vacuumed)
CREATE INDEX model_call_costs_day_idx ON model_call_costs (day)
    INCLUDE (model, cost_usd, input_tokens, output_tokens);

-- forks' markers, which the trigger looks for after each call (few: one per forked task)
CREATE INDEX events_task_forked_idx ON events (run_id, stream, seq) WHERE type = 'TaskForked';

-- SET search_path FROM CURRENT: the migration runs with search_path set to this agent's
-- schema, and the function must write this schema's table whatever the writer's search_path.
CREATE FUNCTION record_model_call_cost() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM events f
               WHERE f.run_id = NEW.run_id AND f.stream = NEW.stream
                 AND f.type = 'TaskForked' AND f.seq > NEW.seq) THEN
        RETURN NULL;  -- copied from a fork's source
    END IF;
    INSERT INTO model_call_costs (run_id, stream, seq, created_at, model, cost_usd,
                                  input_tokens, output_tokens)
    SELECT NEW.run_id, NEW.stream, NEW.seq, NEW.created_at, COALESCE(d.model, ''),
           d.cost_usd, COALESCE((d.usage->>'input_tokens')::bigint, 0),
           COALESCE((d.usage->>'output_tokens')::bigint, 0)
    FROM json_to_record(NEW.data) AS d(model text, cost_usd float8, usage json)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

-- The WHEN clause is evaluated without calling the function: other appends pay next to nothing.
CREATE TRIGGER events_model_call_cost AFTER INSERT ON events FOR EACH ROW
WHEN (NEW.type = 'ModelCallCompleted')
EXECUTE FUNCTION record_model_call_cost();

-- the calls made before this migration
INSERT INTO model_call_costs (run_id, stream, seq, created_at, model, cost_usd, input_tokens,
                              output_tokens)
SELECT e.run_id, e.stream, e.seq, e.created_at, COALESCE(d.model, ''), d.cost_usd,
       COALESCE((d.usage->>'input_tokens')::bigint, 0),
       COALESCE((d.usage->>'output_tokens')::bigint, 0)
FROM events e CROSS JOIN LATERAL json_to_record(e.data) AS d(model text, cost_usd float8,
                                                              usage json)
WHERE e.type = 'ModelCallCompleted'
  AND NOT EXISTS (SELECT 1 FROM events f
                  WHERE f.run_id = e.run_id AND f.stream = e.stream
                    AND f.type = 'TaskForked' AND f.seq > e.seq);
