-- Fewer stored bytes per batch (issue 14): only indexes change, no table is rewritten.

-- UNIQUE (task, dt, seq) answers every query batches_task_dt did (a task's
-- batches of a date; seq grows with id within it), so it was a second copy.
DROP INDEX batches_task_dt;

-- Only batches of an OpenLineage run are found by run_ref: batches started
-- without one (most) are no longer entries of the index.
DROP INDEX batches_run_ref;
CREATE INDEX batches_run_ref ON batches (run_ref) WHERE run_ref IS NOT NULL;

-- Likewise an Idempotency-Key is unique among the batches that have one; a
-- PostgreSQL B-tree keeps an entry for every NULL. (SQLite cannot drop a
-- UNIQUE constraint without rebuilding the table, so it keeps its own.)
CREATE UNIQUE INDEX batches_idempotency_key ON batches (idempotency_key) WHERE idempotency_key IS NOT NULL;
ALTER TABLE batches DROP CONSTRAINT batches_idempotency_key_key;
