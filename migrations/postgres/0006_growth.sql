-- Growth: repeats of an OpenLineage event are stored once, deliveries refused
-- by the webhook allow-list stop, and history older than --retain is pruned.
-- Same tables and columns as the SQLite schema, in native types.

ALTER TABLE openlineage_events ADD COLUMN body_sha256 TEXT;
CREATE UNIQUE INDEX openlineage_events_body ON openlineage_events (body_sha256);
CREATE INDEX openlineage_events_received ON openlineage_events (received_at);

ALTER TABLE webhook_outbox ADD COLUMN given_up_at TIMESTAMPTZ;
CREATE INDEX webhook_outbox_alert ON webhook_outbox (alert_id);

CREATE INDEX changes_at ON changes (at);
CREATE INDEX alerts_resolved ON alerts (resolved_at);

CREATE TABLE pruned_history (
    history    TEXT PRIMARY KEY,
    through_id BIGINT NOT NULL,
    pruned_at  TIMESTAMPTZ NOT NULL
);
