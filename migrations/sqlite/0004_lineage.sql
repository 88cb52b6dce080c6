-- Lineage: what each batch read, staleness, invalidation, the change feed and repairs.

CREATE TABLE batch_inputs (
    batch_id        TEXT NOT NULL REFERENCES batches (batch_id),
    input_dataset   TEXT NOT NULL,
    input_partition TEXT NOT NULL,
    -- The published version current when the batch started (0: none).
    input_version   INTEGER NOT NULL,
    input_batch_id  TEXT,
    PRIMARY KEY (batch_id, input_dataset, input_partition)
);
CREATE INDEX batch_inputs_input ON batch_inputs (input_dataset, input_partition);

ALTER TABLE batches ADD COLUMN allow_unready_inputs BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE batches ADD COLUMN repair_id INTEGER;

-- Why a partition is not fit although its latest batch published.
ALTER TABLE partitions ADD COLUMN stale_upstream TEXT;
ALTER TABLE partitions ADD COLUMN invalidated_reason TEXT;
ALTER TABLE partitions ADD COLUMN invalidated_at TEXT;
-- The version the current one replaced, for restatement answers.
ALTER TABLE partitions ADD COLUMN prev_published_batch_id TEXT;
ALTER TABLE partitions ADD COLUMN prev_published_row_count INTEGER;

-- Every readiness change, numbered in commit order (writers are serialised).
CREATE TABLE changes (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    kind           TEXT NOT NULL,
    dataset        TEXT NOT NULL,
    partition_spec TEXT NOT NULL,
    version        INTEGER NOT NULL,
    batch_id       TEXT,
    at             TEXT NOT NULL,
    detail         TEXT
);
CREATE INDEX changes_dataset ON changes (dataset, id);

CREATE TABLE repairs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset    TEXT NOT NULL,
    partitions TEXT NOT NULL,
    action     TEXT NOT NULL,
    reason     TEXT NOT NULL,
    plan       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
