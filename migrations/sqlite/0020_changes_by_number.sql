-- Fewer stored bytes per batch (issue 14), as 0019 did for the audit log:
-- the change feed's new rows name their kind and dataset by number
-- (`audit_names`, which holds every name stored once), their batch by
-- `batches.id`, their time as microseconds since 1970-01-01 UTC, and no
-- detail when there is none (NULL, read as `{}`). A publish appends at
-- least one change.
--
-- The rows written before stay in `changes`, which nothing writes any more:
-- the feed is read from both tables (store::feed), so no table is
-- rewritten; retention prunes both. `change_log` numbers its rows on from
-- `changes`' last id, so ids keep their order across the two and cursors
-- stay valid.
CREATE TABLE change_log (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    -- Microseconds since 1970-01-01 UTC.
    at             INTEGER NOT NULL,
    -- audit_names.id of each.
    kind           INTEGER NOT NULL,
    dataset        INTEGER NOT NULL,
    partition_spec TEXT NOT NULL,
    version        INTEGER NOT NULL,
    -- batches.id (batches are never deleted).
    batch          INTEGER,
    detail         TEXT
);
CREATE INDEX change_log_dataset ON change_log (dataset, id);

INSERT INTO sqlite_sequence (name, seq) SELECT 'change_log', seq FROM sqlite_sequence WHERE name = 'changes';

-- The kinds, stored here so that a change's insert finds its kind's number
-- (a kind added later is added by its own migration).
INSERT INTO audit_names (name) VALUES ('published'), ('restated'), ('invalidated'), ('stale'), ('fresh_again')
    ON CONFLICT (name) DO NOTHING;
