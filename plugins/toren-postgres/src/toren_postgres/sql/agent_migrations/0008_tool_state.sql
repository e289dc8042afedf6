-- Durable state that tools keep beside a run (toren-sandbox's workspaces): file contents by
-- SHA-256, stored once per agent however many runs and steps hold them, and one manifest per
-- tool call that changed a workspace (every entry in a full one, the changes in the others).
CREATE TABLE tool_blobs (
    sha256     text PRIMARY KEY,
    content    bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Manifests go with their run: deleting a run (its retention) deletes them; blobs no manifest
-- names any more can then be collected.
CREATE TABLE tool_manifests (
    run_id      uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    scope       text NOT NULL,
    seq         integer NOT NULL,
    parent_seq  integer,
    step        integer NOT NULL,
    epoch       integer NOT NULL,
    call_id     text NOT NULL,
    full_state  boolean NOT NULL,
    entries     jsonb NOT NULL,
    removed     jsonb NOT NULL,
    total_bytes bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, scope, seq)
);
