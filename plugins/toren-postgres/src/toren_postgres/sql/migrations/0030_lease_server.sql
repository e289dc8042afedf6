-- Failover fencing (issue 45, "Faults below Toren"): the database server a lease was taken on,
-- by its postmaster's start time. A replica promoted to primary holds a copy of this table
-- made on the old primary, and with asynchronous replication the old primary may have
-- committed more than the copy holds: a worker that took a lease there may hold in memory a
-- run that is ahead of the new primary's log. Appends honour a lease only on the server that
-- granted it (agent migration 0030), so that worker's next append is refused and the run
-- resumes from what the new primary has; and a lease granted by another server may be taken
-- over at once, since its holder can no longer append. A restart of the same server changes
-- the start time too: it is fenced the same way (a crash of every worker at once: at most the
-- model call each task had in flight is repaid). NULL (a lease a version before this one
-- took with its own statement) is honoured anywhere, as before.
-- The default stamps the leases already there with this server, which granted them.
ALTER TABLE toren_control.leases
    ADD COLUMN server_started_at timestamptz DEFAULT pg_postmaster_start_time();
