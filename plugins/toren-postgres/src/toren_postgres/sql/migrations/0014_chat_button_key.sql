-- The key that signs chat channels' approval buttons (toren.host.chat.buttons): one per
-- deployment, made by the first process that needs it, read by every other. A button's data
-- carries a MAC over its chat, session, approval and decision, so a press from another chat,
-- for another agent's approval, or with made-up data decides nothing.

CREATE TABLE toren_control.channel_keys (
    name       text PRIMARY KEY,
    key        bytea NOT NULL CHECK (octet_length(key) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
