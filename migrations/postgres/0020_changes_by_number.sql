-- Fewer stored bytes per batch (issue 14), as 0019 did for the audit log:
-- the change feed's new rows name their kind and dataset by number
-- (`audit_names`, which holds every name stored once), their batch by
-- `batches.id`, and no detail when there is none (NULL, read as `{}`). A
-- publish appends at least one change. Same tables and columns as the
-- SQLite schema (whose `at` is an integer).
--
-- The rows written before stay in `changes`, which nothing writes any more:
-- the feed is read from both tables (store::feed), so no table is
-- rewritten; retention prunes both. `change_log` takes its ids from
-- `changes`' sequence, so ids keep their order across the two (even while
-- a replica of the version before still writes `changes`) and cursors
-- stay valid.
CREATE TABLE change_log (
    id             BIGINT PRIMARY KEY,
    at             TIMESTAMPTZ NOT NULL,
    -- audit_names.id of each.
    kind           INTEGER NOT NULL,
    dataset        INTEGER NOT NULL,
    version        BIGINT NOT NULL,
    -- batches.id (batches are never deleted).
    batch          BIGINT,
    partition_spec TEXT NOT NULL,
    detail         JSONB
);
-- `change_log` depends on `changes`' sequence from here on: whoever drops
-- `changes` one day gives `change_log` a sequence of its own first.
DO $$
BEGIN
    EXECUTE format('ALTER TABLE change_log ALTER COLUMN id SET DEFAULT nextval(%L)', pg_get_serial_sequence('changes', 'id'));
END
$$;
CREATE INDEX change_log_dataset ON change_log (dataset, id);

-- The kinds, stored here so that a change's insert finds its kind's number
-- (a kind added later is added by its own migration).
INSERT INTO audit_names (name) VALUES ('published'), ('restated'), ('invalidated'), ('stale'), ('fresh_again')
    ON CONFLICT (name) DO NOTHING;
