-- The costs report (GET /costs, the console's Costs page, issue 43): what each model call a
-- finished run made cost, in a narrow table of its own, so that a year of a busy agent is
-- read from one index without parsing anything (adding up the events themselves parses every
-- call's JSON, its text included, at every read: 15-40 us a call, seconds for a year).
--
-- A run's calls are recorded once, in the transaction that finishes it (agent migration 0029:
-- the trigger on the update that sets finished_at, and append_one for a call that completes
-- after its run finished); nothing is added to the appends of a run that works. Readers add
-- up the calls of the runs still working from their events. A fork's calls copied from its
-- source (those before its task's TaskForked) are not recorded: the source made and paid for
-- them, and the receipt shows them at no cost. Rows outlive the archiving of their run (the
-- cost history stays whole, and a restored run's calls are not recorded twice: the primary
-- key).
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

-- forks' markers (few: one per forked task), which the backfill below looks for after each call
CREATE INDEX events_task_forked_idx ON events (run_id, stream, seq) WHERE type = 'TaskForked';

-- the calls of the runs that finished before this migration (those still working are added
-- up from their events when read, and recorded when they finish: agent migration 0029)
INSERT INTO model_call_costs (run_id, stream, seq, created_at, model, cost_usd, input_tokens,
                              output_tokens)
SELECT e.run_id, e.stream, e.seq, e.created_at, COALESCE(d.model, ''), d.cost_usd,
       COALESCE((d.usage->>'input_tokens')::bigint, 0),
       COALESCE((d.usage->>'output_tokens')::bigint, 0)
FROM events e CROSS JOIN LATERAL json_to_record(e.data) AS d(model text, cost_usd float8,
                                                              usage json)
WHERE e.type = 'ModelCallCompleted'
  AND EXISTS (SELECT 1 FROM runs r WHERE r.id = e.run_id AND r.finished_at IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM events f
                  WHERE f.run_id = e.run_id AND f.stream = e.stream
                    AND f.type = 'TaskForked' AND f.seq > e.seq);
