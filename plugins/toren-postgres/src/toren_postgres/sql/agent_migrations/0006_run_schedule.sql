-- The schedule that started a run (NULL for runs started otherwise): toren jobs list shows it
-- and filters by it (GET /runs?schedule=).
ALTER TABLE runs ADD COLUMN schedule text;
CREATE INDEX runs_schedule_idx ON runs (schedule, created_at DESC) WHERE schedule IS NOT NULL;
