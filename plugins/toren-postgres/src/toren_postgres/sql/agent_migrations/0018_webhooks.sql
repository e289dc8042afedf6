-- Completion webhooks given with the run (POST /runs, POST /sessions, toren run --webhook):
-- a list of {"url", "events", "secret_env"}; NULL for none. The trigger writes the run's
-- deliveries (and its agent's notify: ones) in the transaction that changes its status
-- (toren_control.enqueue_webhooks, control migration 0018).
ALTER TABLE runs ADD COLUMN webhooks jsonb;

CREATE TRIGGER runs_webhooks AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status
          AND NEW.status IN ('completed', 'stopped', 'failed', 'cancelled',
                             'awaiting_approval', 'awaiting_input'))
    EXECUTE FUNCTION toren_control.enqueue_webhooks();
