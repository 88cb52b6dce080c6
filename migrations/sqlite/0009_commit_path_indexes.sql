-- Every statement a start, commit or fail runs is an index seek (issue 14).

-- The partitions whose current version a batch published: lineage finds the
-- readers of a restated or invalidated partition through it on every publish.
CREATE INDEX partitions_published_batch ON partitions (published_batch_id);

-- The partitions a batch is writing: the downstream lineage graph (which a
-- failure's alert walks too) finds the never-published ones through it.
CREATE INDEX partitions_batch ON partitions (batch_id);
