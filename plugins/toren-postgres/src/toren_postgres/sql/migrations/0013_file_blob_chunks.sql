-- Content larger than one chunk (toren.files.CHUNK_BYTES, 1 MiB) is stored as numbered chunks,
-- written and read a chunk at a time, so an upload costs the server a chunk of memory rather
-- than the whole file; file_blobs keeps its row (the SHA-256 and size every file points at)
-- with data NULL. Content that fits one chunk stays in file_blobs.data, as every blob before
-- this migration does, so a process of the previous version reads it still.
ALTER TABLE toren_control.file_blobs ALTER COLUMN data DROP NOT NULL;

CREATE TABLE toren_control.file_blob_chunks (
    sha256  text NOT NULL REFERENCES toren_control.file_blobs (sha256) ON DELETE CASCADE,
    seq     integer NOT NULL,
    data    bytea NOT NULL,
    PRIMARY KEY (sha256, seq)
);
