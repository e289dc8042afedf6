-- Approvals: tool calls waiting for a person. One table for every agent, so that the API and
-- the CLI list pending approvals across agents in one query. The row is the decision's single
-- source of truth: status leaves 'pending' exactly once (UPDATE ... WHERE status = 'pending'),
-- so of two racing decisions one wins and the other reads the winner's outcome. The task's
-- log gets the decision (ApprovalDecided) from the worker that takes the task up again.
CREATE TABLE toren_control.approvals (
    id           uuid PRIMARY KEY,
    agent        text NOT NULL,
    run_id       uuid NOT NULL,
    task_id      text NOT NULL,
    call_id      text NOT NULL,
    tool         text NOT NULL,
    arguments    jsonb NOT NULL,
    approvers    text[] NOT NULL DEFAULT '{}',
    -- the queue message (kind, payload) a decision sends to take the task up again
    wake         jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'pending',
    requested_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    decided_by   text,
    decided_at   timestamptz,
    reason       text
);
CREATE INDEX approvals_status_idx ON toren_control.approvals (status, requested_at DESC);
CREATE INDEX approvals_run_idx ON toren_control.approvals (run_id);
