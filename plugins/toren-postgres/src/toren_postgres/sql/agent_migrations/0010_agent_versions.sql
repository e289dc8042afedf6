-- Agent versions (issue 26 part 2): every run is pinned to the definition it started with.
-- The definition files are kept content-addressed: each distinct file's bytes once, under its
-- SHA-256; a version names its files (relative path -> SHA-256) and is itself keyed by the
-- hash over that manifest, so a directory that did not change adds nothing.
CREATE TABLE definition_files (
    sha256     text PRIMARY KEY,
    bytes      bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent_versions (
    hash          text PRIMARY KEY,
    human_version text,
    files         jsonb NOT NULL,
    first_seen    timestamptz NOT NULL DEFAULT now()
);

-- The version a run executes now: the one it started with, or the one it was upgraded to.
-- The log is the record (AgentVersionPinned, AgentVersionUpgraded on the run stream); this
-- column is its read model, kept by the trigger below in the transaction of the append, so
-- no writer of events has to know about it.
ALTER TABLE runs ADD COLUMN agent_version text, ADD COLUMN agent_human_version text;
CREATE INDEX runs_agent_version_idx ON runs (agent_version) WHERE agent_version IS NOT NULL;

-- SET search_path FROM CURRENT: the migration runs with search_path set to this agent's
-- schema, and the function must update this schema's runs whatever the writer's search_path.
CREATE FUNCTION set_run_agent_version() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE runs SET agent_version = NEW.data->>'version',
                    agent_human_version = NEW.data->>'human_version'
    WHERE id = NEW.run_id;
    RETURN NULL;
END $$;

-- The WHEN clause is evaluated without calling the function: other appends pay next to nothing.
CREATE TRIGGER events_agent_version AFTER INSERT ON events FOR EACH ROW
WHEN (NEW.stream = 'run' AND NEW.type IN ('AgentVersionPinned', 'AgentVersionUpgraded'))
EXECUTE FUNCTION set_run_agent_version();
