-- The control schema: what every Toren process sharing this database coordinates through.

CREATE TABLE toren_control.agents (
    schema_name   text PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    directory     text,
    model         text,
    registered_at timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE toren_control.queue (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent         text NOT NULL,
    run_id        uuid,
    kind          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    available_at  timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0,
    claimed_by    text,
    claimed_until timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX queue_claim_idx ON toren_control.queue (agent, available_at);

CREATE TABLE toren_control.schedules (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent         text NOT NULL,
    name          text NOT NULL,
    spec          text NOT NULL,
    input         jsonb NOT NULL DEFAULT '{}',
    next_fire_at  timestamptz NOT NULL,
    last_fired_at timestamptz,
    enabled       boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (agent, name)
);

CREATE TABLE toren_control.files (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    agent         text NOT NULL,
    run_id        uuid,
    name          text NOT NULL,
    content_type  text NOT NULL DEFAULT 'application/octet-stream',
    size_bytes    bigint NOT NULL,
    sha256        text NOT NULL,
    data          bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE toren_control.keys (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name          text NOT NULL,
    prefix        text NOT NULL,
    hash          text NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz
);

CREATE TABLE toren_control.workers (
    id            text PRIMARY KEY,
    version       text NOT NULL,
    agents        text[] NOT NULL DEFAULT '{}',
    hostname      text,
    pid           integer,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);
