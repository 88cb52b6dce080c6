-- Fewer stored bytes per batch (issue 14): the instants of a batch's row
-- (lease_expires_at, started_at, decided_at) and of a partition's
-- (published_at, updated_at) are written from now on as microseconds since
-- 1970-01-01 UTC in `{column}_us` (an integer: 8 bytes where the text took
-- 27), as audit_log.at and change_log.at already are, and their text column
-- holds '' (it is NOT NULL, and SQLite changes that only by rewriting the
-- table). Rows written before keep their text; both read as the same text
-- form (store::db::Dialect::split_instant). Columns added, no table
-- rewritten. PostgreSQL keeps these columns as they are: a TIMESTAMPTZ
-- takes 8 bytes already, so it has no migration 0022.
--
-- task_produce_log keeps its text times: it is the table people query.
ALTER TABLE batches ADD COLUMN lease_expires_at_us INTEGER;
ALTER TABLE batches ADD COLUMN started_at_us INTEGER;
ALTER TABLE batches ADD COLUMN decided_at_us INTEGER;
ALTER TABLE partitions ADD COLUMN published_at_us INTEGER;
ALTER TABLE partitions ADD COLUMN updated_at_us INTEGER;
