-- Fewer stored bytes per batch (issue 14): the change feed is pruned as a
-- prefix of ids, found by walking the primary key from its oldest row to the
-- first one inside the retention, so the index on `at` is not needed. Only
-- an index goes; no table is rewritten.
DROP INDEX changes_at;
