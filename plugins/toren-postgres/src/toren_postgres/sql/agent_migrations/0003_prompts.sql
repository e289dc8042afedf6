-- The text of every system prompt a task ran with, once per distinct prompt (content-addressed
-- by its SHA-256, which TaskStarted records as prompt_sha256), so that every prompt of a run
-- can be read back after the agent directory changed.
CREATE TABLE prompts (
    sha256 text PRIMARY KEY,
    text text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
