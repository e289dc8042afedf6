-- Scoped API keys (docs/guides/auth.md, "Roles and scopes"): each key has a role (admin,
-- operator, viewer, approver, or custom with its own scopes), optionally the only agents it
-- may touch and an expiry. Keys made before this keep working as admin keys.
ALTER TABLE toren_control.keys
    ADD COLUMN role       text NOT NULL DEFAULT 'admin',
    -- only for role custom: the key's own scopes (a named role's come from the code)
    ADD COLUMN scopes     text[] NOT NULL DEFAULT '{}',
    -- NULL: every agent
    ADD COLUMN agents     text[],
    -- NULL: never expires
    ADD COLUMN expires_at timestamptz;

-- Names are unique among keys not revoked, ignoring case, and never look like the CLI's
-- actor (cli:<user>). Existing keys that break this are renamed, deterministically: a name
-- starting with cli: gets key- in front; the second and later keys sharing a name (oldest
-- first) get " (2)", " (3)", ... (the next number free). The ids and secrets do not change.
DO $$
DECLARE
    duplicate record;
    n integer;
BEGIN
    UPDATE toren_control.keys SET name = 'key-' || name
    WHERE lower(name) LIKE 'cli:%' AND revoked_at IS NULL;
    FOR duplicate IN
        SELECT id, name FROM (
            SELECT id, name, row_number() OVER (PARTITION BY lower(name)
                                                ORDER BY created_at, id) AS position
            FROM toren_control.keys WHERE revoked_at IS NULL) ranked
        WHERE position > 1
        ORDER BY lower(name), position
    LOOP
        n := 2;
        WHILE EXISTS (SELECT 1 FROM toren_control.keys
                      WHERE revoked_at IS NULL
                        AND lower(name) = lower(duplicate.name || ' (' || n || ')')) LOOP
            n := n + 1;
        END LOOP;
        UPDATE toren_control.keys SET name = duplicate.name || ' (' || n || ')'
        WHERE id = duplicate.id;
    END LOOP;
END $$;

CREATE UNIQUE INDEX keys_active_name ON toren_control.keys (lower(name))
    WHERE revoked_at IS NULL;
