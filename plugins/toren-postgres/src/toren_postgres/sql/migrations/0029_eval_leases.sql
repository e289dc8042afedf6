-- Evals that survive a server restart (docs/guides/evals.md, "Over HTTP"). An eval started
-- over HTTP is resumable by any server serving its agent (auto_resume); the server working it
-- holds a lease (lease_holder until lease_expires_at, by this database's clock) and renews it
-- while it works. A server that starts, or finds a lease expired (its holder was killed),
-- claims the eval and goes on with it: one server at a time, whatever the number of servers.
ALTER TABLE toren_control.evals
    ADD COLUMN auto_resume      boolean NOT NULL DEFAULT false,
    ADD COLUMN lease_holder     text,
    ADD COLUMN lease_expires_at timestamptz;
-- what a server looks for: running evals to resume, by agent
CREATE INDEX evals_resumable_idx ON toren_control.evals (agent, created_at)
    WHERE status = 'running' AND auto_resume;
