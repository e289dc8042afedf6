-- Files are content-addressed: each distinct content is kept once in file_blobs, by SHA-256,
-- and every file row (a name, a type, who uploaded it) points at it through a foreign key, so
-- a blob cannot be deleted while a file (even one being uploaded) refers to it. Rows of the
-- original table had their bytes in files.data: they are copied to file_blobs, and the column
-- stays (NULL for new rows). A file need not belong to an agent or a run.
CREATE TABLE toren_control.file_blobs (
    sha256      text PRIMARY KEY,
    size_bytes  bigint NOT NULL,
    data        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO toren_control.file_blobs (sha256, size_bytes, data)
SELECT DISTINCT ON (sha256) sha256, size_bytes, data FROM toren_control.files
ORDER BY sha256, created_at;

ALTER TABLE toren_control.files
    ALTER COLUMN agent DROP NOT NULL,
    ALTER COLUMN data DROP NOT NULL,
    ADD COLUMN uploaded_by text,
    ADD CONSTRAINT files_blob FOREIGN KEY (sha256) REFERENCES toren_control.file_blobs (sha256);

CREATE INDEX files_sha256 ON toren_control.files (sha256);
CREATE INDEX files_created_at ON toren_control.files (created_at DESC, id);
