-- Push: one outbox for everything that leaves the process (alert webhooks,
-- Airflow asset events, CloudEvents), and the dataset policy that says where
-- a dataset's readiness changes are pushed.

ALTER TABLE datasets ADD COLUMN airflow_asset TEXT;
-- A template over the partition spec's keys; NULL: `{dt}`.
ALTER TABLE datasets ADD COLUMN partition_key TEXT;
ALTER TABLE datasets ADD COLUMN events_url TEXT;

-- webhook_outbox, generalised (ids kept).
ALTER TABLE webhook_outbox RENAME TO outbox;
ALTER INDEX webhook_outbox_due RENAME TO outbox_due;
ALTER INDEX webhook_outbox_alert RENAME TO outbox_alert;
ALTER TABLE outbox ALTER COLUMN alert_id DROP NOT NULL;
-- 'webhook' (an alert), 'airflow' (an asset event), 'events' (a CloudEvent).
ALTER TABLE outbox ADD COLUMN target TEXT NOT NULL DEFAULT 'webhook';
ALTER TABLE outbox ALTER COLUMN target DROP DEFAULT;
-- The change-feed entry an airflow or events delivery reports.
ALTER TABLE outbox ADD COLUMN change_id BIGINT;
-- Deliveries of one partition to one receiver go in id order.
ALTER TABLE outbox ADD COLUMN dataset TEXT;
ALTER TABLE outbox ADD COLUMN partition_spec TEXT;
-- How often a sender took the row: more than attempts when one died mid-delivery.
ALTER TABLE outbox ADD COLUMN claims BIGINT NOT NULL DEFAULT 0;

CREATE INDEX outbox_partition ON outbox (dataset, partition_spec, id);
CREATE INDEX outbox_target ON outbox (target, id);
-- One delivery per change and receiver: a change is never queued twice.
CREATE UNIQUE INDEX outbox_change ON outbox (target, url, change_id);
