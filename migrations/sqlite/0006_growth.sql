-- Growth: repeats of an OpenLineage event are stored once, deliveries refused
-- by the webhook allow-list stop, and history older than --retain is pruned.

-- SHA-256 of the event as received (canonical JSON); NULL for events stored
-- before this migration.
ALTER TABLE openlineage_events ADD COLUMN body_sha256 TEXT;
CREATE UNIQUE INDEX openlineage_events_body ON openlineage_events (body_sha256);
CREATE INDEX openlineage_events_received ON openlineage_events (received_at);

-- Set when a delivery will never be tried again (its host is no longer
-- allowed); `last_error` says why.
ALTER TABLE webhook_outbox ADD COLUMN given_up_at TEXT;
CREATE INDEX webhook_outbox_alert ON webhook_outbox (alert_id);

CREATE INDEX changes_at ON changes (at);
CREATE INDEX alerts_resolved ON alerts (resolved_at);

-- How far each pruned history has been cut: a change-feed cursor before
-- `through_id` of 'changes' points into pruned history.
CREATE TABLE pruned_history (
    history    TEXT PRIMARY KEY,
    through_id INTEGER NOT NULL,
    pruned_at  TEXT NOT NULL
);
