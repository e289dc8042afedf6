-- Completion webhooks' deliveries (control migration 0018). %(name)s are bound parameters.

-- claim_deliveries --
-- A claim is an attempt: the count goes up now, so a dispatcher that dies mid-send still
-- uses one up, and the delivery comes back once the claim's visibility has passed.
UPDATE toren_control.webhook_deliveries d
SET attempts = d.attempts + 1, claimed_by = %(holder)s,
    next_attempt_at = now() + %(visibility_s)s * interval '1 second'
WHERE d.id IN (SELECT id FROM toren_control.webhook_deliveries
               WHERE state = 'pending' AND next_attempt_at <= now()
                 AND agent = ANY(%(agents)s)
               ORDER BY next_attempt_at, n
               LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED)
RETURNING d.id, d.agent, d.run_id, d.event, d.run_status, d.url, d.secret_env, d.attempts,
          d.body, d.occurred_at;

-- fix_body --
UPDATE toren_control.webhook_deliveries SET body = COALESCE(body, %(body)s)
WHERE id = %(id)s
RETURNING body;

-- record_attempt --
-- The attempt and its outcome in one statement, only while the holder's claim is current.
WITH delivery AS (
    UPDATE toren_control.webhook_deliveries d
    SET state = CASE WHEN %(outcome)s = 'retry' THEN 'pending' ELSE %(outcome)s END,
        next_attempt_at = now() + %(retry_in_s)s * interval '1 second',
        claimed_by = NULL,
        ended_at = CASE WHEN %(outcome)s = 'retry' THEN NULL ELSE now() END,
        last_error = CASE WHEN %(outcome)s = 'delivered' THEN NULL ELSE %(error)s END
    WHERE d.id = %(id)s AND d.claimed_by = %(holder)s AND d.state = 'pending'
    RETURNING d.id
)
INSERT INTO toren_control.webhook_attempts (delivery_id, attempt, started_at, duration_ms,
                                            status_code, error)
SELECT delivery.id, %(attempt)s, %(started_at)s, %(duration_ms)s, %(status_code)s, %(error)s
FROM delivery
ON CONFLICT (delivery_id, attempt) DO NOTHING
RETURNING delivery_id;

-- run_deliveries --
SELECT d.id, d.event, d.run_status, d.url, d.source, d.state, d.attempts, d.occurred_at,
       d.next_attempt_at, d.ended_at, d.last_error,
       COALESCE((SELECT json_agg(json_build_object(
                     'attempt', a.attempt, 'started_at', a.started_at,
                     'duration_ms', a.duration_ms, 'status_code', a.status_code,
                     'error', a.error) ORDER BY a.attempt)
                 FROM toren_control.webhook_attempts a WHERE a.delivery_id = d.id),
                '[]') AS history
FROM toren_control.webhook_deliveries d
WHERE d.run_id = %(run_id)s
ORDER BY d.occurred_at, d.n;

-- forget_deliveries --
-- Attempts go with their delivery (ON DELETE CASCADE).
DELETE FROM toren_control.webhook_deliveries
WHERE state <> 'pending' AND ended_at < now() - %(ended_before_s)s * interval '1 second';
