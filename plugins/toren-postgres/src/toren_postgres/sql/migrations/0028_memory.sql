-- Memory that outlives a session (memory: in agent.yaml; docs/guides/memory.md). One table for
-- every agent, because shared memories cross agents and a person erases what every agent keeps
-- about them in one statement. subject is the person a user-scoped memory is about (the
-- channel identity or the subject given to the run); shared_with the agents its writer shared
-- it with (its memory.shareWith when it was written). tsv is the full-text index of recall.
CREATE TABLE toren_control.memories (
    id          uuid PRIMARY KEY,
    agent       text NOT NULL,
    scope       text NOT NULL CHECK (scope IN ('user', 'agent', 'shared')),
    subject     text,
    content     text NOT NULL,
    pinned      boolean NOT NULL DEFAULT false,
    shared_with text[] NOT NULL DEFAULT '{}',
    run_id      uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    tsv         tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    CHECK (scope <> 'user' OR subject IS NOT NULL)
);
CREATE INDEX memories_agent_subject_idx ON toren_control.memories (agent, subject, updated_at);
CREATE INDEX memories_subject_idx ON toren_control.memories (subject);
CREATE INDEX memories_tsv_idx ON toren_control.memories USING gin (tsv);

-- One row per memory write a tool call made, by the call's idempotency key, written in the
-- transaction of the write itself: a resumed task's call finds its write done and returns
-- its first outcome, so a write takes effect once (and a memory erased since stays erased).
-- It holds no memory text.
CREATE TABLE toren_control.memory_writes (
    key        text PRIMARY KEY,
    agent      text NOT NULL,
    action     text NOT NULL,
    outcome    text,
    memory_id  uuid,
    written_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_writes_written_idx ON toren_control.memory_writes (written_at);
