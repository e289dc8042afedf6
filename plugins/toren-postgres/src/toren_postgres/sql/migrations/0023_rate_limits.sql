-- Provider rate limits shared by every worker of every fleet on this database
-- (docs/guides/flow-control.md, "Provider rate limits").
--
-- A sliding window, not a token bucket: a bucket admits a call when what the calls of the last
-- window (60 s unless the limits file scales it for a test) took, plus this call, fits the
-- limit. It is exact (no window of that length ever holds more than the limit, which is what
-- a provider enforcing "per minute" lets through without a 429) and a full bucket frees at a
-- time computed from its rows, so a waiter sleeps until then instead of polling. Its cost is
-- a sum over the window's rows, read through rate_reservations_window_idx: one row per call
-- and bucket, so a 4,000-requests-per-minute bucket sums at most 4,000 small rows.
CREATE TABLE toren_control.rate_buckets (
    name               text PRIMARY KEY,
    -- as the latest caller configured them, per window (NULL: not limited); for display:
    -- each reservation checks the limits its caller passes
    requests_limit     integer,
    input_limit        bigint,
    output_limit       bigint,
    window_s           double precision NOT NULL DEFAULT 60,
    -- a provider's 429 with Retry-After stops the whole fleet's calls on the bucket until then
    paused_until       timestamptz,
    waits_total        bigint NOT NULL DEFAULT 0,
    wait_seconds_total double precision NOT NULL DEFAULT 0,
    pauses_total       bigint NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- What each call took from each bucket it matched: the estimate before the call (requests,
-- input tokens by characters, output tokens at max_tokens), replaced by the provider's usage
-- once it answered ('settled'). A reservation lives as long as the task lease it was made
-- under: one still 'held' once that lease is gone (its worker died mid-call) is 'released'
-- by the next reservation on the bucket: its output tokens return (no answer was received),
-- its request and input stay counted (the provider may have seen them).
CREATE SEQUENCE toren_control.rate_call_seq;
CREATE TABLE toren_control.rate_reservations (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    call_id       bigint NOT NULL,
    bucket        text NOT NULL,
    requests      integer NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    run_id        uuid NOT NULL,
    stream        text NOT NULL,
    epoch         integer NOT NULL,
    status        text NOT NULL DEFAULT 'held' CHECK (status IN ('held', 'settled', 'released')),
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rate_reservations_window_idx ON toren_control.rate_reservations (bucket, created_at);
CREATE INDEX rate_reservations_call_idx ON toren_control.rate_reservations (call_id);

-- Calls parked until their buckets have room, served by priority (higher first), then by
-- arrival: a call may not take from a bucket while a call ahead of it waits for that bucket
-- (blocked_by: the bucket that stopped it at its latest look). A call held by a bucket of its
-- own (an agent's limits.rate) does not hold others back on a bucket they share.
-- A waiter lives as long as its task lease (renewed by its worker's heartbeat while it waits).
CREATE TABLE toren_control.rate_waiters (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    buckets    text[] NOT NULL,
    blocked_by text NOT NULL,
    priority   integer NOT NULL DEFAULT 0,
    run_id     uuid NOT NULL,
    stream     text NOT NULL,
    epoch      integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rate_waiters_blocked_idx ON toren_control.rate_waiters (blocked_by);
CREATE INDEX rate_waiters_buckets_idx ON toren_control.rate_waiters USING gin (buckets);

-- Seconds until the window of p_bucket has room for p_need of one dimension (1 requests,
-- 2 input tokens, 3 output tokens) when it holds p_used of p_limit: when enough of its oldest
-- rows have left the window (a call larger than the limit waits for an empty window).
CREATE FUNCTION toren_control.rate_wait_s(p_bucket text, p_window interval, p_dimension int,
                                          p_used bigint, p_need bigint, p_limit bigint)
RETURNS double precision LANGUAGE sql STABLE AS $$
    SELECT GREATEST(0, COALESCE(
        (SELECT extract(epoch FROM x.created_at + p_window - now())::float8
         FROM (SELECT r.id, r.created_at,
                      sum(CASE p_dimension WHEN 1 THEN r.requests WHEN 2 THEN r.input_tokens
                                           ELSE r.output_tokens END)
                          OVER (ORDER BY r.created_at, r.id) AS freed
               FROM toren_control.rate_reservations r
               WHERE r.bucket = p_bucket AND r.created_at > now() - p_window) x
         WHERE p_used - x.freed + LEAST(p_need, p_limit) <= p_limit
         ORDER BY x.created_at, x.id LIMIT 1),
        extract(epoch FROM p_window)::float8))
$$;

-- One reservation, one statement for the caller: take p_requests, p_input and p_output from
-- every bucket of p_buckets (sorted by name, locked in that order so two callers never
-- deadlock) if the call fits all of them, no bucket is paused, and no waiter ahead of it (by
-- priority, then arrival) waits for one of them. Granted: o_call_id, and the waiter row
-- (p_waiter) is gone. Not granted: the call is parked as a waiter (o_waiter_id, the same row
-- across retries), with o_wait_s, the seconds until it would fit (NULL: a waiter ahead goes
-- first; wait for a notification), and o_blocked_by, the bucket that stopped it. Reservations
-- and waiters whose task lease is gone are cleared first; rows past the window are deleted.
-- Each limit applies at most in full: a call larger than a limit waits for an empty window.
-- NOTIFY toren_rate_limits tells parked callers to look again.
CREATE FUNCTION toren_control.reserve_rate(
    p_buckets text[], p_requests_limits int[], p_input_limits bigint[],
    p_output_limits bigint[], p_window_s float8, p_requests int, p_input bigint,
    p_output bigint, p_run_id uuid, p_stream text, p_epoch int, p_priority int,
    p_waiter bigint, p_waited_s float8)
RETURNS TABLE (o_call_id bigint, o_wait_s float8, o_waiter_id bigint, o_blocked_by text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_window interval := p_window_s * interval '1 second';
    v_wait float8 := 0;
    v_blocked text;
    v_ahead text;
    v_call bigint;
    v_waiter bigint := p_waiter;
    b record;
    v_dim_wait float8;
BEGIN
    INSERT INTO toren_control.rate_buckets AS rb
        (name, requests_limit, input_limit, output_limit, window_s)
    SELECT l.name, l.r, l.i, l.o, p_window_s
    FROM unnest(p_buckets, p_requests_limits, p_input_limits, p_output_limits)
         AS l(name, r, i, o)
    ORDER BY l.name
    ON CONFLICT (name) DO NOTHING;
    PERFORM 1 FROM toren_control.rate_buckets
    WHERE name = ANY (p_buckets) ORDER BY name FOR UPDATE;
    UPDATE toren_control.rate_buckets rb
    SET requests_limit = l.r, input_limit = l.i, output_limit = l.o, window_s = p_window_s
    FROM unnest(p_buckets, p_requests_limits, p_input_limits, p_output_limits)
         AS l(name, r, i, o)
    WHERE rb.name = l.name
      AND (rb.requests_limit, rb.input_limit, rb.output_limit, rb.window_s)
          IS DISTINCT FROM (l.r, l.i, l.o, p_window_s);

    DELETE FROM toren_control.rate_reservations r
    WHERE r.bucket = ANY (p_buckets) AND r.created_at <= now() - v_window;
    UPDATE toren_control.rate_reservations r SET status = 'released', output_tokens = 0
    WHERE r.bucket = ANY (p_buckets) AND r.status = 'held'
      AND NOT EXISTS (SELECT 1 FROM toren_control.leases l
                      WHERE l.run_id = r.run_id AND l.stream = r.stream
                        AND l.epoch = r.epoch AND l.expires_at > now());
    DELETE FROM toren_control.rate_waiters w
    WHERE w.buckets && p_buckets
      AND NOT EXISTS (SELECT 1 FROM toren_control.leases l
                      WHERE l.run_id = w.run_id AND l.stream = w.stream
                        AND l.epoch = w.epoch AND l.expires_at > now());

    SELECT rb.name, extract(epoch FROM rb.paused_until - now())::float8
    INTO v_blocked, v_wait
    FROM toren_control.rate_buckets rb
    WHERE rb.name = ANY (p_buckets) AND rb.paused_until > now()
    ORDER BY rb.paused_until DESC LIMIT 1;
    v_wait := COALESCE(v_wait, 0);

    FOR b IN
        SELECT l.name, l.r, l.i, l.o,
               COALESCE(sum(r.requests), 0)::bigint AS used_r,
               COALESCE(sum(r.input_tokens), 0)::bigint AS used_i,
               COALESCE(sum(r.output_tokens), 0)::bigint AS used_o
        FROM unnest(p_buckets, p_requests_limits, p_input_limits, p_output_limits)
             AS l(name, r, i, o)
        LEFT JOIN toren_control.rate_reservations r
               ON r.bucket = l.name AND r.created_at > now() - v_window
        GROUP BY l.name, l.r, l.i, l.o
    LOOP
        IF b.r IS NOT NULL AND b.used_r + LEAST(p_requests, b.r) > b.r THEN
            v_dim_wait := toren_control.rate_wait_s(b.name, v_window, 1, b.used_r, p_requests, b.r);
            IF v_dim_wait >= v_wait THEN v_wait := v_dim_wait; v_blocked := b.name; END IF;
        END IF;
        IF b.i IS NOT NULL AND b.used_i + LEAST(p_input, b.i) > b.i THEN
            v_dim_wait := toren_control.rate_wait_s(b.name, v_window, 2, b.used_i, p_input, b.i);
            IF v_dim_wait >= v_wait THEN v_wait := v_dim_wait; v_blocked := b.name; END IF;
        END IF;
        IF b.o IS NOT NULL AND b.used_o + LEAST(p_output, b.o) > b.o THEN
            v_dim_wait := toren_control.rate_wait_s(b.name, v_window, 3, b.used_o, p_output, b.o);
            IF v_dim_wait >= v_wait THEN v_wait := v_dim_wait; v_blocked := b.name; END IF;
        END IF;
    END LOOP;

    SELECT w.blocked_by INTO v_ahead
    FROM toren_control.rate_waiters w
    WHERE w.blocked_by = ANY (p_buckets) AND w.id IS DISTINCT FROM v_waiter
      AND (w.priority > p_priority
           OR (w.priority = p_priority AND (v_waiter IS NULL OR w.id < v_waiter)))
    ORDER BY w.priority DESC, w.id
    LIMIT 1;

    IF v_blocked IS NULL AND v_ahead IS NULL THEN
        v_call := nextval('toren_control.rate_call_seq');
        INSERT INTO toren_control.rate_reservations
            (call_id, bucket, requests, input_tokens, output_tokens, run_id, stream, epoch)
        SELECT v_call, name, p_requests, p_input, p_output, p_run_id, p_stream, p_epoch
        FROM unnest(p_buckets) AS name;
        IF v_waiter IS NOT NULL THEN
            DELETE FROM toren_control.rate_waiters WHERE id = v_waiter;
            -- the next in line looks again now that this one is served
            IF EXISTS (SELECT 1 FROM toren_control.rate_waiters w
                       WHERE w.buckets && p_buckets) THEN
                PERFORM pg_notify('toren_rate_limits', '');
            END IF;
        END IF;
        IF p_waited_s > 0 THEN
            UPDATE toren_control.rate_buckets
            SET waits_total = waits_total + 1, wait_seconds_total = wait_seconds_total + p_waited_s
            WHERE name = ANY (p_buckets);
        END IF;
        RETURN QUERY SELECT v_call, 0::float8, NULL::bigint, NULL::text;
        RETURN;
    END IF;
    -- (a waiter whose row is gone lost it with its lease, which has since been renewed:
    -- it joins the line again at its end)
    v_blocked := COALESCE(v_blocked, v_ahead);
    UPDATE toren_control.rate_waiters SET blocked_by = v_blocked
    WHERE id = v_waiter AND blocked_by IS DISTINCT FROM v_blocked;
    IF NOT FOUND AND (v_waiter IS NULL
       OR NOT EXISTS (SELECT 1 FROM toren_control.rate_waiters WHERE id = v_waiter)) THEN
        INSERT INTO toren_control.rate_waiters
            (buckets, blocked_by, priority, run_id, stream, epoch)
        VALUES (p_buckets, v_blocked, p_priority, p_run_id, p_stream, p_epoch)
        RETURNING id INTO v_waiter;
    END IF;
    RETURN QUERY SELECT NULL::bigint, CASE WHEN v_ahead IS NOT NULL THEN NULL ELSE v_wait END,
                        v_waiter, v_blocked;
END $$;
