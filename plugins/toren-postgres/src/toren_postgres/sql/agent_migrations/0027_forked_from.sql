-- A run's forks (issue 43, the console's family links): the run a fork was made from, set when
-- the fork is created (create_fork, from its RunForked event), so a source run lists its forks
-- with one index scan instead of reading every run's log. Forks made before this migration get
-- theirs from their RunForked event.
ALTER TABLE runs ADD COLUMN forked_from uuid;

UPDATE runs SET forked_from = (e.data->>'source_run_id')::uuid
FROM events e
WHERE e.run_id = runs.id AND e.stream = 'run' AND e.type = 'RunForked';

CREATE INDEX runs_forked_from_idx ON runs (forked_from, created_at) WHERE forked_from IS NOT NULL;
