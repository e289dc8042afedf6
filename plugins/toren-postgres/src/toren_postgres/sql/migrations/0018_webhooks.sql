-- Completion webhooks (docs/guides/webhooks.md): whom to tell when a run ends or parks, every
-- delivery, and every attempt of it. A trigger on each agent's runs table (agent migration
-- 0018) writes the deliveries in the transaction that changes the run's status, whichever
-- write that is (an append, a cancel, the guardian's dead letter): a run cannot end without
-- its deliveries being written. The host's webhook dispatcher claims and sends them.

-- An agent's notify: (agent.yaml), as the fleet serving it registered it: a list of
-- {"url", "events", "secret_env"}.
ALTER TABLE toren_control.agents ADD COLUMN notify jsonb NOT NULL DEFAULT '[]';

CREATE TABLE toren_control.webhook_deliveries (
    -- the event id receivers deduplicate on: the same on every attempt
    id              uuid PRIMARY KEY,
    -- the order deliveries were written in (those of one status change share occurred_at)
    n               bigint GENERATED ALWAYS AS IDENTITY,
    agent           text NOT NULL,
    run_id          uuid NOT NULL,
    -- finished | awaiting_approval | awaiting_input
    event           text NOT NULL,
    run_status      text NOT NULL,
    url             text NOT NULL,
    -- the environment variable holding the signing secret (NULL: TOREN_WEBHOOK_SECRET);
    -- never the secret itself
    secret_env      text,
    -- run (a webhook given with the run) or agent (its notify:)
    source          text NOT NULL,
    -- pending | delivered | failed
    state           text NOT NULL DEFAULT 'pending',
    attempts        integer NOT NULL DEFAULT 0,
    -- the body as first sent, sent unchanged on every retry
    body            text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    claimed_by      text,
    occurred_at     timestamptz NOT NULL DEFAULT now(),
    ended_at        timestamptz,
    last_error      text
);
CREATE INDEX webhook_deliveries_due_idx ON toren_control.webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_run_idx ON toren_control.webhook_deliveries (run_id);

CREATE TABLE toren_control.webhook_attempts (
    delivery_id uuid NOT NULL
        REFERENCES toren_control.webhook_deliveries (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    started_at  timestamptz NOT NULL,
    duration_ms double precision NOT NULL,
    -- the receiver's HTTP status; NULL when no response came (error says why)
    status_code integer,
    error       text,
    PRIMARY KEY (delivery_id, attempt)
);

-- The trigger function of every agent's runs table: one delivery per subscription (the run's
-- webhooks, then its agent's notify:) that asked for this event. A run ends once (from a
-- status that is not terminal); it may park many times (each is an event of its own).
CREATE FUNCTION toren_control.enqueue_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_event text;
    v_agent text;
    v_notify jsonb;
BEGIN
    IF NEW.status IN ('completed', 'stopped', 'failed', 'cancelled') THEN
        IF OLD.status IN ('completed', 'stopped', 'failed', 'cancelled') THEN
            RETURN NULL;
        END IF;
        v_event := 'finished';
    ELSE
        v_event := NEW.status;  -- awaiting_approval or awaiting_input (the trigger's WHEN)
    END IF;
    SELECT a.name, a.notify INTO v_agent, v_notify
    FROM toren_control.agents a WHERE a.schema_name = TG_TABLE_SCHEMA;
    INSERT INTO toren_control.webhook_deliveries (id, agent, run_id, event, run_status, url,
                                                  secret_env, source)
    SELECT gen_random_uuid(), COALESCE(v_agent, TG_TABLE_SCHEMA), NEW.id, v_event, NEW.status,
           s.doc->>'url', s.doc->>'secret_env', s.source
    FROM (SELECT w.doc, 'run' AS source, w.n
          FROM jsonb_array_elements(COALESCE(NEW.webhooks, '[]')) WITH ORDINALITY AS w(doc, n)
          UNION ALL
          SELECT a.doc, 'agent', 1000 + a.n
          FROM jsonb_array_elements(COALESCE(v_notify, '[]')) WITH ORDINALITY AS a(doc, n)) s
    WHERE s.doc->'events' ? v_event
    ORDER BY s.n;
    IF FOUND THEN
        PERFORM pg_notify('toren_webhooks', '');
    END IF;
    RETURN NULL;
END;
$$;
