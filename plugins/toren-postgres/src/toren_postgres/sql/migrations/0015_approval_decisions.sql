-- Approvals, complete (issue 39): a decision is bound to the digest of the arguments it saw,
-- may edit them or answer instead of running the tool, may reach every later call of the
-- same tool and digest in the run (scope 'run': "approve always"), and an approval nobody
-- decided in time may escalate once to a second list of approvers, with reminders.
ALTER TABLE toren_control.approvals
    -- sha256 of the arguments as canonical JSON (NULL for rows kept before: computed then)
    ADD COLUMN digest           text,
    ADD COLUMN scope            text NOT NULL DEFAULT 'call',
    ADD COLUMN edited_arguments jsonb,
    ADD COLUMN answer           text,
    -- the approval whose scope-'run' decision approved this one without asking anybody
    ADD COLUMN granted_by       uuid,
    -- the tool's JSON Schema when requested: what an edit is checked against
    ADD COLUMN parameters       jsonb,
    ADD COLUMN expires_after_s  float8,
    ADD COLUMN on_expiry        text NOT NULL DEFAULT 'deny',
    ADD COLUMN escalate_to      text[] NOT NULL DEFAULT '{}',
    ADD COLUMN escalation_level int NOT NULL DEFAULT 0,
    ADD COLUMN escalated_at     timestamptz,
    ADD COLUMN remind_after_s   float8,
    ADD COLUMN remind_at        timestamptz,
    ADD COLUMN reminded_at      timestamptz;
-- the approve-always lookup made each time approvals are opened
CREATE INDEX approvals_run_grants_idx ON toren_control.approvals (run_id, tool, digest)
    WHERE scope = 'run' AND status = 'approved';
