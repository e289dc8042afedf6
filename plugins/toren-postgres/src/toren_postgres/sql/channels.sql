-- Named queries of the ChannelStore (toren_postgres.channels): "-- name --" blocks.

-- claim_lease --
INSERT INTO toren_control.channel_leases AS lease (channel, agent, holder, expires_at)
VALUES (%(channel)s, %(agent)s, %(holder)s, now() + make_interval(secs => %(ttl_s)s))
ON CONFLICT (channel, agent) DO UPDATE
SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
    acquired_at = CASE WHEN lease.holder = EXCLUDED.holder THEN lease.acquired_at ELSE now() END
WHERE lease.holder = EXCLUDED.holder OR lease.expires_at < now()
RETURNING holder;

-- release_lease --
DELETE FROM toren_control.channel_leases
WHERE channel = %(channel)s AND agent = %(agent)s AND holder = %(holder)s;

-- record_update --
INSERT INTO toren_control.channel_updates
    (channel, agent, update_id, chat_id, user_id, kind, text, sort_key, payload)
VALUES (%(channel)s, %(agent)s, %(update_id)s, %(chat_id)s, %(user_id)s, %(kind)s, %(text)s,
        %(sort_key)s, %(payload)s)
ON CONFLICT (channel, agent, update_id) DO NOTHING
RETURNING update_id;

-- pending_updates --
SELECT * FROM toren_control.channel_updates
WHERE channel = %(channel)s AND agent = %(agent)s AND status = 'pending'
ORDER BY chat_id, sort_key, seq
LIMIT %(limit)s;

-- delivered_updates --
SELECT * FROM toren_control.channel_updates
WHERE channel = %(channel)s AND agent = %(agent)s AND status = 'delivered'
ORDER BY seq;

-- set_update --
UPDATE toren_control.channel_updates
SET status = %(status)s, session_id = coalesce(%(session_id)s, session_id),
    turn = coalesce(%(turn)s, turn),
    handled_at = CASE WHEN %(status)s IN ('pending', 'delivered') THEN NULL ELSE now() END
WHERE channel = %(channel)s AND agent = %(agent)s AND update_id = %(update_id)s;

-- chat_session --
SELECT session_id FROM toren_control.channel_chats
WHERE channel = %(channel)s AND agent = %(agent)s AND chat_id = %(chat_id)s;

-- bind_chat --
INSERT INTO toren_control.channel_chats (channel, agent, chat_id, session_id)
VALUES (%(channel)s, %(agent)s, %(chat_id)s, %(session_id)s)
ON CONFLICT (channel, agent, chat_id) DO UPDATE
SET session_id = EXCLUDED.session_id, bound_at = now()
RETURNING session_id;

-- session_chat --
SELECT agent, chat_id FROM toren_control.channel_chats
WHERE channel = %(channel)s AND session_id = %(session_id)s;

-- enqueue_send --
INSERT INTO toren_control.channel_sends (channel, agent, key, chat_id, text, payload)
VALUES (%(channel)s, %(agent)s, %(key)s, %(chat_id)s, %(text)s, %(payload)s)
ON CONFLICT (channel, agent, key) DO NOTHING
RETURNING key;

-- due_sends --
-- Claims the due messages for 60 s (SKIP LOCKED: two senders never take the same one); the
-- sender finishes or reschedules each.
WITH due AS (
    SELECT channel, agent, key FROM toren_control.channel_sends
    WHERE channel = %(channel)s AND agent = %(agent)s AND sent_at IS NULL
      AND not_before <= now()
    ORDER BY seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE toren_control.channel_sends AS send SET not_before = now() + interval '60 seconds'
FROM due
WHERE send.channel = due.channel AND send.agent = due.agent AND send.key = due.key
RETURNING send.*;

-- finish_send --
-- sent_at settles the message; a last_error set here means it was given up, not delivered
UPDATE toren_control.channel_sends
SET sent_at = now(), attempts = attempts + 1, last_error = coalesce(%(error)s, last_error)
WHERE channel = %(channel)s AND agent = %(agent)s AND key = %(key)s;

-- retry_send --
UPDATE toren_control.channel_sends
SET attempts = attempts + 1, last_error = %(error)s,
    not_before = now() + make_interval(secs => %(delay_s)s)
WHERE channel = %(channel)s AND agent = %(agent)s AND key = %(key)s;

-- release_sends --
-- Claimed messages not tried: due again after the pause, attempts and error unchanged
UPDATE toren_control.channel_sends
SET not_before = now() + make_interval(secs => %(delay_s)s)
WHERE channel = %(channel)s AND agent = %(agent)s AND key = ANY(%(keys)s)
  AND sent_at IS NULL;

-- user_status --
SELECT status FROM toren_control.channel_pairings
WHERE channel = %(channel)s AND agent = %(agent)s AND user_id = %(user_id)s;

-- request_pairing --
INSERT INTO toren_control.channel_pairings
    (channel, agent, user_id, chat_id, code, display_name)
VALUES (%(channel)s, %(agent)s, %(user_id)s, %(chat_id)s, %(code)s, %(display_name)s)
ON CONFLICT (channel, agent, user_id) DO NOTHING;

-- get_pairing --
SELECT * FROM toren_control.channel_pairings
WHERE channel = %(channel)s AND agent = %(agent)s AND user_id = %(user_id)s;

-- list_pairings --
SELECT * FROM toren_control.channel_pairings
WHERE %(status)s::text IS NULL OR status = %(status)s
ORDER BY created_at DESC, code
LIMIT 500;

-- decide_pairing --
UPDATE toren_control.channel_pairings
SET status = %(status)s, decided_at = now(), decided_by = %(decided_by)s
WHERE code = %(code)s AND status = 'pending'
RETURNING *;

-- pairing_by_code --
SELECT * FROM toren_control.channel_pairings WHERE code = %(code)s;

-- make_key --
-- The first caller's key wins; the others read it with get_key (a later statement, so it sees
-- a key another process committed meanwhile).
INSERT INTO toren_control.channel_keys (name, key) VALUES (%(name)s, %(key)s)
ON CONFLICT (name) DO NOTHING;

-- get_key --
SELECT key FROM toren_control.channel_keys WHERE name = %(name)s;
