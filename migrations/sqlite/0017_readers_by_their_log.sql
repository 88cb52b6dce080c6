-- Fewer stored bytes and index writes per batch (issue 14): the lineage
-- walks (staleness::CONSUMERS_SQL, lineage::DOWNSTREAM_SQL) find a reading
-- batch's partitions through its `task_produce_log` rows and the
-- partitions' primary key, not by the batch id stored in the partition, so
-- `partitions` needs no index on `published_batch_id` or `batch_id`. A
-- publish, which sets both, then changes no indexed column of its
-- partition, and PostgreSQL updates the row in place (HOT): no new entry
-- in any of the table's indexes. Dropping an index rewrites no table.
DROP INDEX partitions_published_batch;
DROP INDEX partitions_batch;
