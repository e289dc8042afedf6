-- The worker's claim as a function (the claim query of queries.sql calls it), for two reasons
-- measured on the claim it replaces (bench figures 3 and 10, pg_stat_statements):
--
-- 1. Planned once per connection. Postgres kept a custom plan for the inline claim (its
--    generic plan estimated LIMIT $n at a tenth of the table and hash-joined the update to a
--    scan of the whole queue), so it planned the five-part statement at every claim: 0.5-0.7 ms
--    of planning for 0.1-0.4 ms of execution. Here plan_cache_mode = force_generic_plan, and
--    every part of the plan is an index scan whatever the parameters and the table's size
--    when the plan was made: the update and the delete find their rows by primary key
--    (id = ANY of the chosen ids), never by a scan the planner may cost. The dead-letter
--    sweep runs only when a probe of queue_redelivered_idx finds something to sweep, so a
--    claim is usually one statement of two parts.
-- 2. Each agent's messages are read through queue_claim_idx (agent, available_at), one agent
--    at a time, oldest first, stopping after p_limit. The inline claim read
--    queue_ready_order_idx (available_at, id) and filtered by agent, so ready messages of
--    agents this worker does not serve (another fleet's backlog, or an agent no worker serves
--    any more) were read at every claim: 25-38 ms a claim behind 100,000 of them, against
--    0.5 ms now. Messages that became ready at the same instant (one append's wave) are taken
--    in index order within an agent; across agents and in the result, by (available_at, id).
--
-- Messages already delivered p_max_deliveries times move to the dead letters (returned with
-- o_dead = true, for the worker to record on their runs); up to p_limit ready messages are
-- claimed and hidden for p_visibility_s. One statement for the caller, in its implicit
-- transaction.
CREATE FUNCTION toren_control.claim_messages(
    p_agents text[], p_worker_id text, p_limit int, p_visibility_s float8,
    p_max_deliveries int)
RETURNS TABLE (o_id bigint, o_agent text, o_run_id uuid, o_kind text, o_payload jsonb,
               o_attempts int, o_dead boolean, o_waited_s float8)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
-- every read here is by an index (the primary key, queue_claim_idx, queue_redelivered_idx);
-- a generic plan made while the queue is small would otherwise scan the whole table to find
-- the rows to update and delete, and keep doing so once it has grown
SET enable_seqscan = off
AS $$
BEGIN
    -- the sweep, only when there is something to sweep (one probe of queue_redelivered_idx,
    -- the sweep's own condition): a claim's usual statement is the claim alone
    IF EXISTS (SELECT 1 FROM toren_control.queue q
               WHERE q.agent = ANY (p_agents) AND q.available_at <= now()
                 AND q.attempts >= p_max_deliveries
                 -- implied (p_max_deliveries >= 1): lets the planner use queue_redelivered_idx
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
        SELECT b.id, b.agent, b.run_id, b.kind, b.payload, b.attempts, true, NULL::float8
        FROM buried b;
    END IF;
    RETURN QUERY
    WITH next AS (
        SELECT m.id, m.available_at
        FROM unnest(p_agents) AS a(agent),
             LATERAL (SELECT q.id, q.available_at FROM toren_control.queue q
                      WHERE q.agent = a.agent AND q.available_at <= now()
                        AND q.attempts < p_max_deliveries
                      ORDER BY q.available_at
                      LIMIT p_limit
                      FOR UPDATE SKIP LOCKED) AS m
        ORDER BY m.available_at, m.id
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
           extract(epoch FROM now() - n.available_at)::float8
    FROM claimed c JOIN next n ON n.id = c.id
    ORDER BY n.available_at, n.id;
END $$;
