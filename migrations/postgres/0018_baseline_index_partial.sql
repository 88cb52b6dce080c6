-- Fewer stored bytes per batch (issue 14): `partitions_baseline` keeps only
-- the partitions whose spec has more than `dt` (a baseline key, such as
-- `region=eu`). A partition of `dt` alone, the usual kind, has the key ''
-- and its volume baseline is the dataset's latest earlier dates, which
-- `partitions_dt` (dataset, dt, …) gives in order: the baseline query
-- (records::baseline) seeks that index for the key '' and this one, its
-- condition repeated word for word, for any other. The index is rebuilt
-- (the table read once); no table is rewritten.
DROP INDEX partitions_baseline;
CREATE INDEX partitions_baseline ON partitions (dataset, baseline_key, dt) WHERE baseline_key <> '';
