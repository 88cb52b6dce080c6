-- Fewer stored bytes per batch (issue 14): an ordinary batch's `started`
-- event, and its publish's `committed` event, are given back by its row
-- instead of being rows of batch_events (store/records.rs, row_events).
-- Columns only, with constant defaults: no table is rewritten.

-- The retry advice's number (domain::retry::compact) of a start that found
-- no residue and cleaned nothing: its `started` event is this row's (at
-- started_at, the lease started_at + lease_seconds, the trigger and run of
-- the row). NULL: the event is a row of batch_events (other starts, and
-- batches started before this column).
ALTER TABLE batches ADD COLUMN start_retry SMALLINT;

-- TRUE: the publish's `committed` event is this row's (at decided_at, with
-- its marker). FALSE: if there is one, it is a row of batch_events.
ALTER TABLE batches ADD COLUMN published_in_row BOOLEAN NOT NULL DEFAULT FALSE;
