-- Fewer stored bytes per batch (issue 14): an audit row written from now
-- on keeps its path as the route it matched (`route`, an audit_names.id;
-- `path` then holds only the raw text of the route's parameters, joined by
-- '/', or nothing when they are the id of a stored batch: `batch` is
-- then its batches.id) and a request id of the form the service gives ('3a1a688b7049-1c')
-- as two integers (`request_id` then ''). Where a value would not come
-- back exactly, it is kept as before; rows written before keep theirs
-- (store::audit_form). Columns added, no table rewritten.
ALTER TABLE audit_log ADD COLUMN route INTEGER;
ALTER TABLE audit_log ADD COLUMN request_process BIGINT;
ALTER TABLE audit_log ADD COLUMN request_seq BIGINT;
ALTER TABLE audit_log ADD COLUMN batch BIGINT;
