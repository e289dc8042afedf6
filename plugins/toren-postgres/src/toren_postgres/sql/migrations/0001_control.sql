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
CREATE INDEX queue_run_idx ON toren_control.queue (run_id);

-- Wake idle workers the moment a message is ready (LISTEN toren_queue); delayed messages are
-- found by the workers' poll instead.
CREATE FUNCTION toren_control.notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.available_at <= now() THEN
        PERFORM pg_notify('toren_queue', NEW.agent);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER queue_notify AFTER INSERT ON toren_control.queue
    FOR EACH ROW EXECUTE FUNCTION toren_control.notify_queue();

-- Messages delivered too often without being acknowledged (their worker died each time).
CREATE TABLE toren_control.dead_letters (
    id              bigint PRIMARY KEY,
    agent           text NOT NULL,
    run_id          uuid,
    kind            text NOT NULL,
    payload         jsonb NOT NULL,
    attempts        integer NOT NULL,
    reason          text NOT NULL,
    created_at      timestamptz NOT NULL,
    dead_at         timestamptz NOT NULL DEFAULT now()
);

-- One writer per stream: the holder of its lease. epoch is the fencing token: it grows with
-- every change of holder, and appends check it, so a worker that lost its lease cannot write.
-- All lease arithmetic uses the database clock (now()), never a worker's.
CREATE TABLE toren_control.leases (
    run_id      uuid NOT NULL,
    stream      text NOT NULL,
    holder      text NOT NULL,
    epoch       integer NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (run_id, stream)
);
CREATE INDEX leases_holder_idx ON toren_control.leases (holder);

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
