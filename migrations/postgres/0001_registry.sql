-- The registry. Same tables and columns as the SQLite schema, in native types.

CREATE TABLE datasets (
    name              TEXT PRIMARY KEY,
    tier              TEXT NOT NULL DEFAULT 'standard',
    write_mode        TEXT NOT NULL DEFAULT 'overwrite_partition',
    unique_key        JSONB NOT NULL DEFAULT '[]',
    timezone          TEXT NOT NULL DEFAULT 'UTC',
    max_volume_change DOUBLE PRECISION NOT NULL DEFAULT 0.3,
    baseline_periods  BIGINT NOT NULL DEFAULT 7,
    allow_empty       BOOLEAN NOT NULL DEFAULT FALSE,
    owner             TEXT,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL
);

CREATE TABLE task_seq (
    task     TEXT NOT NULL,
    dt       DATE NOT NULL,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (task, dt)
);

CREATE TABLE batches (
    id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id             TEXT NOT NULL UNIQUE,
    task                 TEXT NOT NULL,
    dataset              TEXT NOT NULL REFERENCES datasets (name),
    dt                   DATE NOT NULL,
    seq                  BIGINT NOT NULL,
    state                TEXT NOT NULL,
    trigger_kind         TEXT NOT NULL,
    run_ref              TEXT,
    scope                JSONB,
    idempotency_key      TEXT UNIQUE,
    request_fingerprint  TEXT NOT NULL,
    lease_seconds        BIGINT NOT NULL,
    lease_expires_at     TIMESTAMPTZ NOT NULL,
    started_at           TIMESTAMPTZ NOT NULL,
    decided_at           TIMESTAMPTZ,
    marker               TEXT,
    source               JSONB,
    checks               JSONB,
    fail_stage           TEXT,
    fail_category        TEXT,
    fail_message         TEXT,
    superseded_by        TEXT,
    decision_kind        TEXT,
    decision_fingerprint TEXT,
    decision_status      BIGINT,
    decision_body        JSONB,
    UNIQUE (task, dt, seq)
);
CREATE INDEX batches_dataset ON batches (dataset, id);
CREATE INDEX batches_task_dt ON batches (task, dt, id);
CREATE INDEX batches_state ON batches (state, id);

CREATE TABLE task_produce_log (
    batch_id         TEXT NOT NULL REFERENCES batches (batch_id),
    target_partition TEXT NOT NULL,
    task_name        TEXT NOT NULL,
    dt               DATE NOT NULL,
    target_table     TEXT NOT NULL,
    status           TEXT NOT NULL,
    batch_seq        BIGINT NOT NULL,
    rows_written     BIGINT,
    row_count        BIGINT,
    distinct_keys    BIGINT,
    null_keys        BIGINT,
    metrics          JSONB,
    version          BIGINT,
    start_time       TIMESTAMPTZ NOT NULL,
    finish_time      TIMESTAMPTZ,
    PRIMARY KEY (batch_id, target_partition)
);
CREATE INDEX task_produce_log_partition ON task_produce_log (target_table, target_partition, batch_seq);

CREATE TABLE partitions (
    dataset              TEXT NOT NULL,
    partition_spec       TEXT NOT NULL,
    dt                   DATE NOT NULL,
    baseline_key         TEXT NOT NULL,
    state                TEXT NOT NULL,
    batch_id             TEXT,
    version              BIGINT NOT NULL DEFAULT 0,
    published_batch_id   TEXT,
    published_row_count  BIGINT,
    published_at         TIMESTAMPTZ,
    updated_at           TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (dataset, partition_spec)
);
CREATE INDEX partitions_baseline ON partitions (dataset, baseline_key, dt);
CREATE INDEX partitions_dt ON partitions (dataset, dt, partition_spec);

CREATE TABLE batch_events (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id TEXT NOT NULL REFERENCES batches (batch_id),
    kind     TEXT NOT NULL,
    at       TIMESTAMPTZ NOT NULL,
    detail   JSONB
);
CREATE INDEX batch_events_batch ON batch_events (batch_id, id);
