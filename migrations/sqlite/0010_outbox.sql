-- Push: one outbox for everything that leaves the process (alert webhooks,
-- Airflow asset events, CloudEvents), and the dataset policy that says where
-- a dataset's readiness changes are pushed.

ALTER TABLE datasets ADD COLUMN airflow_asset TEXT;
-- A template over the partition spec's keys; NULL: `{dt}`.
ALTER TABLE datasets ADD COLUMN partition_key TEXT;
ALTER TABLE datasets ADD COLUMN events_url TEXT;

-- webhook_outbox, generalised. SQLite cannot drop the NOT NULL of alert_id
-- in place, so the table is rebuilt (ids kept).
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    -- 'webhook' (an alert), 'airflow' (an asset event), 'events' (a CloudEvent).
    target          TEXT NOT NULL,
    alert_id        INTEGER REFERENCES alerts (id),
    -- The change-feed entry an airflow or events delivery reports.
    change_id       INTEGER,
    -- Deliveries of one partition to one receiver go in id order.
    dataset         TEXT,
    partition_spec  TEXT,
    url             TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    payload         TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    -- How often a sender took the row: more than attempts when one died mid-delivery.
    claims          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    claimed_until   TEXT,
    delivered_at    TEXT,
    given_up_at     TEXT,
    last_error      TEXT,
    created_at      TEXT NOT NULL
);
INSERT INTO outbox (id, target, alert_id, url, idempotency_key, payload, attempts, next_attempt_at, claimed_until,
                    delivered_at, given_up_at, last_error, created_at)
    SELECT id, 'webhook', alert_id, url, idempotency_key, payload, attempts, next_attempt_at, claimed_until,
           delivered_at, given_up_at, last_error, created_at FROM webhook_outbox;
DROP TABLE webhook_outbox;

CREATE INDEX outbox_due ON outbox (delivered_at, next_attempt_at);
CREATE INDEX outbox_alert ON outbox (alert_id);
CREATE INDEX outbox_partition ON outbox (dataset, partition_spec, id);
CREATE INDEX outbox_target ON outbox (target, id);
-- One delivery per change and receiver: a change is never queued twice.
CREATE UNIQUE INDEX outbox_change ON outbox (target, url, change_id);
