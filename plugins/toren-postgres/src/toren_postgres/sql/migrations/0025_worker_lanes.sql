-- Runtime lanes (agent.yaml runtime: short|long; toren worker --lane). Each agent records its
-- lane, as the process that registered it last had it, and each worker the lane it serves:
-- GET /healthz, GET /fleet and toren top show both, and which lane's work waits unserved.
-- Existing agents are short (the default of runtime:) until a process serving them registers
-- them again; workers signed in before this served every agent they loaded, which is the
-- lane 'all', and a worker of an older version (a rolling deploy) keeps that default.

ALTER TABLE toren_control.agents
    ADD COLUMN runtime text NOT NULL DEFAULT 'short' CHECK (runtime IN ('short', 'long'));

ALTER TABLE toren_control.workers
    ADD COLUMN lane text NOT NULL DEFAULT 'all' CHECK (lane IN ('short', 'long', 'all'));
