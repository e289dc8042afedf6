-- Retention (docs/guides/retention.md, "What binds an object to its run"): each archived run's
-- object is bound to the run by the SHA-256 of the stored bytes, their length and their length
-- decompressed, recorded when the run was archived. A read or a restore refuses an object that
-- does not match. Runs archived before this migration have none of the three (NULL): they are
-- read with the checks the index allows (the guide says which). NOT VALID: the rows already
-- there hold NULLs, which pass, so the check need not scan them under an exclusive lock on a
-- deployment with many archived runs; new rows are checked.
ALTER TABLE archived_runs
    ADD COLUMN sha256        text,
    ADD COLUMN object_bytes  bigint,
    ADD COLUMN content_bytes bigint,
    ADD CONSTRAINT archived_runs_digest_check CHECK (
        (sha256 IS NULL AND object_bytes IS NULL AND content_bytes IS NULL)
        OR (sha256 ~ '^[0-9a-f]{64}$' AND object_bytes > 0 AND content_bytes > 0)) NOT VALID;
