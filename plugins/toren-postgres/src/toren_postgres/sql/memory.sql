-- Memories (toren_postgres.memory; control migration 0028_memory). The visibility test of a
-- MemoryView (toren.core.memory) is written out in each query that needs it: an agent sees its
-- agent memories, its user memories about the run's subject, and shared memories about that
-- subject (or nobody) that it wrote or that an agent it shares with wrote sharing with it.

-- claim_write --
-- The write's ledger row, in the write's own transaction: none back when the key wrote before.
INSERT INTO toren_control.memory_writes (key, agent, action) VALUES (%(key)s, %(agent)s, %(action)s)
ON CONFLICT (key) DO NOTHING RETURNING key;

-- earlier_write --
SELECT outcome, memory_id FROM toren_control.memory_writes WHERE key = %(key)s;

-- settle_write --
UPDATE toren_control.memory_writes SET outcome = %(outcome)s, memory_id = %(memory_id)s
WHERE key = %(key)s;

-- insert_memory --
INSERT INTO toren_control.memories
    (id, agent, scope, subject, content, pinned, shared_with, run_id)
VALUES (%(id)s, %(agent)s, %(scope)s, %(subject)s, %(content)s, %(pinned)s, %(shared_with)s,
        %(run_id)s);

-- update_own_memory --
UPDATE toren_control.memories m SET
    content = coalesce(%(content)s, m.content), pinned = coalesce(%(pinned)s, m.pinned),
    updated_at = now()
WHERE m.id = %(id)s AND m.agent = %(agent)s
  AND ((m.scope = 'agent' AND 'agent' = ANY(%(scopes)s))
    OR (m.scope = 'user' AND 'user' = ANY(%(scopes)s) AND m.subject = %(subject)s)
    OR (m.scope = 'shared' AND 'shared' = ANY(%(scopes)s)
        AND (m.subject IS NULL OR m.subject = %(subject)s)))
RETURNING m.id;

-- forget_own_memory --
DELETE FROM toren_control.memories m
WHERE m.id = %(id)s AND m.agent = %(agent)s
  AND ((m.scope = 'agent' AND 'agent' = ANY(%(scopes)s))
    OR (m.scope = 'user' AND 'user' = ANY(%(scopes)s) AND m.subject = %(subject)s)
    OR (m.scope = 'shared' AND 'shared' = ANY(%(scopes)s)
        AND (m.subject IS NULL OR m.subject = %(subject)s)))
RETURNING m.id;

-- recall_memories --
-- Any word of the query matches (its stemmed words joined by OR); the score is the cover
-- density rank weighed by recency: half weight after 30 days without a change. A query with
-- no words left once stop words are dropped ("the", "a") lists the most recent instead.
WITH words AS (
    SELECT to_tsquery('simple', coalesce(string_agg(quote_literal(word), ' | '), '')) AS query
    FROM unnest(tsvector_to_array(to_tsvector('english', coalesce(%(query)s::text, '')))) AS word
), q AS (SELECT query, numnode(query) > 0 AS given FROM words)
SELECT m.id, m.agent, m.scope, m.subject, m.content, m.pinned, m.shared_with, m.run_id,
       m.created_at, m.updated_at,
       CASE WHEN NOT q.given THEN NULL ELSE
           ts_rank_cd(m.tsv, q.query)
           / (1 + extract(epoch FROM now() - m.updated_at) / (86400 * %(half_life_days)s))
       END::float8 AS score
FROM toren_control.memories m, q
WHERE ((m.scope = 'agent' AND m.agent = %(agent)s AND 'agent' = ANY(%(scopes)s))
    OR (m.scope = 'user' AND m.agent = %(agent)s AND m.subject = %(subject)s
        AND 'user' = ANY(%(scopes)s))
    OR (m.scope = 'shared' AND 'shared' = ANY(%(scopes)s)
        AND (m.subject IS NULL OR m.subject = %(subject)s)
        AND (m.agent = %(agent)s
             OR (m.agent = ANY(%(share_with)s) AND %(agent)s = ANY(m.shared_with)))))
  AND (%(scope)s::text IS NULL OR m.scope = %(scope)s)
  AND (NOT q.given OR m.tsv @@ q.query)
  AND (NOT %(pinned_only)s OR m.pinned)
ORDER BY score DESC NULLS LAST, m.updated_at DESC, m.id
LIMIT %(limit)s;

-- recall_memories_semantic --
-- recall_memories where pgvector is loaded, with the query's vector: a memory matches by any
-- word or by a vector of the same embedder at least min_similarity close (cosine), and its
-- similarity adds to its rank before the weighing by recency.
WITH words AS (
    SELECT to_tsquery('simple', coalesce(string_agg(quote_literal(word), ' | '), '')) AS query
    FROM unnest(tsvector_to_array(to_tsvector('english', coalesce(%(query)s::text, '')))) AS word
), q AS (SELECT query, numnode(query) > 0 AS given FROM words)
SELECT m.id, m.agent, m.scope, m.subject, m.content, m.pinned, m.shared_with, m.run_id,
       m.created_at, m.updated_at,
       ((CASE WHEN q.given AND m.tsv @@ q.query THEN ts_rank_cd(m.tsv, q.query) ELSE 0 END
         + coalesce(greatest(1 - (v.vector::vector <=> %(vector)s::float4[]::vector), 0), 0))
        / (1 + extract(epoch FROM now() - m.updated_at) / (86400 * %(half_life_days)s))
       )::float8 AS score
FROM toren_control.memories m
CROSS JOIN q
LEFT JOIN toren_control.memory_vectors v
       ON v.memory_id = m.id AND v.embedder = %(embedder)s
WHERE ((m.scope = 'agent' AND m.agent = %(agent)s AND 'agent' = ANY(%(scopes)s))
    OR (m.scope = 'user' AND m.agent = %(agent)s AND m.subject = %(subject)s
        AND 'user' = ANY(%(scopes)s))
    OR (m.scope = 'shared' AND 'shared' = ANY(%(scopes)s)
        AND (m.subject IS NULL OR m.subject = %(subject)s)
        AND (m.agent = %(agent)s
             OR (m.agent = ANY(%(share_with)s) AND %(agent)s = ANY(m.shared_with)))))
  AND (%(scope)s::text IS NULL OR m.scope = %(scope)s)
  AND ((q.given AND m.tsv @@ q.query)
       OR 1 - (v.vector::vector <=> %(vector)s::float4[]::vector) >= %(min_similarity)s)
  AND (NOT %(pinned_only)s OR m.pinned)
ORDER BY score DESC NULLS LAST, m.updated_at DESC, m.id
LIMIT %(limit)s;

-- list_memories --
WITH words AS (
    SELECT to_tsquery('simple', coalesce(string_agg(quote_literal(word), ' | '), '')) AS query
    FROM unnest(tsvector_to_array(to_tsvector('english', coalesce(%(search)s::text, '')))) AS word
), q AS (SELECT query, numnode(query) > 0 AS given FROM words)
SELECT m.id, m.agent, m.scope, m.subject, m.content, m.pinned, m.shared_with, m.run_id,
       m.created_at, m.updated_at,
       CASE WHEN NOT q.given THEN NULL
            ELSE ts_rank_cd(m.tsv, q.query) END::float8 AS score
FROM toren_control.memories m, q
WHERE (%(agents)s::text[] IS NULL OR m.agent = ANY(%(agents)s))
  AND (%(subject)s::text IS NULL OR m.subject = %(subject)s)
  AND (%(scope)s::text IS NULL OR m.scope = %(scope)s)
  AND (NOT q.given OR m.tsv @@ q.query)
ORDER BY score DESC NULLS LAST, m.updated_at DESC, m.id
LIMIT %(limit)s;

-- keep_vector --
INSERT INTO toren_control.memory_vectors (memory_id, embedder, vector)
VALUES (%(id)s, %(embedder)s, %(vector)s)
ON CONFLICT (memory_id) DO UPDATE SET embedder = excluded.embedder, vector = excluded.vector;

-- drop_vector --
DELETE FROM toren_control.memory_vectors WHERE memory_id = %(id)s;

-- vectors_loaded --
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector');

-- get_memory --
SELECT id, agent, scope, subject, content, pinned, shared_with, run_id, created_at,
       updated_at, NULL::float8 AS score
FROM toren_control.memories WHERE id = %(id)s;

-- edit_memory --
UPDATE toren_control.memories SET
    content = coalesce(%(content)s, content), pinned = coalesce(%(pinned)s, pinned),
    updated_at = now()
WHERE id = %(id)s
RETURNING id, agent, scope, subject, content, pinned, shared_with, run_id, created_at,
          updated_at, NULL::float8 AS score;

-- delete_memories_by_id --
DELETE FROM toren_control.memories WHERE id = ANY(%(ids)s::uuid[])
  AND (%(agents)s::text[] IS NULL OR agent = ANY(%(agents)s))
RETURNING id;

-- delete_memories_of_subject --
DELETE FROM toren_control.memories WHERE subject = %(subject)s
  AND (%(agents)s::text[] IS NULL OR agent = ANY(%(agents)s))
RETURNING id;

-- expire_memories --
DELETE FROM toren_control.memories
WHERE agent = %(agent)s AND updated_at < now() - %(older_than_s)s::float8 * interval '1 second';

-- expire_memory_writes --
-- A write's ledger row outlives any resume of its call by far after this long.
DELETE FROM toren_control.memory_writes
WHERE agent = %(agent)s AND written_at < now() - interval '30 days';
