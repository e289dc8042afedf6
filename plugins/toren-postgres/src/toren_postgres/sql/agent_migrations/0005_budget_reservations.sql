-- The budget ledger: every model call of an agent with a budget reserves its worst-case cost
-- here before it is made, and settles the actual cost after. Reservations are serialised per
-- agent (a transaction-scoped advisory lock), so the parallel tasks of a run can never together
-- reserve more than limits.maxBudgetUsd, nor all runs of a UTC day more than
-- limits.dailyBudgetUsd. A reservation lives as long as the task lease (stream, epoch) it was
-- made under; once that lease is gone a held one is reconciled: settled from the task's log if
-- the response was recorded, else charged at its worst case ('expired').
CREATE TABLE budget_reservations (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id       uuid NOT NULL,
    stream       text NOT NULL,
    epoch        integer NOT NULL,
    step         integer NOT NULL,
    purpose      text NOT NULL,
    model        text NOT NULL,
    reserved_usd double precision NOT NULL,
    settled_usd  double precision,
    status       text NOT NULL DEFAULT 'held'
                 CHECK (status IN ('held', 'settled', 'released', 'expired')),
    day          date NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')::date,
    created_at   timestamptz NOT NULL DEFAULT now(),
    settled_at   timestamptz
);
CREATE INDEX budget_reservations_run_idx ON budget_reservations (run_id);
CREATE INDEX budget_reservations_day_idx ON budget_reservations (day);
CREATE INDEX budget_reservations_held_idx ON budget_reservations (id) WHERE status = 'held';

-- The 80% warnings already given: one per run (scope 'run', key the run id) and one per UTC day
-- (scope 'daily', key the date), so a budget hovering around 80% warns once.
CREATE TABLE budget_warnings (
    scope      text NOT NULL,
    key        text NOT NULL,
    run_id     uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);
