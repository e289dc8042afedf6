-- Named queries of the AgentVersionStore (toren_postgres.versions); {names} are bound to one
-- agent's schema (agent migration 0010_agent_versions).

-- save_definition_files --
-- Content-addressed: a file already kept is not written again.
INSERT INTO {definition_files} (sha256, bytes)
SELECT f->>'sha256', decode(f->>'base64', 'base64')
FROM jsonb_array_elements(%(files)s) AS f
ON CONFLICT (sha256) DO NOTHING;

-- save_agent_version --
INSERT INTO {agent_versions} (hash, human_version, files)
VALUES (%(hash)s, %(human_version)s, %(files)s)
ON CONFLICT (hash) DO NOTHING;

-- load_agent_version --
SELECT v.human_version, m.path, f.bytes
FROM {agent_versions} v
CROSS JOIN LATERAL jsonb_each_text(v.files) AS m(path, sha256)
JOIN {definition_files} f ON f.sha256 = m.sha256
WHERE v.hash = %(hash)s;

-- run_agent_version --
SELECT agent_version FROM {runs} WHERE id = %(run_id)s;

-- set_run_version --
-- A compare-and-set on the run's version: the row lock serialises two setters, and the second
-- one, re-reading the row after the first commits, no longer matches. The trigger of 0010
-- copies the event's version into runs.agent_version in this transaction.
WITH active AS (
    SELECT id FROM {runs}
    WHERE id = %(run_id)s
      AND status NOT IN ('completed', 'stopped', 'failed', 'cancelled')
      AND agent_version IS NOT DISTINCT FROM %(expected)s
    FOR UPDATE
), base AS (
    SELECT COALESCE(max(seq), 0) AS seq FROM {events}
    WHERE run_id = %(run_id)s AND stream = 'run'
)
INSERT INTO {events} (run_id, stream, seq, type, data)
SELECT active.id, 'run', base.seq + e.n::int, e.doc->>'type', e.doc->'data'
FROM active, base, json_array_elements(%(events)s) WITH ORDINALITY AS e(doc, n)
RETURNING seq;

-- list_agent_versions --
SELECT v.hash, v.human_version, v.first_seen, v.files,
       count(r.id) AS runs,
       count(r.id) FILTER (WHERE r.status NOT IN ('completed', 'stopped', 'failed', 'cancelled'))
           AS active_runs
FROM {agent_versions} v
LEFT JOIN {runs} r ON r.agent_version = v.hash
GROUP BY v.hash
ORDER BY v.first_seen DESC, v.hash;
