-- The audit trail (control migration 0022). %(name)s are bound parameters.

-- record_audit --
INSERT INTO toren_control.audit (actor_kind, actor_id, actor_name, source, remote, user_agent,
                                 action, agent, run_id, target, outcome, status, details)
VALUES (%(actor_kind)s, %(actor_id)s, %(actor_name)s, %(source)s, %(remote)s, %(user_agent)s,
        %(action)s, %(agent)s, %(run_id)s, %(target)s, %(outcome)s, %(status)s, %(details)s)
RETURNING id, at;

-- list_audit --
-- Every filter is optional (NULL: any). An action filter matches the action or the actions
-- under it (action names are [a-z_.]: no LIKE wildcard can be in one).
SELECT id, at, actor_kind, actor_id, actor_name, source, remote, user_agent, action, agent,
       run_id, target, outcome, status, details
FROM toren_control.audit
WHERE (%(before)s::bigint IS NULL OR id < %(before)s)
  AND (%(actor)s::text IS NULL OR actor_id = %(actor)s OR actor_name = %(actor)s
       OR actor_kind || ':' || actor_id = %(actor)s)
  AND (%(action)s::text IS NULL OR action = %(action)s OR action LIKE %(action)s || '.%%')
  AND (%(agent)s::text IS NULL OR agent = %(agent)s)
  AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s)
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR at < %(until)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- forget_audit --
-- A batch at a time (the caller repeats while a whole batch went): short transactions.
DELETE FROM toren_control.audit
WHERE id IN (SELECT id FROM toren_control.audit
             WHERE at < now() - make_interval(secs => %(older_than_s)s)
             ORDER BY id LIMIT %(batch)s);
