-- Chat channels (toren.host.chat): one elected poller per channel and agent, the inbox of
-- incoming updates (a unique insert before the platform is acknowledged: exactly-once turns),
-- the chat -> session map, pairing of unknown people, and the outbox of messages to send
-- (keyed, so a resumed turn never sends its reply twice).

CREATE TABLE toren_control.channel_leases (
    channel     text NOT NULL,
    agent       text NOT NULL,
    holder      text NOT NULL,
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, agent)
);

CREATE TABLE toren_control.channel_updates (
    channel     text NOT NULL,
    agent       text NOT NULL,
    update_id   text NOT NULL,
    chat_id     text NOT NULL,
    user_id     text NOT NULL,
    kind        text NOT NULL,
    text        text NOT NULL,
    sort_key    bigint NOT NULL DEFAULT 0,
    payload     jsonb NOT NULL DEFAULT '{}',
    status      text NOT NULL DEFAULT 'pending',
    session_id  text,
    turn        integer,
    seq         bigserial,
    received_at timestamptz NOT NULL DEFAULT now(),
    handled_at  timestamptz,
    PRIMARY KEY (channel, agent, update_id)
);

CREATE INDEX channel_updates_open_idx ON toren_control.channel_updates (channel, agent, status)
    WHERE status IN ('pending', 'delivered');

CREATE TABLE toren_control.channel_chats (
    channel    text NOT NULL,
    agent      text NOT NULL,
    chat_id    text NOT NULL,
    session_id text NOT NULL,
    bound_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, agent, chat_id)
);

CREATE INDEX channel_chats_session_idx ON toren_control.channel_chats (channel, session_id);

CREATE TABLE toren_control.channel_pairings (
    channel      text NOT NULL,
    agent        text NOT NULL,
    user_id      text NOT NULL,
    chat_id      text NOT NULL,
    code         text NOT NULL UNIQUE,
    status       text NOT NULL DEFAULT 'pending',
    display_name text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    decided_at   timestamptz,
    decided_by   text,
    PRIMARY KEY (channel, agent, user_id)
);

CREATE TABLE toren_control.channel_sends (
    channel     text NOT NULL,
    agent       text NOT NULL,
    key         text NOT NULL,
    chat_id     text NOT NULL,
    text        text NOT NULL,
    payload     jsonb NOT NULL DEFAULT '{}',
    seq         bigserial,
    attempts    integer NOT NULL DEFAULT 0,
    last_error  text,
    not_before  timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz,
    PRIMARY KEY (channel, agent, key)
);

CREATE INDEX channel_sends_due_idx ON toren_control.channel_sends (channel, agent, not_before)
    WHERE sent_at IS NULL;
