-- A layout of batches, task_produce_log and partitions with batch, task and
-- dataset references by number (measured by hand for issue 14, see
-- benches/HISTORY.md, 2026-12-07): names live once in `nm`; a batch id is
-- not stored (it is `{task}-{YYYYMMDD}-{NNN}` of the row's task, dt and seq);
-- the log keeps no task name or dt (its batch has them) and its times as
-- integer microseconds; partitions refer to batches by `batches.id`.
-- Not the registry's schema: measure.sh copies an API-written database's rows
-- into it.
CREATE TABLE nm (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE batches (
 id INTEGER PRIMARY KEY AUTOINCREMENT, task INTEGER NOT NULL, dataset INTEGER NOT NULL, dt TEXT NOT NULL, seq INTEGER NOT NULL,
 state TEXT NOT NULL, trigger_kind TEXT NOT NULL, run_ref TEXT, scope TEXT, idempotency_key TEXT UNIQUE, request_fingerprint TEXT NOT NULL,
 lease_seconds INTEGER NOT NULL, lease_expires_at_us INTEGER, started_at_us INTEGER, decided_at_us INTEGER, marker TEXT, source TEXT, checks TEXT,
 fail_stage TEXT, fail_category TEXT, fail_message TEXT, superseded_by INTEGER, decision_kind TEXT, decision_fingerprint TEXT, decision_status INTEGER,
 decision_body TEXT, written_at TEXT, allow_unready_inputs BOOLEAN NOT NULL DEFAULT FALSE, repair_id INTEGER, start_retry INTEGER,
 published_in_row BOOLEAN NOT NULL DEFAULT FALSE, UNIQUE (task, dt, seq));
CREATE INDEX batches_dataset ON batches (dataset, id);
CREATE INDEX batches_run_ref ON batches (run_ref) WHERE run_ref IS NOT NULL;
CREATE INDEX batches_state ON batches (state, id) WHERE state NOT IN ('published', 'superseded');
CREATE TABLE produce_log (batch INTEGER NOT NULL, target_partition TEXT NOT NULL, dataset INTEGER NOT NULL, status TEXT NOT NULL, batch_seq INTEGER NOT NULL,
 rows_written INTEGER, row_count INTEGER, distinct_keys INTEGER, null_keys INTEGER, metrics TEXT, version INTEGER, start_us INTEGER NOT NULL, finish_us INTEGER,
 PRIMARY KEY (batch, target_partition));
CREATE INDEX produce_log_partition ON produce_log (dataset, target_partition, batch_seq);
CREATE TABLE partitions (dataset INTEGER NOT NULL, partition_spec TEXT NOT NULL, dt TEXT NOT NULL, baseline_key TEXT NOT NULL, state TEXT NOT NULL,
 batch INTEGER, version INTEGER NOT NULL DEFAULT 0, published_batch INTEGER, published_row_count INTEGER, published_at_us INTEGER, updated_at_us INTEGER NOT NULL,
 stale_upstream TEXT, invalidated_reason TEXT, invalidated_at TEXT, prev_published_batch INTEGER, prev_published_row_count INTEGER,
 PRIMARY KEY (dataset, partition_spec));
CREATE INDEX partitions_dt ON partitions (dataset, dt, partition_spec);
CREATE INDEX partitions_baseline ON partitions (dataset, baseline_key, dt) WHERE baseline_key <> '';
