-- Finding runs (issue 43, the console's runs list; RunReader.search_runs and run_totals):
-- * words in a run's input or output, whole words in any language ('simple': lower-cased, no
--   stemming), from the first 100,000 characters of each (a tsvector holds at most 1 MB);
--   a JSON string is searched as its text, any other JSON value as its JSON text;
-- * a run's model calls (its totals: calls, steps, cost) and its tasks' fork points, so a
--   page of runs or a sort by cost reads only those events, not a run's whole log.
CREATE INDEX runs_text_idx ON runs USING gin (
    (to_tsvector('simple', left(COALESCE(input #>> '{}', ''), 100000))
     || to_tsvector('simple', left(COALESCE(output #>> '{}', ''), 100000))));

CREATE INDEX events_model_calls_idx ON events (run_id)
    WHERE type IN ('ModelCallCompleted', 'TaskForked');
