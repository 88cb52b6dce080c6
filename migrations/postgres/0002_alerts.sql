-- Leases, retry policy, deadlines, alerts and their webhook outbox.

ALTER TABLE datasets ADD COLUMN max_partitions_per_batch BIGINT NOT NULL DEFAULT 31;
ALTER TABLE datasets ADD COLUMN deadline JSONB;
ALTER TABLE datasets ADD COLUMN webhook_url TEXT;

-- When the task reported that its write to the target committed.
ALTER TABLE batches ADD COLUMN written_at TIMESTAMPTZ;

CREATE TABLE alerts (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- One alert per cause: 'rejected:<batch_id>', 'deadline_missed:<dataset>:<dt>', …
    dedup_key          TEXT NOT NULL UNIQUE,
    kind               TEXT NOT NULL,
    state              TEXT NOT NULL,
    severity           TEXT NOT NULL,
    task               TEXT,
    dataset            TEXT NOT NULL,
    dt                 DATE,
    partitions         JSONB NOT NULL,
    batch_id           TEXT,
    stage              TEXT,
    category           TEXT,
    failing_checks     JSONB NOT NULL,
    downstream         JSONB NOT NULL,
    owner              TEXT,
    recommended_action TEXT NOT NULL,
    retryable          BOOLEAN NOT NULL,
    message            TEXT NOT NULL,
    raised_at          TIMESTAMPTZ NOT NULL,
    resolved_at        TIMESTAMPTZ
);
CREATE INDEX alerts_state ON alerts (state, id);
CREATE INDEX alerts_dataset_dt ON alerts (dataset, dt, state);

-- Alerts waiting to be POSTed to webhooks: written in the transaction that
-- raised the alert, so none is lost, and retried until delivered.
CREATE TABLE webhook_outbox (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alert_id        BIGINT NOT NULL REFERENCES alerts (id),
    url             TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    payload         JSONB NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    claimed_until   TIMESTAMPTZ,
    delivered_at    TIMESTAMPTZ,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (delivered_at, next_attempt_at);
