-- Schedules (schedules: in agent.yaml) fire exactly once per slot. The schedules table of 0001
-- holds one row per agent and schedule: spec is the cron expression, enabled says whether the
-- entry is still in agent.yaml (a removed entry is kept, disabled, with its history), paused is
-- the operator's switch (toren schedules pause|resume), next_fire_at the next slot (UTC).
ALTER TABLE toren_control.schedules
    ADD COLUMN timezone      text NOT NULL DEFAULT 'UTC',
    ADD COLUMN missed        text NOT NULL DEFAULT 'skip',
    ADD COLUMN catchup_limit integer NOT NULL DEFAULT 5,
    ADD COLUMN paused        boolean NOT NULL DEFAULT false,
    ADD COLUMN last_slot_at  timestamptz,
    ADD COLUMN skipped_slots bigint NOT NULL DEFAULT 0,
    ADD COLUMN updated_at    timestamptz NOT NULL DEFAULT now();

-- Every worker looks for the earliest slot of the agents it serves, every few seconds: the first
-- entry of this index per agent, however many schedules there are.
CREATE INDEX schedules_due_idx ON toren_control.schedules (agent, next_fire_at)
    WHERE enabled AND NOT paused;

-- One row per fired slot, written in the transaction that creates the slot's run. The primary
-- key is the exactly-once guarantee: a slot can start one run, whoever claims it and however
-- often. Manual triggers are slots too (at the moment of the trigger).
CREATE TABLE toren_control.schedule_fires (
    agent     text NOT NULL,
    schedule  text NOT NULL,
    slot_at   timestamptz NOT NULL,
    run_id    uuid NOT NULL,
    trigger   text NOT NULL,
    fired_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent, schedule, slot_at)
);
