-- Fewer stored bytes per batch (issue 14): `partitions_batch` keeps only the
-- partitions never published, the only ones found by the batch writing
-- them (the downstream lineage graph, lineage::DOWNSTREAM_SQL, whose join
-- repeats this condition word for word so that both planners use the
-- index). A published partition is found by `partitions_published_batch`.
DROP INDEX partitions_batch;
CREATE INDEX partitions_batch ON partitions (batch_id) WHERE COALESCE(published_batch_id, '') = '';
