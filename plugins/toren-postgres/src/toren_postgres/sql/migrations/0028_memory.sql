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

-- The vectors of memories for semantic recall (memory.embeddings), by the embedder that made
-- them. Kept as plain arrays, so the table needs no extension; recall compares them with
-- pgvector's cosine distance (a cast to vector) only where pgvector is loaded, and ranks by
-- words alone where it is not.
CREATE TABLE toren_control.memory_vectors (
    memory_id uuid PRIMARY KEY REFERENCES toren_control.memories (id) ON DELETE CASCADE,
    embedder  text NOT NULL,
    vector    float4[] NOT NULL
);

-- Load pgvector where the server has it and this role may (the embedded Postgres ships it and
-- runs as a superuser). Elsewhere this is a notice, not a failure: recall is by words until
-- someone runs CREATE EXTENSION vector (no migration needed then).
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS vector;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pgvector is not available (%): memory recall is by words only', SQLERRM;
END
$$;
