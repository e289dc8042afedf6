-- Finding and sorting runs (issue 43, the console's runs list; RunReader.search_runs and
-- run_totals):
-- * words in a run's input or output, whole words in any language ('simple': lower-cased, no
--   stemming), from the first 100,000 characters of each (a tsvector holds at most 1 MB);
--   a JSON string is searched as its text, any other JSON value as its JSON text;
-- * a run's totals (model calls, steps, cost) as its receipt counts them: run_totals() adds
--   up its model calls (read through events_model_calls_idx, never its whole log), and a run
--   keeps them in its row from the moment it finishes (the trigger below, on the update that
--   sets finished_at, whichever statement makes it: an append, a cancel), so sorting 100,000
--   runs by cost reads rows, not events. Runs still working (and runs restored from the
--   archive) have none kept: readers add theirs up. Nothing is added to an append's work.
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

CREATE FUNCTION runs_keep_totals() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    SELECT t.model_calls, t.steps, t.cost_usd, t.cost_unknown_calls
    INTO NEW.model_calls, NEW.steps, NEW.cost_usd, NEW.cost_unknown_calls
    FROM run_totals(NEW.id) t;
    RETURN NEW;
END $$;

CREATE TRIGGER runs_keep_totals BEFORE UPDATE OF finished_at ON runs FOR EACH ROW
    WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION runs_keep_totals();

UPDATE runs r SET (model_calls, steps, cost_usd, cost_unknown_calls) = (
    SELECT t.model_calls, t.steps, t.cost_usd, t.cost_unknown_calls FROM run_totals(r.id) t)
WHERE r.finished_at IS NOT NULL;
