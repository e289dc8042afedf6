-- Flow control (docs/guides/flow-control.md): concurrency limits per agent (optionally per
-- key taken from a run's input) and run priority with aging, enforced by the claim.

-- An agent's concurrency: limit (agent.yaml), as the fleet serving it registered it: how many
-- of its runs may execute at once per concurrency key (0: no limit).
ALTER TABLE toren_control.agents ADD COLUMN concurrency_limit integer NOT NULL DEFAULT 0;

-- Every message carries its run's priority and concurrency key (NULL: the agent-wide group).
-- Constant defaults: existing rows are not rewritten, and an existing deployment's messages
-- all have priority 0 and the agent-wide key (no limit unless the agent now sets one).
ALTER TABLE toren_control.queue
    ADD COLUMN priority integer NOT NULL DEFAULT 0,
    ADD COLUMN concurrency_key text;

-- A run's priority and concurrency key, kept for the messages written after its creation
-- (appends, wake-ups, signals, approvals, the guardian's nudges): the trigger below copies
-- them onto each. Only runs with a priority other than 0 or a key have a row, so the common
-- case costs one miss on the primary key per message.
CREATE TABLE toren_control.run_flow (
    run_id          uuid PRIMARY KEY,
    agent           text NOT NULL,
    priority        integer NOT NULL DEFAULT 0,
    concurrency_key text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_flow_agent_idx ON toren_control.run_flow (agent);

-- Whichever statement inserts a run's message (there are a dozen, in this schema and in
-- every agent schema), the message takes the run's priority and key: no writer can forget.
-- A run created in the same statement as its first messages (create_run) has no row yet for
-- this to see; that statement sets both columns itself, and a missing row leaves them as set.
CREATE FUNCTION toren_control.queue_flow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_priority integer;
    v_key text;
BEGIN
    SELECT f.priority, f.concurrency_key INTO v_priority, v_key
    FROM toren_control.run_flow f WHERE f.run_id = NEW.run_id;
    IF FOUND THEN
        NEW.priority := v_priority;
        NEW.concurrency_key := v_key;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER queue_flow BEFORE INSERT ON toren_control.queue
    FOR EACH ROW WHEN (NEW.run_id IS NOT NULL) EXECUTE FUNCTION toren_control.queue_flow();

-- The claim reads each agent's messages one priority level at a time, oldest first within a
-- level (a skip scan: the distinct levels present, then up to p_limit of each), so the
-- claim's cost grows with the number of distinct priorities waiting, not with the backlog.
CREATE INDEX queue_priority_claim_idx ON toren_control.queue (agent, priority, available_at);
-- Claimed messages by agent and run: whether a run is executing, and the runs of a limited
-- agent executing now (the claim counts them by key), without reading other agents' work.
CREATE INDEX queue_claimed_idx ON toren_control.queue (agent, run_id)
    WHERE claimed_by IS NOT NULL;

-- The claim of control migration 0012 (whose notes on planning and indexes hold here too),
-- with flow control:
--
-- * Order. Each message's rank is available_at - priority * p_aging_s: the highest
--   effective priority first, where effective priority = priority + seconds waited /
--   p_aging_s (TOREN_PRIORITY_AGING_S). Low-priority work is never starved: it gains one
--   point every p_aging_s seconds. Within one priority, oldest first (FIFO).
-- * Concurrency. For an agent registered with concurrency_limit > 0, a run is executing
--   while one of its messages is claimed and unexpired (claimed_by set, available_at in the
--   future: a worker holds it and its heartbeat renews it). A message of a run already
--   executing is claimed freely (a wave's tasks); one of another run is claimed only while
--   its key's executing runs are fewer than the limit, and one claim admits at most the free
--   slots of each key. A run waiting for an approval, a signal, a child or a retry holds no
--   message, so it holds no slot. A SIGKILLed worker's messages expire after their
--   visibility (the lease TTL), and with them its slots.
--   Claims of limited agents are serialised by a transaction-scoped advisory lock per agent
--   (taken in name order, so two claimers never wait on each other in a cycle), so two
--   workers never both take the last slot; claims of other agents never take it.
CREATE FUNCTION toren_control.claim_messages(
    p_agents text[], p_worker_id text, p_limit int, p_visibility_s float8,
    p_max_deliveries int, p_aging_s float8)
RETURNS TABLE (o_id bigint, o_agent text, o_run_id uuid, o_kind text, o_payload jsonb,
               o_attempts int, o_dead boolean, o_waited_s float8, o_priority int)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
-- its plan's cost is inflated by the disabled sequential scans it never runs: JIT would
-- compile it at every call (measured: 0.5 ms a claim became 700-900 ms)
SET jit = off
AS $$
DECLARE
    v_limited text[];
BEGIN
    IF EXISTS (SELECT 1 FROM toren_control.queue q
               WHERE q.agent = ANY (p_agents) AND q.available_at <= now()
                 AND q.attempts >= p_max_deliveries
                 AND q.attempts > 0) THEN
        RETURN QUERY
        WITH dead AS (
            DELETE FROM toren_control.queue
            WHERE id = ANY (ARRAY(
                SELECT q.id FROM toren_control.queue q
                WHERE q.agent = ANY (p_agents) AND q.available_at <= now()
                  AND q.attempts >= p_max_deliveries AND q.attempts > 0
                FOR UPDATE SKIP LOCKED))
            RETURNING *
        ), buried AS (
            INSERT INTO toren_control.dead_letters
                (id, agent, run_id, kind, payload, attempts, reason, created_at)
            SELECT d.id, d.agent, d.run_id, d.kind, d.payload, d.attempts,
                   'delivered ' || d.attempts || ' times without being completed (its worker '
                   || 'died or timed out each time)',
                   d.created_at
            FROM dead d
            RETURNING dead_letters.id, dead_letters.agent, dead_letters.run_id,
                      dead_letters.kind, dead_letters.payload, dead_letters.attempts
        )
        SELECT b.id, b.agent, b.run_id, b.kind, b.payload, b.attempts, true, NULL::float8, 0
        FROM buried b;
    END IF;
    SELECT array_agg(g.name ORDER BY g.name) INTO v_limited
    FROM toren_control.agents g
    WHERE g.name = ANY (p_agents) AND g.concurrency_limit > 0;
    IF v_limited IS NOT NULL THEN
        -- a statement of its own: what follows takes a snapshot after the lock is held, so it
        -- sees every claim committed by the previous holder
        PERFORM pg_advisory_xact_lock(hashtextextended('toren_concurrency:' || l.name, 0))
        FROM unnest(v_limited) WITH ORDINALITY AS l(name, n) ORDER BY l.n;
    END IF;
    RETURN QUERY
    WITH lim AS (
        SELECT a.agent,
               COALESCE((SELECT g.concurrency_limit FROM toren_control.agents g
                         WHERE g.name = a.agent), 0) AS lim
        FROM unnest(p_agents) AS a(agent)
    ), busy AS (
        -- executing runs per key of the limited agents
        SELECT q.agent, q.concurrency_key AS key, count(DISTINCT q.run_id)::int AS runs
        FROM toren_control.queue q
        WHERE q.agent = ANY (v_limited) AND q.claimed_by IS NOT NULL
          AND q.available_at > now() AND q.run_id IS NOT NULL
        GROUP BY q.agent, q.concurrency_key
    ), candidates AS (
        SELECT l.agent, l.lim, m.id, m.run_id, m.concurrency_key, m.available_at, m.priority,
               m.available_at - m.priority * p_aging_s * interval '1 second' AS rank,
               (l.lim > 0 AND m.run_id IS NOT NULL AND NOT m.running) AS needs_slot
        FROM lim l,
             LATERAL (
                 WITH RECURSIVE levels(p) AS (
                     SELECT max(q.priority) FROM toren_control.queue q WHERE q.agent = l.agent
                     UNION ALL
                     SELECT (SELECT max(q.priority) FROM toren_control.queue q
                             WHERE q.agent = l.agent AND q.priority < v.p)
                     FROM levels v WHERE v.p IS NOT NULL
                 )
                 SELECT s.* FROM levels v,
                     LATERAL (
                         SELECT q.id, q.run_id, q.concurrency_key, q.available_at, q.priority,
                                (l.lim > 0 AND q.run_id IS NOT NULL AND EXISTS (
                                    SELECT 1 FROM toren_control.queue r
                                    WHERE r.agent = q.agent AND r.run_id = q.run_id AND r.claimed_by IS NOT NULL
                                      AND r.available_at > now() OFFSET 0)) AS running
                         FROM toren_control.queue q
                         WHERE q.agent = l.agent AND q.priority = v.p
                           AND q.available_at <= now() AND q.attempts < p_max_deliveries
                           -- a message whose key is full waits (unless its run is executing)
                           AND (l.lim = 0 OR q.run_id IS NULL
                                OR COALESCE((SELECT b.runs FROM busy b
                                             WHERE b.agent = q.agent
                                               AND b.key IS NOT DISTINCT FROM
                                                   q.concurrency_key), 0) < l.lim
                                OR EXISTS (SELECT 1 FROM toren_control.queue r
                                           WHERE r.agent = q.agent AND r.run_id = q.run_id
                                             AND r.claimed_by IS NOT NULL
                                             AND r.available_at > now()
                                           OFFSET 0))
                         ORDER BY q.available_at
                         LIMIT p_limit
                         FOR UPDATE SKIP LOCKED) AS s
                 WHERE v.p IS NOT NULL) AS m
    ), run_ranks AS (
        SELECT c.*, min(c.rank) OVER (PARTITION BY c.run_id) AS run_rank FROM candidates c
    ), slots AS (
        -- the order in which runs needing a slot would take their key's free slots
        SELECT r.*, dense_rank() OVER (PARTITION BY r.agent, r.concurrency_key, r.needs_slot
                                       ORDER BY r.run_rank, r.run_id) AS slot
        FROM run_ranks r
    ), next AS (
        SELECT s.id, s.available_at, s.rank, s.priority
        FROM slots s
        WHERE NOT s.needs_slot
           OR s.slot <= s.lim - COALESCE((SELECT b.runs FROM busy b
                                          WHERE b.agent = s.agent
                                            AND b.key IS NOT DISTINCT FROM s.concurrency_key),
                                         0)
        ORDER BY s.rank, s.id
        LIMIT p_limit
    ), claimed AS (
        UPDATE toren_control.queue q
        SET available_at = now() + p_visibility_s * interval '1 second',
            attempts = q.attempts + 1,
            claimed_by = p_worker_id
        WHERE q.id = ANY (ARRAY(SELECT n.id FROM next n))
        RETURNING q.id, q.agent, q.run_id, q.kind, q.payload, q.attempts
    )
    SELECT c.id, c.agent, c.run_id, c.kind, c.payload, c.attempts, false,
           extract(epoch FROM now() - n.available_at)::float8, n.priority
    FROM claimed c JOIN next n ON n.id = c.id
    ORDER BY n.rank, n.id;
END $$;

-- The claim of 0012, as workers of the previous version call it during a rolling deploy: the
-- claim above with the default aging, so that they honour limits and priorities too.
CREATE OR REPLACE FUNCTION toren_control.claim_messages(
    p_agents text[], p_worker_id text, p_limit int, p_visibility_s float8,
    p_max_deliveries int)
RETURNS TABLE (o_id bigint, o_agent text, o_run_id uuid, o_kind text, o_payload jsonb,
               o_attempts int, o_dead boolean, o_waited_s float8)
LANGUAGE sql VOLATILE AS $$
    SELECT c.o_id, c.o_agent, c.o_run_id, c.o_kind, c.o_payload, c.o_attempts, c.o_dead,
           c.o_waited_s
    FROM toren_control.claim_messages(p_agents, p_worker_id, p_limit, p_visibility_s,
                                      p_max_deliveries, 30.0::float8) AS c
$$;

-- Per agent, the ready messages waiting for a concurrency slot: of a run not executing, whose
-- key has as many executing runs as the agent's limit (the claim passes them over). For
-- toren top, GET /fleet, /metrics and GET /healthz (queries.sql: fleet_queue, queue_depth).
CREATE FUNCTION toren_control.waiting_for_slots(p_agents text[])
RETURNS TABLE (o_agent text, o_waiting bigint)
LANGUAGE sql STABLE AS $$
    WITH full_keys AS (
        SELECT q.agent, q.concurrency_key AS key
        FROM toren_control.queue q JOIN toren_control.agents g ON g.name = q.agent
        WHERE q.agent = ANY (p_agents) AND g.concurrency_limit > 0
          AND q.claimed_by IS NOT NULL AND q.available_at > now() AND q.run_id IS NOT NULL
        GROUP BY q.agent, q.concurrency_key, g.concurrency_limit
        HAVING count(DISTINCT q.run_id) >= g.concurrency_limit
    )
    SELECT q.agent, count(*)
    FROM toren_control.queue q
    JOIN full_keys f ON f.agent = q.agent AND f.key IS NOT DISTINCT FROM q.concurrency_key
    WHERE q.available_at <= now() AND q.run_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM toren_control.queue r
                      WHERE r.agent = q.agent AND r.run_id = q.run_id
                        AND r.claimed_by IS NOT NULL AND r.available_at > now())
    GROUP BY q.agent
$$;
