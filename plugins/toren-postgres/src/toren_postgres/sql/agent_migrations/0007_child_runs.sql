-- Child runs: a run started by another run's task (a peer call, or a background run from a
-- session). parent_* name the task to wake when the child ends; depth counts the calls above
-- (0 for a run started by a person), which bounds cycles such as A asks B asks A.
ALTER TABLE runs ADD COLUMN parent_agent text;
ALTER TABLE runs ADD COLUMN parent_run_id uuid;
ALTER TABLE runs ADD COLUMN parent_task text;
ALTER TABLE runs ADD COLUMN child_kind text;
ALTER TABLE runs ADD COLUMN depth integer NOT NULL DEFAULT 0;
CREATE INDEX runs_parent_idx ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- The child's end wakes its parent's task (toren_control.wake_parent_task, control migration
-- 0006), in the same transaction, whichever way it ended.
CREATE TRIGGER runs_wake_parent AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.parent_run_id IS NOT NULL
          AND NEW.status IN ('completed', 'stopped', 'failed', 'cancelled')
          AND OLD.status NOT IN ('completed', 'stopped', 'failed', 'cancelled'))
    EXECUTE FUNCTION toren_control.wake_parent_task();
