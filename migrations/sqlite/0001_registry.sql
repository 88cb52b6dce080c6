-- The registry. Timestamps are RFC 3339 text in UTC, dates are YYYY-MM-DD text,
-- JSON documents are text.

CREATE TABLE datasets (
    name              TEXT PRIMARY KEY,
    tier              TEXT NOT NULL DEFAULT 'standard',
    write_mode        TEXT NOT NULL DEFAULT 'overwrite_partition',
    unique_key        TEXT NOT NULL DEFAULT '[]',
    timezone          TEXT NOT NULL DEFAULT 'UTC',
    max_volume_change REAL NOT NULL DEFAULT 0.3,
    baseline_periods  INTEGER NOT NULL DEFAULT 7,
    allow_empty       BOOLEAN NOT NULL DEFAULT FALSE,
    owner             TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);

-- One row per (task, dt): the last sequence number handed out.
CREATE TABLE task_seq (
    task     TEXT NOT NULL,
    dt       TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    PRIMARY KEY (task, dt)
);

CREATE TABLE batches (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id             TEXT NOT NULL UNIQUE,
    task                 TEXT NOT NULL,
    dataset              TEXT NOT NULL REFERENCES datasets (name),
    dt                   TEXT NOT NULL,
    seq                  INTEGER NOT NULL,
    state                TEXT NOT NULL,
    trigger_kind         TEXT NOT NULL,
    run_ref              TEXT,
    scope                TEXT,
    idempotency_key      TEXT UNIQUE,
    request_fingerprint  TEXT NOT NULL,
    lease_seconds        INTEGER NOT NULL,
    lease_expires_at     TEXT NOT NULL,
    started_at           TEXT NOT NULL,
    decided_at           TEXT,
    marker               TEXT,
    source               TEXT,
    checks               TEXT,
    fail_stage           TEXT,
    fail_category        TEXT,
    fail_message         TEXT,
    superseded_by        TEXT,
    decision_kind        TEXT,
    decision_fingerprint TEXT,
    decision_status      INTEGER,
    decision_body        TEXT,
    UNIQUE (task, dt, seq)
);
CREATE INDEX batches_dataset ON batches (dataset, id);
CREATE INDEX batches_task_dt ON batches (task, dt, id);
CREATE INDEX batches_state ON batches (state, id);

-- The registry as people query it: one row per (batch, partition).
CREATE TABLE task_produce_log (
    batch_id         TEXT NOT NULL REFERENCES batches (batch_id),
    target_partition TEXT NOT NULL,
    task_name        TEXT NOT NULL,
    dt               TEXT NOT NULL,
    target_table     TEXT NOT NULL,
    status           TEXT NOT NULL,
    batch_seq        INTEGER NOT NULL,
    rows_written     INTEGER,
    row_count        INTEGER,
    distinct_keys    INTEGER,
    null_keys        INTEGER,
    metrics          TEXT,
    version          INTEGER,
    start_time       TEXT NOT NULL,
    finish_time      TEXT,
    PRIMARY KEY (batch_id, target_partition)
);
CREATE INDEX task_produce_log_partition ON task_produce_log (target_table, target_partition, batch_seq);

-- Each partition's current standing, kept in step with task_produce_log in the
-- same transaction: what /ready reads.
CREATE TABLE partitions (
    dataset              TEXT NOT NULL,
    partition_spec       TEXT NOT NULL,
    dt                   TEXT NOT NULL,
    baseline_key         TEXT NOT NULL,
    state                TEXT NOT NULL,
    batch_id             TEXT,
    version              INTEGER NOT NULL DEFAULT 0,
    published_batch_id   TEXT,
    published_row_count  INTEGER,
    published_at         TEXT,
    updated_at           TEXT NOT NULL,
    PRIMARY KEY (dataset, partition_spec)
);
CREATE INDEX partitions_baseline ON partitions (dataset, baseline_key, dt);
CREATE INDEX partitions_dt ON partitions (dataset, dt, partition_spec);

CREATE TABLE batch_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL REFERENCES batches (batch_id),
    kind     TEXT NOT NULL,
    at       TEXT NOT NULL,
    detail   TEXT
);
CREATE INDEX batch_events_batch ON batch_events (batch_id, id);
