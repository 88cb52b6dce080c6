-- Lineage: what each batch read, staleness, invalidation, the change feed and repairs.

CREATE TABLE batch_inputs (
    batch_id        TEXT NOT NULL REFERENCES batches (batch_id),
    input_dataset   TEXT NOT NULL,
    input_partition TEXT NOT NULL,
    -- The published version current when the batch started (0: none).
    input_version   BIGINT NOT NULL,
    input_batch_id  TEXT,
    PRIMARY KEY (batch_id, input_dataset, input_partition)
);
CREATE INDEX batch_inputs_input ON batch_inputs (input_dataset, input_partition);

ALTER TABLE batches ADD COLUMN allow_unready_inputs BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE batches ADD COLUMN repair_id BIGINT;

-- Why a partition is not fit although its latest batch published.
ALTER TABLE partitions ADD COLUMN stale_upstream JSONB;
ALTER TABLE partitions ADD COLUMN invalidated_reason TEXT;
ALTER TABLE partitions ADD COLUMN invalidated_at TIMESTAMPTZ;
-- The version the current one replaced, for restatement answers.
ALTER TABLE partitions ADD COLUMN prev_published_batch_id TEXT;
ALTER TABLE partitions ADD COLUMN prev_published_row_count BIGINT;

-- Every readiness change, numbered in commit order (writers are serialised).
CREATE TABLE changes (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind           TEXT NOT NULL,
    dataset        TEXT NOT NULL,
    partition_spec TEXT NOT NULL,
    version        BIGINT NOT NULL,
    batch_id       TEXT,
    at             TIMESTAMPTZ NOT NULL,
    detail         JSONB
);
CREATE INDEX changes_dataset ON changes (dataset, id);

CREATE TABLE repairs (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dataset    TEXT NOT NULL,
    partitions JSONB NOT NULL,
    action     TEXT NOT NULL,
    reason     TEXT NOT NULL,
    plan       JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
