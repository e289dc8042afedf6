-- Questions an agent asks a person (the ask_user tool). One table for every agent, like
-- approvals: the row is the answer's single source of truth. status leaves 'pending' exactly
-- once (UPDATE ... WHERE status = 'pending'), so of two racing answers one wins and the other
-- reads the winner's. The task's log gets the answer (QuestionAnswered) from the worker that
-- takes the task up again.
CREATE TABLE toren_control.questions (
    id          uuid PRIMARY KEY,
    agent       text NOT NULL,
    run_id      uuid NOT NULL,
    task_id     text NOT NULL,
    call_id     text NOT NULL,
    question    text NOT NULL,
    choices     text[] NOT NULL DEFAULT '{}',
    -- the queue message (kind, payload) an answer sends to take the task up again
    wake        jsonb NOT NULL,
    status      text NOT NULL DEFAULT 'pending',
    asked_at    timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    answer      text,
    answered_by text,
    answered_at timestamptz,
    -- the idempotency key of the session message that answered it (a retried message finds
    -- its answer taken, not a new turn)
    answer_key  text
);
CREATE INDEX questions_run_idx ON toren_control.questions (run_id, status);
