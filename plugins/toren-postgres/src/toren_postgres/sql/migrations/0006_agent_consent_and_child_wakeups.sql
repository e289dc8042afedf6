-- Cross-agent calls and background runs (docs/guides/cross-agent-calls.md).
-- accepts_from: the agents that may call this one (acceptsFrom: in its agent.yaml), as its fleet
-- registered it when it last started; a caller in another fleet checks consent here before it
-- creates a run of this agent. NULL for an agent registered before this column existed: it
-- accepts no one until its fleet starts again.
ALTER TABLE toren_control.agents ADD COLUMN accepts_from text[];

-- A child run (a peer call's or a background run) that ends wakes the task that started it: a
-- task message for the parent's agent, so only the fleet serving the parent claims it. Fired by
-- each agent schema's runs_wake_parent trigger (agent migration 0007) in the transaction that
-- makes the child terminal (its RunFinished, a cancel, a dead letter), so the wake-up commits
-- if and only if the child's end does.
CREATE FUNCTION toren_control.wake_parent_task() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO toren_control.queue (agent, run_id, kind, payload)
    VALUES (NEW.parent_agent, NEW.parent_run_id, 'task',
            jsonb_build_object('task_id', NEW.parent_task, 'subagent', NULL, 'input', NULL,
                               'key', 'child:' || NEW.id::text,
                               'child_run_id', NEW.id::text));
    RETURN NULL;
END;
$$;
