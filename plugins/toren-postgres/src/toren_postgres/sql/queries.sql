-- Named queries, parsed by toren_postgres.queries: each block starts with "-- name --".

-- bootstrap_ledger --
-- The ledger must exist before the first migration can be recorded in it.
CREATE SCHEMA IF NOT EXISTS toren_control;
CREATE TABLE IF NOT EXISTS toren_control.migrations (
    scope      text NOT NULL,
    version    integer NOT NULL,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, version)
);

-- ledger_exists --
SELECT to_regclass('toren_control.migrations') IS NOT NULL;

-- applied_versions --
SELECT scope, version FROM toren_control.migrations;

-- record_migration --
INSERT INTO toren_control.migrations (scope, version, name) VALUES (%(scope)s, %(version)s, %(name)s);

-- agent_owner --
SELECT name FROM toren_control.agents WHERE schema_name = %(schema_name)s;

-- register_agent --
INSERT INTO toren_control.agents (schema_name, name, directory, model)
VALUES (%(schema_name)s, %(name)s, %(directory)s, %(model)s)
ON CONFLICT (schema_name) DO UPDATE
SET directory = EXCLUDED.directory, model = EXCLUDED.model, updated_at = now()
WHERE toren_control.agents.name = EXCLUDED.name;

-- server_facts --
SELECT current_setting('server_version') AS server_version, current_database() AS database,
       current_user AS role;
