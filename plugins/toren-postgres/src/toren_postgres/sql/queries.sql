-- Named queries, parsed by toren_postgres.queries: each block starts with "-- name --".

-- bootstrap_ledger --
-- The ledger must exist before the first migration can be recorded in it.
CREATE SCHEMA IF NOT EXISTS toren_control;
CREATE TABLE IF NOT EXISTS toren_control.migrations (
    scope      text NOT NULL,
    version    integer NOT NULL,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, version)
);

-- ledger_exists --
SELECT to_regclass('toren_control.migrations') IS NOT NULL;

-- applied_versions --
SELECT scope, version FROM toren_control.migrations;

-- record_migration --
INSERT INTO toren_control.migrations (scope, version, name) VALUES (%(scope)s, %(version)s, %(name)s);

-- agent_owner --
SELECT name FROM toren_control.agents WHERE schema_name = %(schema_name)s;

-- register_agent --
INSERT INTO toren_control.agents (schema_name, name, directory, model, accepts_from, notify,
                                  runtime, concurrency_limit)
VALUES (%(schema_name)s, %(name)s, %(directory)s, %(model)s, %(accepts_from)s, %(notify)s,
        %(runtime)s, %(concurrency_limit)s)
ON CONFLICT (schema_name) DO UPDATE
SET directory = EXCLUDED.directory, model = EXCLUDED.model,
    accepts_from = EXCLUDED.accepts_from, notify = EXCLUDED.notify, updated_at = now(),
    runtime = EXCLUDED.runtime, concurrency_limit = EXCLUDED.concurrency_limit
WHERE toren_control.agents.name = EXCLUDED.name;

-- server_facts --
SELECT current_setting('server_version') AS server_version, current_database() AS database,
       current_user AS role;

-- Queries below with {runs} and {events} are formatted per agent schema with
-- psycopg.sql.Identifier; %(name)s are bound parameters.

-- create_run --
-- One statement, one transaction: the run row, its first events, its first messages.
-- With a repeated idempotency key the INSERT does nothing and neither does anything else.
WITH run AS (
    INSERT INTO {runs} (id, kind, status, input, idempotency_key, parent_agent, parent_run_id,
                        parent_task, child_kind, depth, webhooks)
    VALUES (%(run_id)s, %(kind)s, %(status)s, %(input)s, %(idempotency_key)s,
            %(parent_agent)s, %(parent_run_id)s, %(parent_task)s, %(child_kind)s, %(depth)s,
            %(webhooks)s)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
), appended AS (
    INSERT INTO {events} (run_id, stream, seq, type, data)
    SELECT run.id, 'run', e.n::int, e.doc->>'type', e.doc->'data'
    FROM run, json_array_elements(%(events)s) WITH ORDINALITY AS e(doc, n)
), flow AS (
    -- its priority and concurrency key, for the messages later statements write (control
    -- migration 0024's trigger); this statement's own messages take them below, since the
    -- trigger cannot see this row before the statement ends
    INSERT INTO toren_control.run_flow (run_id, agent, priority, concurrency_key)
    SELECT run.id, %(agent)s, %(priority)s, %(concurrency_key)s FROM run
    WHERE %(priority)s <> 0 OR %(concurrency_key)s::text IS NOT NULL
), enqueued AS (
    -- the first hand_limit messages due now go to the worker of this process (hand_to)
    -- already claimed, as an append hands its messages (see append)
    INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at, attempts,
                                     claimed_by, priority, concurrency_key)
    SELECT %(agent)s, run.id, m.doc->>'kind', m.doc->'payload',
           now() + CASE WHEN handed THEN %(hand_visibility_s)s
                        ELSE (m.doc->>'delay_s')::float8 END * interval '1 second',
           CASE WHEN handed THEN 1 ELSE 0 END,
           CASE WHEN handed THEN %(hand_to)s END,
           %(priority)s, %(concurrency_key)s
    FROM run, jsonb_array_elements(%(messages)s) WITH ORDINALITY AS m(doc, n),
         LATERAL (SELECT m.n <= %(hand_limit)s AND (m.doc->>'delay_s')::float8 <= 0
                  AS handed) AS h
    RETURNING id, kind, payload, claimed_by
)
SELECT id, (SELECT json_agg(json_build_array(q.id, q.kind, q.payload) ORDER BY q.id)
            FROM enqueued q WHERE q.claimed_by IS NOT NULL)::text AS handed
FROM run
UNION ALL
SELECT id, NULL FROM {runs}
WHERE idempotency_key = %(idempotency_key)s AND NOT EXISTS (SELECT 1 FROM run);

-- acquire_lease --
-- Also the first statement of the function acquire_and_load (agent migration 0030). A lease
-- granted by another server (a primary this one replaced) is taken over at once: its holder's
-- appends are refused here (control migration 0030).
INSERT INTO toren_control.leases AS l (run_id, stream, holder, epoch, expires_at,
                                       server_started_at)
VALUES (%(run_id)s, %(stream)s, %(holder)s, 1, now() + %(ttl_s)s * interval '1 second',
        pg_postmaster_start_time())
ON CONFLICT (run_id, stream) DO UPDATE
SET holder = EXCLUDED.holder, epoch = l.epoch + 1, expires_at = EXCLUDED.expires_at,
    server_started_at = EXCLUDED.server_started_at
WHERE l.expires_at <= now() OR l.server_started_at <> EXCLUDED.server_started_at
RETURNING epoch;

-- acquire_and_load --
-- The stream's lease and the stream read for work, one statement (see the function, agent
-- migration 0013, whose first statement is acquire_lease above: keep the two the same).
SELECT * FROM {acquire_and_load}(%(run_id)s, %(stream)s, %(holder)s, %(ttl_s)s::float8,
                                 %(with_finished)s);

-- release_lease --
UPDATE toren_control.leases SET expires_at = now()
WHERE run_id = %(run_id)s AND stream = %(stream)s AND holder = %(holder)s AND epoch = %(epoch)s;

-- load_stream --
SELECT seq, type, data, created_at FROM {events}
WHERE run_id = %(run_id)s AND stream = %(stream)s ORDER BY seq;

-- events_at --
-- After a connection broke mid-append: what the log holds at the numbers it was writing.
SELECT type, data FROM {events}
WHERE run_id = %(run_id)s AND stream = %(stream)s
  AND seq BETWEEN %(first_seq)s AND %(last_seq)s
ORDER BY seq;

-- append --
-- The hot path: one statement, so one round trip and one commit per durable step. The
-- function append_one (agent migrations 0012 and 0014) is the append; append_batch runs it
-- for each append of a group commit's batch. Nothing is written unless the lease is held at this
-- epoch, unexpired by the database clock, and the run is not cancelled; the events' primary
-- key is the compare-and-swap.
SELECT o_leased AS leased, o_appended AS appended, o_notified AS notified,
       o_agent_version AS agent_version, o_handed AS handed
FROM {append_one}(
    %(hand_limit)s::int, %(hand_visibility_s)s::float8, %(run_id)s::uuid, %(stream)s::text,
    %(holder)s::text, %(epoch)s::int, %(ttl_s)s::float8, %(release)s::boolean,
    %(agent)s::text, %(first_seq)s::int, %(events)s::json, %(messages)s::jsonb,
    %(ack_id)s::bigint, %(progress_id)s::bigint, %(update_run)s::boolean, %(status)s::text,
    %(set_output)s::boolean, %(output)s::jsonb, %(stop_reason)s::text, %(set_error)s::boolean,
    %(error)s::jsonb, %(finished)s::boolean);

-- append_batch --
-- A group commit's batch of appends as one statement (one send, one result, one implicit
-- transaction): append_one for each, in the batch's order, each seeing what those before it
-- wrote. The parameter batch is a JSON array of the append query's parameters, one object per append;
-- the JSON ones (events, messages, output, error) are JSON text inside it, as each alone
-- would have sent it.
SELECT a.o_leased, a.o_appended, a.o_notified, a.o_agent_version, a.o_handed
FROM ROWS FROM (json_to_recordset(%(batch)s) AS (
         hand_limit int, hand_visibility_s float8, run_id uuid, stream text, holder text,
         epoch int, ttl_s float8, release boolean, agent text, first_seq int, events text,
         messages text, ack_id bigint, progress_id bigint, update_run boolean, status text,
         set_output boolean, output text, stop_reason text, set_error boolean, error text,
         finished boolean)) WITH ORDINALITY AS b,
     LATERAL {append_one}(
         b.hand_limit, b.hand_visibility_s, b.run_id, b.stream, b.holder, b.epoch, b.ttl_s,
         b.release, b.agent, b.first_seq, b.events::json, b.messages::jsonb, b.ack_id,
         b.progress_id, b.update_run, b.status, b.set_output, b.output::jsonb, b.stop_reason,
         b.set_error, b.error::jsonb, b.finished) AS a
ORDER BY b.ordinality;

-- lease_state --
SELECT l.holder, l.epoch, l.expires_at > now() AS live,
       (SELECT status FROM {runs} WHERE id = %(run_id)s) AS run_status,
       l.server_started_at IS NOT NULL AND l.server_started_at <> pg_postmaster_start_time()
           AS granted_elsewhere
FROM toren_control.leases l WHERE l.run_id = %(run_id)s AND l.stream = %(stream)s;

-- append_unleased --
WITH active AS (
    SELECT id FROM {runs}
    WHERE id = %(run_id)s
      AND (NOT %(only_if_active)s OR status NOT IN ('completed', 'stopped', 'failed', 'cancelled'))
), base AS (
    SELECT COALESCE(max(seq), 0) AS seq FROM {events}
    WHERE run_id = %(run_id)s AND stream = %(stream)s
), appended AS (
    INSERT INTO {events} (run_id, stream, seq, type, data)
    SELECT active.id, %(stream)s, base.seq + e.n::int, e.doc->>'type', e.doc->'data'
    FROM active, base, json_array_elements(%(events)s) WITH ORDINALITY AS e(doc, n)
    RETURNING seq
), run_update AS (
    UPDATE {runs} r SET
        status = COALESCE(%(status)s, r.status),
        output = CASE WHEN %(set_output)s THEN %(output)s ELSE r.output END,
        stop_reason = COALESCE(%(stop_reason)s, r.stop_reason),
        error = CASE WHEN %(set_error)s THEN %(error)s ELSE r.error END,
        finished_at = CASE WHEN %(finished)s THEN now() ELSE r.finished_at END,
        updated_at = now()
    FROM active WHERE r.id = active.id AND %(update_run)s
      AND (NOT %(only_if_active)s OR r.status NOT IN ('completed', 'stopped', 'failed', 'cancelled'))
), dropped AS (
    DELETE FROM toren_control.queue q USING active
    WHERE q.run_id = active.id AND %(drop_messages)s
), notified AS (
    SELECT pg_notify('toren_appends', active.id::text) FROM active
    WHERE EXISTS (SELECT 1 FROM toren_control.watched_runs w
                  WHERE w.run_id = active.id AND w.expires_at > now())
)
SELECT (SELECT count(*) FROM appended) AS appended, (SELECT count(*) FROM notified) AS notified;

-- session_input --
-- A user's message (or close request) to a session. The run row's status is the turn token:
-- the input is taken only while the session awaits input, and taking it makes the session
-- running, appends to the task stream and queues the task, all in one statement. Concurrent
-- senders serialise on the row lock; the losers find it running and get nothing written.
-- A UserMessage gets its turn number here (one more than the stream has), so two senders
-- can never both number theirs from a stale read. Returns whether the input was taken, the
-- status the statement saw (for the caller to say why not) and the turn number. A message
-- whose idempotency key the stream already has is not taken again: seen_turn says which turn
-- took it.
WITH seen AS (
    SELECT (data->>'turn')::int AS turn FROM {events}
    WHERE run_id = %(run_id)s AND stream = %(stream)s AND type = 'UserMessage'
      AND %(key)s::text IS NOT NULL AND data->>'idempotency_key' = %(key)s
    LIMIT 1
), turn AS (
    UPDATE {runs} SET status = 'running', updated_at = now()
    WHERE id = %(run_id)s AND kind = 'session' AND status = 'awaiting_input'
      AND NOT EXISTS (SELECT 1 FROM seen)
      -- a session whose agent asked a question (ask_user) takes its answer, not a new turn
      AND NOT EXISTS (SELECT 1 FROM toren_control.questions q
                      WHERE q.run_id = %(run_id)s AND q.status = 'pending')
    RETURNING id
), base AS (
    SELECT COALESCE(max(seq), 0) AS seq,
           count(*) FILTER (WHERE type = 'UserMessage') + 1 AS turn
    FROM {events} WHERE run_id = %(run_id)s AND stream = %(stream)s
), appended AS (
    INSERT INTO {events} (run_id, stream, seq, type, data)
    SELECT turn.id, %(stream)s, base.seq + e.n::int, e.doc->>'type',
           CASE WHEN e.doc->>'type' = 'UserMessage'
                THEN ((e.doc->'data')::jsonb || jsonb_build_object('turn', base.turn))::json
                ELSE e.doc->'data' END
    FROM turn, base, json_array_elements(%(events)s) WITH ORDINALITY AS e(doc, n)
), enqueued AS (
    INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at)
    SELECT %(agent)s, turn.id, m->>'kind', m->'payload',
           now() + (m->>'delay_s')::float8 * interval '1 second'
    FROM turn, jsonb_array_elements(%(messages)s) AS m
), notified AS (
    SELECT pg_notify('toren_appends', turn.id::text) FROM turn
    WHERE EXISTS (SELECT 1 FROM toren_control.watched_runs w
                  WHERE w.run_id = turn.id AND w.expires_at > now())
)
SELECT (SELECT count(*) FROM turn) AS taken,
       (SELECT status FROM {runs} WHERE id = %(run_id)s AND kind = 'session') AS status,
       (SELECT turn FROM base) AS turn,
       (SELECT turn FROM seen) AS seen_turn,
       (SELECT count(*) FROM notified) AS notified;

-- send_signal --
-- A signal to a run: appended at the end of the run's 'signals' stream (nobody leases it), with
-- the run tick that wakes its workflow and a message for each task with an open tool wait of
-- its name, in one call (the function of agent migration 0020, which says why it is one).
-- A signal whose idempotency key the stream already has is not appended again (seen: its
-- number).
SELECT o_status, o_appended, o_seen
FROM {send_signal}(%(run_id)s::uuid, %(agent)s::text, %(type)s::text, %(data)s::json,
                   %(key)s::text, %(messages)s::jsonb);

-- user_message_turn --
-- The turn a message with this idempotency key started, if any.
SELECT (data->>'turn')::int FROM {events}
WHERE run_id = %(run_id)s AND stream = %(stream)s AND type = 'UserMessage'
  AND data->>'idempotency_key' = %(key)s
LIMIT 1;

-- get_run --
SELECT id, kind, status, input, output, stop_reason, error, idempotency_key, created_at, updated_at,
       finished_at, schedule, parent_agent, parent_run_id::text, parent_task, child_kind,
       depth, agent_version, agent_human_version
FROM {runs} WHERE id = %(run_id)s;

-- get_runs --
-- get_run for several runs, each row with the run id as the caller wrote it (key).
SELECT k.key, r.id, r.kind, r.status, r.input, r.output, r.stop_reason, r.error,
       r.idempotency_key, r.created_at, r.updated_at, r.finished_at, r.schedule,
       r.parent_agent, r.parent_run_id::text, r.parent_task, r.child_kind, r.depth,
       r.agent_version, r.agent_human_version
FROM unnest(%(run_ids)s::text[]) AS k(key) JOIN {runs} r ON r.id = k.key::uuid;

-- child_runs --
-- The runs a run's tasks started (peer calls and background runs), oldest first.
SELECT id, kind, status, input, output, stop_reason, error, idempotency_key, created_at, updated_at,
       finished_at, schedule, parent_agent, parent_run_id::text, parent_task, child_kind, depth, agent_version, agent_human_version
FROM {runs} WHERE parent_run_id = %(run_id)s
ORDER BY created_at, id;

-- fork_runs --
-- The forks made from a run, oldest first (runs_forked_from_idx).
SELECT id, kind, status, input, output, stop_reason, error, idempotency_key, created_at, updated_at,
       finished_at, schedule, parent_agent, parent_run_id::text, parent_task, child_kind, depth, agent_version, agent_human_version
FROM {runs} WHERE forked_from = %(run_id)s
ORDER BY created_at, id;

-- model_costs --
-- What the model calls of the UTC days [since, until) cost per day or ISO week and model
-- (GET /costs): the finished runs' calls from model_call_costs (agent migration 0028, a fork's
-- copied calls not in it), by day and model first (a hash of a few hundred groups), and the
-- calls of the runs still working added up from their events (runs_unsettled_idx and
-- model_call_cost_rows(), agent migration 0029), then by period.
SELECT date_trunc(%(period)s, day::timestamp) AT TIME ZONE 'UTC' AS bucket, model,
       sum(calls)::bigint, sum(cost_usd)::float8, sum(unknown_cost_calls)::bigint,
       sum(input_tokens)::bigint, sum(output_tokens)::bigint
FROM (SELECT day, model, count(*) AS calls, COALESCE(sum(cost_usd), 0) AS cost_usd,
             count(*) FILTER (WHERE cost_usd IS NULL) AS unknown_cost_calls,
             sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens
      FROM {model_call_costs}
      WHERE day >= %(since)s AND day < %(until)s
      GROUP BY day, model
      UNION ALL
      SELECT (c.created_at AT TIME ZONE 'UTC')::date, c.model, count(*),
             COALESCE(sum(c.cost_usd), 0), count(*) FILTER (WHERE c.cost_usd IS NULL),
             sum(c.input_tokens), sum(c.output_tokens)
      FROM {runs} r CROSS JOIN LATERAL {model_call_cost_rows}(r.id) c
      WHERE r.model_calls IS NULL AND r.finished_at IS NULL
        AND c.created_at >= %(since)s::date::timestamp AT TIME ZONE 'UTC'
        AND c.created_at < %(until)s::date::timestamp AT TIME ZONE 'UTC'
      GROUP BY 1, 2) per_day
GROUP BY 1, 2
ORDER BY 1, 2;

-- agent_consent --
-- Whether an agent is registered, and whom it accepts calls from (acceptsFrom:).
SELECT accepts_from FROM toren_control.agents WHERE name = %(name)s;

-- list_runs --
SELECT id, kind, status, input, output, stop_reason, error, idempotency_key, created_at,
       updated_at, finished_at, schedule, parent_agent, parent_run_id::text, parent_task,
       child_kind, depth, agent_version, agent_human_version
FROM {runs}
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(schedule)s::text IS NULL OR schedule = %(schedule)s)
  -- keyset pagination: strictly older than the last run of the previous page
  AND (%(before_at)s::timestamptz IS NULL
       OR (created_at, id) < (%(before_at)s::timestamptz, %(before_id)s::uuid))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- load_events --
-- after: a JSON object mapping each stream to the last seq a reader saw; streams not in it
-- start at 1.
SELECT stream, seq, type, data, created_at FROM {events}
WHERE run_id = %(run_id)s
  AND seq > COALESCE((%(after)s::jsonb ->> stream)::int, 0)
ORDER BY created_at, stream, seq;

-- load_events_of_runs --
-- load_events for several runs: after maps each run id (as the caller wrote it: key) to its
-- position (stream -> last seq seen); each run's events in load_events' order.
SELECT k.key, e.run_id::text, e.stream, e.seq, e.type, e.data, e.created_at
FROM unnest(%(run_ids)s::text[]) AS k(key) JOIN {events} e ON e.run_id = k.key::uuid
WHERE e.seq > COALESCE((%(after)s::jsonb -> k.key ->> e.stream)::int, 0)
ORDER BY k.key, e.created_at, e.stream, e.seq;

-- tag_scheduled_run --
UPDATE {runs} SET schedule = %(schedule)s WHERE id = %(run_id)s;

-- live_workers --
SELECT id, version, agents, hostname, pid, started_at, heartbeat_at, lane, supervisor
FROM toren_control.workers
WHERE heartbeat_at > now() - %(max_age_s)s * interval '1 second'
ORDER BY started_at;

-- ensure_message --
INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at)
SELECT %(agent)s, %(run_id)s, %(kind)s, %(payload)s,
       now() + %(delay_s)s * interval '1 second'
WHERE NOT EXISTS (
    SELECT 1 FROM toren_control.queue
    WHERE run_id = %(run_id)s AND kind = %(kind)s
      AND payload->>'key' IS NOT DISTINCT FROM %(payload)s->>'key'
);

-- guardian_sweep --
-- A run that is active but has no message at all was orphaned by a lost message: nudge it.
-- A run with a live lease is being worked (its holder appends its next messages, or dies and
-- the lease expires): left alone. With a queue that does not read the outbox (SQS), relayed
-- messages are not here, and this is what keeps a run in the middle of a long call from
-- getting a tick every sweep.
INSERT INTO toren_control.queue (agent, run_id, kind, payload)
SELECT %(agent)s, r.id, 'run', jsonb_build_object('run_id', r.id::text, 'reason', 'guardian')
FROM {runs} r
WHERE r.status IN ('queued', 'running')
  AND r.updated_at < now() - interval '1 second'
  AND NOT EXISTS (SELECT 1 FROM toren_control.queue q WHERE q.run_id = r.id)
  AND NOT EXISTS (SELECT 1 FROM toren_control.leases l
                  WHERE l.run_id = r.id AND l.expires_at > now())
RETURNING run_id;

-- registered_agents --
SELECT name, schema_name FROM toren_control.agents ORDER BY name;

-- agent_lanes --
-- Each agent's lane (runtime: in agent.yaml), for toren top and GET /fleet.
SELECT name, runtime FROM toren_control.agents;

-- heartbeat_leases --
-- Renews exactly the leases of work in hand (not every lease with this holder: one left
-- behind by an aborted handler must be allowed to expire). Leases, messages and the sign-in
-- are separate statements so that no statement locks rows of two tables: appends lock a
-- lease and then a message, and a heartbeat doing both at once could deadlock with them.
-- A heartbeat never waits for a row: one locked right now is being appended to (which
-- renews it), released or taken over, and a heartbeat that waited for it while holding
-- others (a group commit's transaction locks several leases) could deadlock with it; a row
-- skipped is renewed by the next heartbeat, well inside the TTL.
-- clock_timestamp(), not now(): now() is when this statement's transaction began, and a
-- release committed meanwhile would still look live by it, so a lease let go a moment ago
-- would be renewed for another TTL.
UPDATE toren_control.leases l SET expires_at = now() + %(ttl_s)s * interval '1 second'
FROM (SELECT held.run_id, held.stream
      FROM toren_control.leases held
      JOIN unnest(%(lease_runs)s::uuid[], %(lease_streams)s::text[]) AS h(run_id, stream)
        ON held.run_id = h.run_id AND held.stream = h.stream
      WHERE held.holder = %(worker_id)s AND held.expires_at > clock_timestamp()
      FOR UPDATE OF held SKIP LOCKED) AS free
WHERE l.run_id = free.run_id AND l.stream = free.stream;

-- heartbeat_messages --
-- Never waits for a row either (see heartbeat_leases): a message locked now is being acked.
UPDATE toren_control.queue q SET available_at = now() + %(ttl_s)s * interval '1 second'
FROM (SELECT id FROM toren_control.queue
      WHERE id = ANY(%(message_ids)s) AND claimed_by = %(worker_id)s
      FOR UPDATE SKIP LOCKED) AS free
WHERE q.id = free.id;

-- heartbeat_worker --
INSERT INTO toren_control.workers AS w (id, version, agents, hostname, pid, heartbeat_at, lane,
                                        supervisor)
VALUES (%(worker_id)s, %(version)s, %(agents)s, %(hostname)s, %(pid)s, now(), %(lane)s,
        %(supervisor)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), agents = EXCLUDED.agents;

-- sign_out --
WITH released AS (
    UPDATE toren_control.leases SET expires_at = now()
    WHERE holder = %(worker_id)s AND expires_at > now()
), returned AS (
    -- messages still claimed go back to the queue at once instead of after their timeout;
    -- a graceful hand-back (a deploy) is not a failed delivery, so it does not count
    UPDATE toren_control.queue
    SET available_at = now(), claimed_by = NULL, attempts = greatest(attempts - 1, 0)
    WHERE claimed_by = %(worker_id)s
)
DELETE FROM toren_control.workers WHERE id = %(worker_id)s;

-- claim --
-- One round trip per claim (the function, control migrations 0012 and 0024, says how it
-- claims and why it is a function): messages already delivered max_deliveries times move to
-- the dead letters (returned with dead = true, for the worker to record on their runs), and
-- up to limit ready messages are claimed and hidden for visibility_s, highest effective
-- priority first (aging_s: seconds per point gained while waiting), within each agent's
-- concurrency limit.
SELECT o_id, o_agent, o_run_id, o_kind, o_payload, o_attempts, o_dead, o_waited_s, o_priority
FROM toren_control.claim_messages(%(agents)s::text[], %(worker_id)s::text, %(limit)s::int,
                                  %(visibility_s)s::float8, %(max_deliveries)s::int,
                                  %(aging_s)s::float8);

-- ack --
DELETE FROM toren_control.queue WHERE id = %(id)s AND claimed_by = %(worker_id)s;

-- enqueue --
INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at)
VALUES (%(agent)s, %(run_id)s, %(kind)s, %(payload)s,
        now() + %(delay_s)s * interval '1 second');

-- defer --
-- Hand a message back for later without counting the delivery (its task was busy elsewhere).
UPDATE toren_control.queue
SET available_at = now() + %(delay_s)s * interval '1 second', attempts = greatest(attempts - 1, 0)
WHERE id = %(id)s AND claimed_by = %(worker_id)s;

-- return_unknown --
-- After a claim whose answer never arrived: what this worker claimed but does not hold goes
-- back at once, and the delivery it never saw does not count. (A message it deferred comes
-- back early too: its next claim finds the lease still busy and defers it again.)
UPDATE toren_control.queue
SET available_at = now(), claimed_by = NULL, attempts = greatest(attempts - 1, 0)
WHERE claimed_by = %(worker_id)s AND NOT (id = ANY(%(held)s::bigint[]));

-- create_key --
-- API keys: only the SHA-256 of a key's secret is stored, next to its public prefix.
-- A prefix names one key (lookups and revocation go by it): if it is taken, nothing is
-- inserted and the caller draws another.
-- A name an active key has already is a unique violation (keys_active_name).
INSERT INTO toren_control.keys (name, prefix, hash, role, scopes, agents, expires_at)
SELECT %(name)s, %(prefix)s, %(hash)s, %(role)s, %(scopes)s, %(agents)s, %(expires_at)s
WHERE NOT EXISTS (SELECT 1 FROM toren_control.keys WHERE prefix = %(prefix)s)
RETURNING id, name, prefix, created_at, last_used_at, revoked_at, role, scopes, agents, expires_at;

-- list_keys --
SELECT id, name, prefix, created_at, last_used_at, revoked_at, role, scopes, agents, expires_at
FROM toren_control.keys
ORDER BY created_at DESC, id;

-- revoke_key --
-- Revoking twice keeps the first revocation time.
UPDATE toren_control.keys
SET revoked_at = coalesce(revoked_at, now())
WHERE id = %(id)s::uuid OR prefix = %(prefix)s
RETURNING id, name, prefix, created_at, last_used_at, revoked_at, role, scopes, agents, expires_at;

-- find_key --
-- The active key with a presented key's prefix; the caller compares the hash in constant time.
-- An expired key is not active (database clock). stale: its last use was recorded over a
-- minute ago, so record this one.
SELECT id, name, prefix, created_at, last_used_at, revoked_at, role, scopes, agents, expires_at, hash,
       last_used_at IS NULL OR last_used_at < now() - interval '1 minute' AS stale
FROM toren_control.keys
WHERE prefix = %(prefix)s AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > now());

-- touch_key --
-- At most once a minute per key, so that a busy API does not write on every request.
UPDATE toren_control.keys
SET last_used_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
  AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
RETURNING last_used_at;

-- save_prompt --
-- Content-addressed: a prompt already kept is not written again.
INSERT INTO {prompts} (sha256, text) VALUES (%(sha256)s, %(text)s)
ON CONFLICT (sha256) DO NOTHING;

-- load_prompts --
SELECT sha256, text FROM {prompts} WHERE sha256 = ANY(%(hashes)s);

-- claim_outbox --
-- The outbox relay's claim (only with a queue that does not read this table): the queue's
-- claim without counting deliveries or dead-lettering. A relay that dies before ack_outbox
-- leaves the entries hidden for visibility_s; then any relay claims them again.
-- Each agent's entries oldest first through queue_claim_idx (agent, available_at), as the
-- queue's claim reads them (control migration 0012 says why: another agent's backlog is
-- never read).
WITH next AS (
    SELECT m.id, m.available_at
    FROM unnest(%(agents)s::text[]) AS a(agent),
         LATERAL (SELECT q.id, q.available_at FROM toren_control.queue q
                  WHERE q.agent = a.agent AND q.available_at <= now()
                  ORDER BY q.available_at
                  LIMIT %(limit)s
                  FOR UPDATE SKIP LOCKED) AS m
    ORDER BY m.available_at, m.id
    LIMIT %(limit)s
)
UPDATE toren_control.queue q
SET available_at = now() + %(visibility_s)s * interval '1 second', claimed_by = %(relay_id)s
FROM next WHERE q.id = next.id
RETURNING q.id, q.agent, q.run_id, q.kind, q.payload;

-- ack_outbox --
-- Sent: delete what this relay still holds (an entry reclaimed by another relay is its own).
DELETE FROM toren_control.queue WHERE id = ANY(%(ids)s::bigint[]) AND claimed_by = %(relay_id)s;

-- watch_runs --
-- A server process starts following runs live: appends to them NOTIFY toren_appends.
INSERT INTO toren_control.watched_runs (run_id, watcher, expires_at)
SELECT run_id, %(watcher)s, now() + %(ttl_s)s * interval '1 second'
FROM unnest(%(run_ids)s::uuid[]) AS run_id
ON CONFLICT (run_id, watcher) DO UPDATE SET expires_at = EXCLUDED.expires_at;

-- unwatch_runs --
DELETE FROM toren_control.watched_runs
WHERE watcher = %(watcher)s AND run_id = ANY(%(run_ids)s::uuid[]);

-- renew_watches --
-- Keeps a live process's watches, and drops the expired ones of processes that died.
WITH renewed AS (
    UPDATE toren_control.watched_runs
    SET expires_at = now() + %(ttl_s)s * interval '1 second'
    WHERE watcher = %(watcher)s
)
-- (not this process's own expired rows: one statement must not both update and delete a row)
DELETE FROM toren_control.watched_runs WHERE expires_at < now() AND watcher <> %(watcher)s;

-- missing_tool_blobs --
SELECT wanted FROM unnest(%(digests)s::text[]) AS wanted
WHERE NOT EXISTS (SELECT 1 FROM {tool_blobs} b WHERE b.sha256 = wanted);

-- save_tool_blobs --
-- Content-addressed: a blob already stored is not written again.
INSERT INTO {tool_blobs} (sha256, content)
SELECT * FROM unnest(%(digests)s::text[], %(contents)s::bytea[])
ON CONFLICT (sha256) DO NOTHING;

-- load_tool_blobs --
SELECT sha256, content FROM {tool_blobs} WHERE sha256 = ANY(%(digests)s);

-- save_tool_manifest --
INSERT INTO {tool_manifests} (run_id, scope, seq, parent_seq, step, epoch, call_id, full_state,
                              entries, removed, total_bytes)
VALUES (%(run_id)s, %(scope)s, %(seq)s, %(parent_seq)s, %(step)s, %(epoch)s, %(call_id)s,
        %(full)s, %(entries)s, %(removed)s, %(total_bytes)s);

-- load_tool_manifests --
-- With headers_only, the entries are left out: a restore reads every header to choose its
-- state, then the entries of only the manifests on that state's chain.
SELECT seq, parent_seq, step, epoch, call_id, full_state,
       CASE WHEN %(headers_only)s THEN jsonb_build_object() ELSE entries END,
       CASE WHEN %(headers_only)s THEN jsonb_build_array() ELSE removed END, total_bytes
FROM {tool_manifests}
WHERE run_id = %(run_id)s AND scope = %(scope)s
  AND (%(seqs)s::integer[] IS NULL OR seq = ANY(%(seqs)s::integer[]))
ORDER BY seq;

-- unfinished_runs --
SELECT id::text FROM {runs}
WHERE id = ANY(%(run_ids)s::uuid[])
  AND status NOT IN ('completed', 'stopped', 'failed', 'cancelled');
-- open_approvals --
-- The task loop keeps what its log requested (again after a crash: nothing changes then). A
-- request that an approve-always decision of the run covers (same tool and digest) is kept
-- approved already, naming that decision.
INSERT INTO toren_control.approvals
    (id, agent, run_id, task_id, call_id, tool, arguments, approvers, wake, expires_at, digest,
     parameters, expires_after_s, on_expiry, escalate_to, remind_after_s, remind_at,
     status, decided_by, decided_at, reason, granted_by)
SELECT (r->>'approval_id')::uuid, %(agent)s, %(run_id)s, %(task_id)s, r->>'call_id', r->>'name',
       r->'arguments', ARRAY(SELECT jsonb_array_elements_text(COALESCE(r->'approvers', '[]'))),
       %(wake)s, now() + (r->>'expires_after_s')::float8 * interval '1 second', r->>'digest',
       %(parameters)s::jsonb -> (r->>'name'), (r->>'expires_after_s')::float8,
       COALESCE(r->>'on_expiry', 'deny'),
       ARRAY(SELECT jsonb_array_elements_text(COALESCE(r->'escalate_to', '[]'))),
       (r->>'remind_after_s')::float8,
       now() + (r->>'remind_after_s')::float8 * interval '1 second',
       CASE WHEN g.id IS NULL THEN 'pending' ELSE 'approved' END, g.decided_by,
       CASE WHEN g.id IS NULL THEN NULL ELSE now() END,
       CASE WHEN g.id IS NULL THEN NULL ELSE 'approved always in this run' END, g.id
FROM jsonb_array_elements(%(requests)s) AS r
LEFT JOIN LATERAL (
    SELECT a.id, a.decided_by FROM toren_control.approvals a
    WHERE a.run_id = %(run_id)s AND a.tool = r->>'name' AND a.digest = r->>'digest'
      AND a.scope = 'run' AND a.status = 'approved'
    ORDER BY a.decided_at LIMIT 1
) g ON true
ON CONFLICT (id) DO NOTHING;

-- get_approvals --
SELECT id, agent, run_id, task_id, call_id, tool, arguments, status, approvers, requested_at,
       expires_at, decided_by, decided_at, reason, expires_at <= now() AS due, digest, scope,
       edited_arguments, answer, granted_by, parameters, on_expiry, escalate_to,
       escalation_level, escalated_at, remind_at, reminded_at,
       status = 'pending' AND remind_at <= now()
           AND (reminded_at IS NULL OR reminded_at < remind_at) AS remind_due
FROM toren_control.approvals WHERE id = ANY(%(ids)s::uuid[]);

-- list_approvals --
SELECT id, agent, run_id, task_id, call_id, tool, arguments, status, approvers, requested_at,
       expires_at, decided_by, decided_at, reason, expires_at <= now() AS due, digest, scope,
       edited_arguments, answer, granted_by, parameters, on_expiry, escalate_to,
       escalation_level, escalated_at, remind_at, reminded_at,
       status = 'pending' AND remind_at <= now()
           AND (reminded_at IS NULL OR reminded_at < remind_at) AS remind_due
FROM toren_control.approvals
WHERE (%(agents)s::text[] IS NULL OR agent = ANY(%(agents)s))
  AND (%(agent)s::text IS NULL OR agent = %(agent)s)
  AND (%(run_id)s::uuid IS NULL OR run_id = %(run_id)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY requested_at DESC, id
LIMIT %(limit)s;

-- decide_approval --
-- One statement: the decision (only while pending; a person decides only before the expiry,
-- expire only after it), the run back to running if it waits for approval, and the message
-- that takes the task up again. A pending approval whose run has ended is cancelled instead.
-- Approved with scope 'run': the run's other pending approvals of the same tool and digest
-- are approved too (granted_by this one), and their tasks woken.
WITH target AS (
    SELECT a.id, a.run_id, r.status AS run_status,
           r.status IN ('completed', 'stopped', 'failed', 'cancelled') AS ended
    FROM toren_control.approvals a JOIN {runs} r ON r.id = a.run_id
    WHERE a.id = %(id)s AND a.status = 'pending'
), decided AS (
    UPDATE toren_control.approvals a SET
        status = CASE WHEN target.ended THEN 'cancelled' ELSE %(outcome)s END,
        decided_by = CASE WHEN target.ended THEN 'toren' ELSE %(decided_by)s END,
        reason = CASE WHEN target.ended
                      THEN 'the run ended (' || target.run_status || ') before a decision'
                      ELSE %(reason)s END,
        decided_at = now(),
        scope = CASE WHEN target.ended THEN 'call' ELSE %(scope)s END,
        edited_arguments = CASE WHEN target.ended THEN NULL ELSE %(arguments)s::jsonb END,
        answer = CASE WHEN target.ended THEN NULL ELSE %(answer)s END
    FROM target
    -- re-checked on the row as the winner of a race left it (READ COMMITTED re-reads it)
    WHERE a.id = target.id AND a.status = 'pending' AND (target.ended OR CASE
        WHEN %(outcome)s = 'expired' THEN a.expires_at <= now()
        ELSE a.expires_at IS NULL OR a.expires_at > now() END)
    RETURNING a.id, a.agent, a.run_id, a.wake, a.status, a.scope, a.tool,
              COALESCE(a.digest, '') AS digest, a.decided_by
), granted AS (
    UPDATE toren_control.approvals o SET
        status = 'approved', decided_by = decided.decided_by, decided_at = now(),
        reason = 'approved always in this run', granted_by = decided.id
    FROM decided
    WHERE decided.status = 'approved' AND decided.scope = 'run'
      AND o.run_id = decided.run_id AND o.tool = decided.tool AND o.digest = decided.digest
      AND o.id <> decided.id AND o.status = 'pending'
    RETURNING o.agent, o.run_id, o.wake, o.status
), woken AS (
    UPDATE {runs} r SET status = 'running', updated_at = now()
    FROM decided WHERE r.id = decided.run_id AND r.status = 'awaiting_approval'
), enqueued AS (
    INSERT INTO toren_control.queue (agent, run_id, kind, payload)
    SELECT w.agent, w.run_id, w.wake->>'kind', w.wake->'payload'
    FROM (SELECT DISTINCT agent, run_id, wake FROM (
              SELECT agent, run_id, wake FROM decided WHERE status <> 'cancelled'
              UNION ALL SELECT agent, run_id, wake FROM granted) AS both_) AS w
)
SELECT status FROM decided;

-- escalate_approval --
-- Once: a pending approval whose expiry passed moves to its second approvers, with a new
-- expiry and a new reminder time (the expiry nudge that found it due takes the task up).
UPDATE toren_control.approvals SET
    approvers = escalate_to, escalation_level = escalation_level + 1, escalated_at = now(),
    expires_at = now() + expires_after_s * interval '1 second',
    remind_at = now() + remind_after_s * interval '1 second'
WHERE id = %(id)s AND status = 'pending' AND on_expiry = 'escalate' AND escalation_level = 0
  AND expires_at <= now() AND expires_after_s IS NOT NULL
RETURNING id;

-- mark_reminded --
UPDATE toren_control.approvals SET reminded_at = now()
WHERE id = %(id)s AND status = 'pending' AND remind_at <= now()
  AND (reminded_at IS NULL OR reminded_at < remind_at)
RETURNING id;

-- cancel_approvals --
UPDATE toren_control.approvals
SET status = 'cancelled', decided_by = 'toren', decided_at = now(),
    reason = 'the run was cancelled before a decision'
WHERE run_id = %(run_id)s AND status = 'pending';
-- Schedules (toren_postgres.schedules). Slot times are computed in Python from the cron
-- expression, always against the database clock (now()), never a worker's.

-- database_now --
SELECT now();

-- database_clock --
-- clock_timestamp(), not now(): the moment the statement runs, whatever the transaction
SELECT clock_timestamp();

-- sync_schedule --
-- A schedule as agent.yaml has it now. A new or changed timetable (or an entry that comes
-- back) starts at the next slot computed from now; an unchanged one keeps its next slot.
-- pause is the operator's, never reset here.
INSERT INTO toren_control.schedules AS s
    (agent, name, spec, timezone, input, missed, catchup_limit, next_fire_at, enabled)
VALUES (%(agent)s, %(name)s, %(cron)s, %(timezone)s, %(input)s, %(missed)s, %(catchup_limit)s,
        %(next_fire_at)s, true)
ON CONFLICT (agent, name) DO UPDATE SET
    spec = EXCLUDED.spec, timezone = EXCLUDED.timezone, input = EXCLUDED.input,
    missed = EXCLUDED.missed, catchup_limit = EXCLUDED.catchup_limit, enabled = true,
    updated_at = now(),
    next_fire_at = CASE WHEN s.spec <> EXCLUDED.spec OR s.timezone <> EXCLUDED.timezone
                             OR NOT s.enabled
                        THEN EXCLUDED.next_fire_at ELSE s.next_fire_at END
WHERE (s.spec, s.timezone, s.input, s.missed, s.catchup_limit, s.enabled)
      IS DISTINCT FROM (EXCLUDED.spec, EXCLUDED.timezone, EXCLUDED.input, EXCLUDED.missed,
                        EXCLUDED.catchup_limit, true);

-- retire_schedules --
-- Entries no longer in agent.yaml stop firing; their row and history stay.
UPDATE toren_control.schedules SET enabled = false, updated_at = now()
WHERE agent = %(agent)s AND enabled AND NOT (name = ANY(%(names)s));

-- next_due_schedule --
-- The idle path of every worker's schedule loop: one index scan. Seconds until the earliest
-- slot of the agents served (negative: due now), or NULL if none is scheduled.
-- The first entry of schedules_due_idx per agent: one index probe each, however many schedules.
SELECT extract(epoch FROM min(s.next_fire_at) - now())::float8
FROM unnest(%(agents)s::text[]) AS a(agent)
CROSS JOIN LATERAL (
    SELECT next_fire_at FROM toren_control.schedules
    WHERE agent = a.agent AND enabled AND NOT paused
    ORDER BY next_fire_at LIMIT 1) s;

-- claim_due_schedules --
-- In the transaction that fires them: the row lock is the claim (other workers skip it), the
-- schedule_fires key the guarantee.
SELECT id, agent, name, spec, timezone, input, missed, catchup_limit, next_fire_at, now() AS now
FROM toren_control.schedules
WHERE agent = ANY(%(agents)s) AND enabled AND NOT paused AND next_fire_at <= now()
ORDER BY next_fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- lock_schedule --
SELECT id, agent, name, spec, timezone, input, missed, catchup_limit, next_fire_at, now() AS now,
       enabled, paused
FROM toren_control.schedules WHERE agent = %(agent)s AND name = %(name)s
FOR UPDATE;

-- record_fire --
INSERT INTO toren_control.schedule_fires (agent, schedule, slot_at, run_id, trigger)
VALUES (%(agent)s, %(schedule)s, %(slot_at)s, %(run_id)s, %(trigger)s)
ON CONFLICT DO NOTHING
RETURNING slot_at;

-- advance_schedule --
UPDATE toren_control.schedules SET
    next_fire_at = %(next_fire_at)s,
    last_fired_at = CASE WHEN %(fired)s THEN now() ELSE last_fired_at END,
    last_slot_at = COALESCE(%(last_slot_at)s, last_slot_at),
    skipped_slots = skipped_slots + %(skipped)s
WHERE id = %(id)s;

-- set_schedule_paused --
UPDATE toren_control.schedules SET paused = %(paused)s, updated_at = now(),
    next_fire_at = COALESCE(%(next_fire_at)s, next_fire_at)
WHERE id = %(id)s;

-- list_schedules --
SELECT agent, name, spec, timezone, input, missed, catchup_limit, next_fire_at, last_fired_at,
       last_slot_at, paused, enabled, skipped_slots
FROM toren_control.schedules
WHERE agent = ANY(%(agents)s) AND (%(name)s::text IS NULL OR name = %(name)s)
ORDER BY agent, name;

-- schedule_fires --
SELECT slot_at, run_id, trigger, fired_at FROM toren_control.schedule_fires
WHERE agent = %(agent)s AND schedule = %(name)s
ORDER BY slot_at DESC LIMIT %(limit)s;
-- publish_texts --
-- Pieces of models' text for the live event streams of other processes (toren.host.live),
-- for any number of runs at once (run_ids[i] is the run of payloads[i]): sent only for runs a
-- server process watches (watch_runs), each run's in order; returns the watched runs. One
-- statement per send for a whole worker, however many runs are in model calls. Each payload
-- is distinct (it carries its index), so NOTIFY's folding of identical payloads within a
-- transaction never drops one.
WITH watched AS (
    SELECT DISTINCT w.run_id FROM toren_control.watched_runs w
    WHERE w.run_id = ANY(%(run_ids)s::uuid[]) AND w.expires_at > now()
), sent AS (
    SELECT pg_notify('toren_text', ordered.payload)
    FROM (SELECT p.payload
          FROM unnest(%(run_ids)s::uuid[], %(payloads)s::text[]) WITH ORDINALITY
               AS p(run_id, payload, n)
          WHERE p.run_id IN (SELECT run_id FROM watched)
          ORDER BY p.n) AS ordered
)
SELECT run_id FROM watched WHERE (SELECT count(*) FROM sent) >= 0;

-- queue_depth --
-- Messages per agent for GET /healthz (the console's fleet page). A claimed message is hidden
-- by moving its available_at forward, so it counts as in flight until then. The ready ones
-- waiting for a concurrency slot: the function waiting_for_slots (control migration 0024).
WITH slots AS (
    SELECT w.o_agent AS agent, w.o_waiting AS waiting
    FROM toren_control.waiting_for_slots(%(agents)s::text[]) w
)
SELECT q.agent,
       count(*) FILTER (WHERE q.available_at <= now()) AS ready,
       count(*) FILTER (WHERE q.available_at > now() AND q.claimed_by IS NOT NULL) AS in_flight,
       count(*) FILTER (WHERE q.available_at > now() AND q.claimed_by IS NULL) AS delayed,
       COALESCE(max(s.waiting), 0) AS waiting_concurrency
FROM toren_control.queue q LEFT JOIN slots s ON s.agent = q.agent
WHERE q.agent = ANY(%(agents)s)
GROUP BY q.agent;
-- budget_lock --
-- Reservations of one agent are serialised (transaction-scoped; released at commit), so that
-- the sum each one checks cannot change under it: parallel tasks never over-reserve together.
SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0));

-- reconcile_budget --
-- Held reservations whose task lease is gone (the worker died between reserve and settle):
-- settled at the cost the task's log recorded for that call if its response was recorded, else
-- charged at the worst case reserved ('expired'; the provider may have billed the call).
UPDATE {budgets} r
SET status = CASE WHEN found.cost IS NULL THEN 'expired' ELSE 'settled' END,
    settled_usd = COALESCE(found.cost, r.reserved_usd), settled_at = now()
FROM (
    SELECT h.id,
           (SELECT (e.data->>'cost_usd')::float8 FROM {events} e
            WHERE e.run_id = h.run_id AND e.stream = h.stream AND e.type = 'ModelCallCompleted'
              AND (e.data->>'epoch')::int = h.epoch AND (e.data->>'step')::int = h.step
              AND COALESCE(e.data->>'purpose', 'step') = h.purpose
            ORDER BY e.seq DESC LIMIT 1) AS cost
    FROM {budgets} h
    WHERE h.status = 'held'
      AND NOT EXISTS (SELECT 1 FROM toren_control.leases l
                      WHERE l.run_id = h.run_id AND l.stream = h.stream AND l.epoch = h.epoch
                        AND l.expires_at > now())
) found
WHERE r.id = found.id
RETURNING r.id;

-- budget_committed --
-- What the run and the agent's UTC day have committed: settled and expired spend plus held
-- reservations (released ones cost nothing).
SELECT
    COALESCE(sum(CASE status WHEN 'held' THEN reserved_usd WHEN 'released' THEN 0
                             ELSE settled_usd END)
             FILTER (WHERE run_id = %(run_id)s), 0) AS run_committed,
    COALESCE(sum(CASE status WHEN 'held' THEN reserved_usd WHEN 'released' THEN 0
                             ELSE settled_usd END)
             FILTER (WHERE day = (now() AT TIME ZONE 'UTC')::date), 0) AS day_committed,
    COALESCE(sum(reserved_usd) FILTER (WHERE status = 'held' AND run_id = %(run_id)s), 0)
        AS run_held,
    count(*) FILTER (WHERE status = 'expired' AND run_id = %(run_id)s) AS run_expired
FROM {budgets}
WHERE run_id = %(run_id)s OR day = (now() AT TIME ZONE 'UTC')::date;

-- insert_reservation --
INSERT INTO {budgets} (run_id, stream, epoch, step, purpose, model, reserved_usd)
VALUES (%(run_id)s, %(stream)s, %(epoch)s, %(step)s, %(purpose)s, %(model)s, %(amount)s)
RETURNING id;

-- settle_reservation --
-- Only a held reservation: one already reconciled (its lease expired first) keeps its charge.
UPDATE {budgets}
SET status = CASE WHEN %(cost)s::float8 IS NULL THEN 'released' ELSE 'settled' END,
    settled_usd = COALESCE(%(cost)s::float8, 0), settled_at = now()
WHERE id = %(id)s AND status = 'held';

-- budget_warn --
-- The first reservation of a run (or of a UTC day) past 80 percent of its budget claims the warning;
-- later ones find it taken and say nothing.
INSERT INTO {budget_warnings} (scope, key, run_id)
VALUES (%(scope)s,
        CASE %(scope)s WHEN 'daily' THEN ((now() AT TIME ZONE 'UTC')::date)::text
                       ELSE %(run_id)s::text END,
        %(run_id)s::uuid)
ON CONFLICT DO NOTHING
RETURNING scope;
-- add_file_blob --
-- New content's row: data holds content of one chunk; larger content has data NULL and its
-- chunks copied next (copy_file_blob_chunks), in the same transaction. No row when the content
-- is stored already, or is being stored: this waits for that upload's transaction to end.
INSERT INTO toren_control.file_blobs (sha256, size_bytes, data)
VALUES (%(sha256)s, %(size_bytes)s, %(data)s)
ON CONFLICT (sha256) DO NOTHING
RETURNING sha256;

-- share_file_blob --
-- Stored content, locked so that delete_orphan_blob cannot take it before the new file's row
-- commits. No row: its last file was deleted since add_file_blob looked; add it again.
SELECT sha256 FROM toren_control.file_blobs WHERE sha256 = %(sha256)s FOR KEY SHARE;

-- copy_file_blob_chunks --
COPY toren_control.file_blob_chunks (sha256, seq, data) FROM STDIN (FORMAT BINARY);

-- lock_file_storage --
-- Uploads of new content check the storage quota one at a time, each holding this lock to its
-- commit: two uploads cannot both take the room left for one.
SELECT pg_advisory_xact_lock(%(key)s);

-- stored_file_bytes --
SELECT coalesce(sum(size_bytes), 0)::bigint AS stored_bytes FROM toren_control.file_blobs;

-- add_file --
-- A new file's row (every upload has its own) over content add_file_blob stored or
-- share_file_blob found.
INSERT INTO toren_control.files (agent, run_id, name, content_type, size_bytes, sha256,
                                 uploaded_by)
VALUES (%(agent)s, %(run_id)s, %(name)s, %(content_type)s, %(size_bytes)s, %(sha256)s,
        %(uploaded_by)s)
RETURNING id, agent, run_id, name, content_type, size_bytes, sha256, uploaded_by, created_at;

-- list_files --
-- Keyset pagination: after the last file of the previous page (before_at, before_id), in
-- this order; the coalesce keeps created_at <= ... an index condition of files_created_at.
SELECT id, agent, run_id, name, content_type, size_bytes, sha256, uploaded_by, created_at
FROM toren_control.files
WHERE created_at <= coalesce(%(before_at)s::timestamptz, 'infinity')
  AND (created_at < coalesce(%(before_at)s::timestamptz, 'infinity')
       OR id > %(before_id)s::uuid)
ORDER BY created_at DESC, id LIMIT %(limit)s;

-- get_file --
SELECT id, agent, run_id, name, content_type, size_bytes, sha256, uploaded_by, created_at
FROM toren_control.files WHERE id = %(id)s;

-- read_file --
-- data is NULL when the content is in chunks (read_file_chunks).
SELECT f.id, f.agent, f.run_id, f.name, f.content_type, f.size_bytes, f.sha256, f.uploaded_by,
       f.created_at, coalesce(b.data, f.data) AS data
FROM toren_control.files f LEFT JOIN toren_control.file_blobs b ON b.sha256 = f.sha256
WHERE f.id = %(id)s;

-- read_file_chunks --
SELECT data FROM toren_control.file_blob_chunks WHERE sha256 = %(sha256)s ORDER BY seq;

-- delete_file --
DELETE FROM toren_control.files WHERE id = %(id)s
RETURNING id, agent, run_id, name, content_type, size_bytes, sha256, uploaded_by, created_at;

-- delete_orphan_blob --
-- The content goes with its last file. An upload of the same content racing this holds a key
-- lock on the blob through the files_blob foreign key: the delete then fails (foreign key
-- violation) instead of taking the content from under it, and the blob stays.
DELETE FROM toren_control.file_blobs b WHERE b.sha256 = %(sha256)s
AND NOT EXISTS (SELECT 1 FROM toren_control.files f WHERE f.sha256 = b.sha256);

-- create_fork --
-- A fork (toren jobs fork): the run row, the events copied from the source run into each of
-- its streams (numbered from 1 per stream, in the order given) and its first messages, in one
-- statement, so a fork exists whole or not at all. The source run is only ever read.
WITH run AS (
    INSERT INTO {runs} (id, kind, status, input, forked_from)
    VALUES (%(run_id)s, 'run', 'queued', %(input)s, %(forked_from)s)
    RETURNING id
), appended AS (
    INSERT INTO {events} (run_id, stream, seq, type, data)
    SELECT run.id, e.doc->>'stream', (e.doc->>'seq')::int, e.doc->>'type', e.doc->'data'
    FROM run, json_array_elements(%(events)s) AS e(doc)
), enqueued AS (
    INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at)
    SELECT %(agent)s, run.id, m->>'kind', m->'payload',
           now() + (m->>'delay_s')::float8 * interval '1 second'
    FROM run, jsonb_array_elements(%(messages)s) AS m
)
SELECT id FROM run;

-- fleet_queue --
-- Per agent: messages ready, claimed and delayed, the oldest ready message's wait, the
-- dead letters (GET /metrics, toren top), and the ready messages waiting for a concurrency
-- slot (the function waiting_for_slots, control migration 0024). queue_claim_idx (agent,
-- available_at) serves it.
WITH slots AS (
    SELECT w.o_agent AS agent, w.o_waiting AS waiting
    FROM toren_control.waiting_for_slots(%(agents)s::text[]) w
)
SELECT a.agent,
       (SELECT count(*) FROM toren_control.queue q
        WHERE q.agent = a.agent AND q.available_at <= now()) AS ready,
       (SELECT count(*) FROM toren_control.queue q
        WHERE q.agent = a.agent AND q.available_at > now() AND q.claimed_by IS NOT NULL),
       (SELECT count(*) FROM toren_control.queue q
        WHERE q.agent = a.agent AND q.available_at > now() AND q.claimed_by IS NULL),
       COALESCE((SELECT extract(epoch FROM now() - min(q.available_at))::float8
                 FROM toren_control.queue q
                 WHERE q.agent = a.agent AND q.available_at <= now()), 0),
       (SELECT count(*) FROM toren_control.dead_letters d WHERE d.agent = a.agent),
       COALESCE((SELECT s.waiting FROM slots s WHERE s.agent = a.agent), 0)
FROM unnest(%(agents)s::text[]) AS a(agent);

-- run_queue_state --
-- One run's place in the queue (GET /runs/{id}): its priority and concurrency key (run_flow;
-- none: 0 and the agent-wide key), whether a worker holds one of its messages, has one ready
-- or one delayed, and its agent's limit with the runs of its key executing now.
WITH flow AS (
    SELECT f.priority, f.concurrency_key FROM toren_control.run_flow f
    WHERE f.run_id = %(run_id)s::uuid
)
SELECT COALESCE((SELECT priority FROM flow), 0),
       (SELECT concurrency_key FROM flow),
       EXISTS (SELECT 1 FROM toren_control.queue q WHERE q.run_id = %(run_id)s::uuid
                 AND q.claimed_by IS NOT NULL AND q.available_at > now()),
       EXISTS (SELECT 1 FROM toren_control.queue q WHERE q.run_id = %(run_id)s::uuid
                 AND q.available_at <= now()),
       EXISTS (SELECT 1 FROM toren_control.queue q WHERE q.run_id = %(run_id)s::uuid
                 AND q.available_at > now() AND q.claimed_by IS NULL),
       COALESCE((SELECT g.concurrency_limit FROM toren_control.agents g
                 WHERE g.name = %(agent)s), 0),
       (SELECT count(DISTINCT q.run_id) FROM toren_control.queue q
        WHERE q.agent = %(agent)s AND q.claimed_by IS NOT NULL AND q.available_at > now()
          AND q.run_id IS NOT NULL
          AND q.concurrency_key IS NOT DISTINCT FROM (SELECT concurrency_key FROM flow));

-- fleet_workers --
SELECT version, count(*) FROM toren_control.workers
WHERE heartbeat_at > now() - %(max_age_s)s * interval '1 second'
GROUP BY version;

-- fleet_active_runs --
-- Unfinished runs by status (runs_status_created_idx: finished runs are not read).
SELECT status, count(*) FROM {runs}
WHERE status NOT IN ('completed', 'stopped', 'failed', 'cancelled')
GROUP BY status;

-- runs_in_flight --
-- The oldest unfinished runs, each with its latest model step and its task streams.
SELECT r.id::text, r.status, r.created_at, r.updated_at, r.error,
       COALESCE((SELECT max((e.data->>'step')::int) FROM {events} e
                 WHERE e.run_id = r.id AND e.type = 'ModelCallStarted'), 0),
       (SELECT count(DISTINCT e.stream) FROM {events} e
        WHERE e.run_id = r.id AND e.stream LIKE 'task:%%')
FROM {runs} r
WHERE r.status NOT IN ('completed', 'stopped', 'failed', 'cancelled')
ORDER BY r.created_at
LIMIT %(limit)s;

-- reserve_rate --
-- One call's reservation in every bucket it matches, or how long until it fits (migration
-- 0023, toren_control.reserve_rate).
SELECT o_call_id, o_wait_s, o_waiter_id, o_blocked_by
FROM toren_control.reserve_rate(
    %(buckets)s::text[], %(requests_limits)s::int[], %(input_limits)s::bigint[],
    %(output_limits)s::bigint[], %(window_s)s, %(requests)s, %(input)s, %(output)s,
    %(run_id)s, %(stream)s, %(epoch)s, %(priority)s, %(waiter)s, %(waited_s)s);

-- settle_rate --
-- Replace reservations by what the calls used (a batch: one row per call), each counted from
-- when its request was sent if that is later than its reservation (the provider counted it
-- from its arrival), and tell parked callers on those buckets to look again (unused output
-- tokens came back).
WITH used AS (
    SELECT * FROM unnest(%(calls)s::bigint[], %(requests)s::int[], %(inputs)s::bigint[],
                         %(outputs)s::bigint[], %(sent_s_ago)s::float8[])
                  AS u(call_id, requests, input_tokens, output_tokens, sent_s_ago)
), settled AS (
    UPDATE toren_control.rate_reservations r
    SET requests = u.requests, input_tokens = u.input_tokens, output_tokens = u.output_tokens,
        status = 'settled',
        created_at = GREATEST(r.created_at,
                              now() - COALESCE(u.sent_s_ago, 1e9) * interval '1 second')
    FROM used u
    WHERE r.call_id = u.call_id
    RETURNING r.bucket
)
SELECT pg_notify('toren_rate_limits', '')
WHERE EXISTS (SELECT 1 FROM toren_control.rate_waiters w
              WHERE w.buckets && ARRAY(SELECT DISTINCT bucket FROM settled));

-- pause_rate --
-- A provider's 429 with Retry-After: the buckets take no call from any worker until then.
INSERT INTO toren_control.rate_buckets AS b (name, paused_until, pauses_total)
SELECT name, now() + %(seconds)s * interval '1 second', 1
FROM unnest(%(buckets)s::text[]) AS name
ON CONFLICT (name) DO UPDATE
SET paused_until = GREATEST(COALESCE(b.paused_until, now()), EXCLUDED.paused_until),
    pauses_total = b.pauses_total + 1;

-- withdraw_rate_waiter --
-- A parked call gave up (its run was cancelled, its worker is stopping): the next in line
-- looks again.
WITH gone AS (
    DELETE FROM toren_control.rate_waiters WHERE id = %(id)s RETURNING buckets
)
SELECT pg_notify('toren_rate_limits', '')
FROM gone
WHERE EXISTS (SELECT 1 FROM toren_control.rate_waiters w WHERE w.buckets && gone.buckets);

-- rate_limit_state --
-- Every bucket: its limits per window, what the window holds, calls waiting, pause, counters.
SELECT b.name, b.requests_limit, b.input_limit, b.output_limit, b.window_s,
       COALESCE(u.requests, 0), COALESCE(u.input_tokens, 0), COALESCE(u.output_tokens, 0),
       COALESCE(u.held, 0),
       (SELECT count(*) FROM toren_control.rate_waiters w
        WHERE w.buckets @> ARRAY[b.name]
          AND EXISTS (SELECT 1 FROM toren_control.leases l
                      WHERE l.run_id = w.run_id AND l.stream = w.stream
                        AND l.epoch = w.epoch AND l.expires_at > now())),
       CASE WHEN b.paused_until > now() THEN b.paused_until END,
       b.waits_total, b.wait_seconds_total, b.pauses_total
FROM toren_control.rate_buckets b
LEFT JOIN LATERAL (
    SELECT sum(r.requests) AS requests, sum(r.input_tokens) AS input_tokens,
           sum(r.output_tokens) AS output_tokens,
           count(*) FILTER (WHERE r.status = 'held') AS held
    FROM toren_control.rate_reservations r
    WHERE r.bucket = b.name AND r.created_at > now() - b.window_s * interval '1 second'
) u ON true
ORDER BY b.name;

-- run_totals --
-- RunTotals of a page of runs (RunReader.run_totals): those a finished run keeps in its row,
-- else added up now (run_totals(), agent migration 0029); runs without model calls left out.
SELECT r.id::text, t.model_calls, t.steps, t.cost_usd, t.cost_unknown_calls
FROM {runs} r, LATERAL (
    SELECT r.model_calls, r.steps, r.cost_usd, r.cost_unknown_calls
    WHERE r.model_calls IS NOT NULL
    UNION ALL
    SELECT * FROM {run_totals}(r.id) WHERE r.model_calls IS NULL) t
WHERE r.id = ANY(%(run_ids)s::uuid[]) AND t.model_calls > 0;
