-- Questions (toren_postgres.questions; control migration 0016_questions).

-- open_question --
-- The task loop keeps what its log asked (again after a crash: nothing changes then).
INSERT INTO toren_control.questions
    (id, agent, run_id, task_id, call_id, question, choices, wake, expires_at)
VALUES (%(id)s, %(agent)s, %(run_id)s, %(task_id)s, %(call_id)s, %(question)s, %(choices)s,
        %(wake)s, now() + %(expires_after_s)s::float8 * interval '1 second')
ON CONFLICT (id) DO NOTHING;

-- get_questions --
SELECT id, agent, run_id, task_id, call_id, question, choices, status, asked_at, expires_at,
       answer, answered_by, answered_at, answer_key, expires_at <= now() AS due
FROM toren_control.questions WHERE id = ANY(%(ids)s::uuid[]);

-- list_questions --
SELECT id, agent, run_id, task_id, call_id, question, choices, status, asked_at, expires_at,
       answer, answered_by, answered_at, answer_key, expires_at <= now() AS due
FROM toren_control.questions
WHERE (%(agents)s::text[] IS NULL OR agent = ANY(%(agents)s))
  AND (%(run_id)s::uuid IS NULL OR run_id = %(run_id)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY asked_at, id
LIMIT %(limit)s;

-- answer_question --
-- One statement: the answer (only while pending; answer only before the expiry, expire only
-- after it), the run back to running if it awaits input, and the message that takes the task
-- up again. A pending question whose run has ended is cancelled instead.
WITH target AS (
    SELECT q.id, q.run_id, r.status AS run_status,
           r.status IN ('completed', 'stopped', 'failed', 'cancelled') AS ended
    FROM toren_control.questions q JOIN {runs} r ON r.id = q.run_id
    WHERE q.id = %(id)s AND q.status = 'pending'
), settled AS (
    UPDATE toren_control.questions q SET
        status = CASE WHEN target.ended THEN 'cancelled' ELSE %(outcome)s END,
        answered_by = CASE WHEN target.ended THEN 'toren' ELSE %(answered_by)s END,
        answer = CASE WHEN target.ended THEN NULL ELSE %(answer)s END,
        answered_at = now(),
        answer_key = CASE WHEN target.ended THEN NULL ELSE %(key)s END
    FROM target
    -- re-checked on the row as the winner of a race left it (READ COMMITTED re-reads it)
    WHERE q.id = target.id AND q.status = 'pending' AND (target.ended OR CASE
        WHEN %(outcome)s = 'expired' THEN q.expires_at <= now()
        ELSE q.expires_at IS NULL OR q.expires_at > now() END)
    RETURNING q.agent, q.run_id, q.wake, q.status
), woken AS (
    UPDATE {runs} r SET status = 'running', updated_at = now()
    FROM settled WHERE r.id = settled.run_id AND r.status = 'awaiting_input'
      AND settled.status <> 'cancelled'
), enqueued AS (
    INSERT INTO toren_control.queue (agent, run_id, kind, payload)
    SELECT settled.agent, settled.run_id, settled.wake->>'kind', settled.wake->'payload'
    FROM settled WHERE settled.status <> 'cancelled'
)
SELECT status FROM settled;

-- cancel_questions --
UPDATE toren_control.questions
SET status = 'cancelled', answered_by = 'toren', answered_at = now()
WHERE run_id = %(run_id)s AND status = 'pending';
