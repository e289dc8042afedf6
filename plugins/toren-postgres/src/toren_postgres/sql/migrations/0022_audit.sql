-- The audit trail (docs/guides/auth.md, "Audit trail"): who did what, from where, on what,
-- and how it ended, one row per state-changing call a surface took (HTTP, the CLI on the
-- database, MCP, chat buttons). Written once, never updated; rows older than
-- TOREN_AUDIT_RETENTION are deleted by the workers. Never holds a secret, a whole tool
-- argument or a file's bytes: the host bounds what goes in (toren.core.audit).
CREATE TABLE toren_control.audit (
    -- ascending in recording order: the pages' cursor
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    -- key | cli | anonymous | channel | system
    actor_kind  text NOT NULL,
    -- a key's id, the CLI's user, a chat user (<channel>:<user>)
    actor_id    text NOT NULL,
    actor_name  text NOT NULL DEFAULT '',
    -- http | cli | mcp | chat | system
    source      text NOT NULL,
    -- the HTTP peer's address and User-Agent (NULL elsewhere)
    remote      text,
    user_agent  text,
    -- a dotted name: run.start, approval.approve, key.revoke, ...
    action      text NOT NULL,
    agent       text,
    run_id      text,
    -- an approval's, a key's or a file's id, a schedule's name
    target      text,
    -- ok, or the error's code (forbidden, not_found, ...)
    outcome     text NOT NULL,
    -- the HTTP status (NULL elsewhere)
    status      integer,
    details     jsonb NOT NULL DEFAULT '{}'
);
-- the filters of toren audit and GET /audit, each newest first; retention deletes by age
CREATE INDEX audit_at_idx ON toren_control.audit (at);
CREATE INDEX audit_actor_idx ON toren_control.audit (actor_id, id DESC);
CREATE INDEX audit_action_idx ON toren_control.audit (action text_pattern_ops, id DESC);
CREATE INDEX audit_agent_idx ON toren_control.audit (agent, id DESC) WHERE agent IS NOT NULL;
CREATE INDEX audit_run_idx ON toren_control.audit (run_id, id DESC) WHERE run_id IS NOT NULL;
