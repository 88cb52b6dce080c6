-- Fewer stored bytes per batch (issue 14): a start numbers its batch from
-- the batches of its task and date (MAX(seq) + 1, one seek on their UNIQUE
-- (task, dt, seq) index), so the table that kept the last number of each
-- went. Every number it held is that maximum: a start wrote both in one
-- transaction, and batches are never deleted.
DROP TABLE task_seq;
