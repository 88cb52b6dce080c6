//! Fills a registry in the service's own schema with bulk SQL (not the API):
//! `datasets` datasets `ds{i}` written by tasks `t{i}`, each with one published
//! one-partition batch per day for `days` days from 2000-01-01, and every
//! dataset but the first reading the same day of the dataset before it (so
//! `batch_inputs` is as large as the registry). Used by the query-plan tests
//! and by `benches/registry.rs`.

/// The SQL that seeds `datasets` × `days` batches on SQLite.
pub fn sqlite(datasets: u32, days: u32) -> String {
    let now = "'2026-01-01T00:00:00+00:00'";
    format!(
        "CREATE TEMP TABLE seed_d AS WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM d WHERE i < {last_d}) SELECT i FROM d;
CREATE TEMP TABLE seed_n AS WITH RECURSIVE n(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM n WHERE j < {last_n})
  SELECT j, date('2000-01-01', '+' || j || ' days') AS dt, strftime('%Y%m%d', date('2000-01-01', '+' || j || ' days')) AS ymd FROM n;
INSERT INTO datasets (name, created_at, updated_at) SELECT 'ds' || i, {now}, {now} FROM seed_d;
INSERT INTO batches (batch_id, task, dataset, dt, seq, state, trigger_kind, request_fingerprint, lease_seconds, lease_expires_at,
    started_at, decided_at, marker, checks, decision_kind, decision_status, decision_body)
  SELECT 't' || i || '-' || ymd || '-001', 't' || i, 'ds' || i, dt, 1, 'published', 'scheduled', '{{}}', 3600, {now}, {now}, {now},
    'm', '[]', 'commit', 200, '{{}}' FROM seed_d, seed_n;
INSERT INTO task_produce_log (batch_id, target_partition, task_name, dt, target_table, status, batch_seq, rows_written, row_count,
    metrics, version, start_time, finish_time)
  SELECT 't' || i || '-' || ymd || '-001', 'dt=' || dt, 't' || i, dt, 'ds' || i, 'published', 1, 1000, 1000, '{{}}', 1, {now}, {now}
  FROM seed_d, seed_n;
INSERT INTO partitions (dataset, partition_spec, dt, baseline_key, state, batch_id, version, published_batch_id, published_row_count,
    published_at, updated_at)
  SELECT 'ds' || i, 'dt=' || dt, dt, '', 'ready', 't' || i || '-' || ymd || '-001', 1, 't' || i || '-' || ymd || '-001', 1000, {now}, {now}
  FROM seed_d, seed_n;
INSERT INTO batch_inputs (batch_id, input_dataset, input_partition, input_version, input_batch_id)
  SELECT 't' || i || '-' || ymd || '-001', 'ds' || (i - 1), 'dt=' || dt, 1, 't' || (i - 1) || '-' || ymd || '-001'
  FROM seed_d, seed_n WHERE i > 0;
DROP TABLE seed_d;
DROP TABLE seed_n;
ANALYZE;",
        last_d = datasets - 1,
        last_n = days - 1,
    )
}

/// The SQL that seeds `datasets` × `days` batches on PostgreSQL.
pub fn postgres(datasets: u32, days: u32) -> String {
    let now = "'2026-01-01T00:00:00+00:00'::timestamptz";
    format!(
        "CREATE TEMP TABLE seed AS SELECT i, (DATE '2000-01-01' + j) AS dt, to_char(DATE '2000-01-01' + j, 'YYYYMMDD') AS ymd
  FROM generate_series(0, {last_d}) i, generate_series(0, {last_n}) j;
INSERT INTO datasets (name, created_at, updated_at) SELECT 'ds' || i, {now}, {now} FROM generate_series(0, {last_d}) i;
INSERT INTO batches (batch_id, task, dataset, dt, seq, state, trigger_kind, request_fingerprint, lease_seconds, lease_expires_at,
    started_at, decided_at, marker, checks, decision_kind, decision_status, decision_body)
  SELECT 't' || i || '-' || ymd || '-001', 't' || i, 'ds' || i, dt, 1, 'published', 'scheduled', '{{}}', 3600, {now}, {now}, {now},
    'm', '[]', 'commit', 200, '{{}}' FROM seed;
INSERT INTO task_produce_log (batch_id, target_partition, task_name, dt, target_table, status, batch_seq, rows_written, row_count,
    metrics, version, start_time, finish_time)
  SELECT 't' || i || '-' || ymd || '-001', 'dt=' || dt, 't' || i, dt, 'ds' || i, 'published', 1, 1000, 1000, '{{}}', 1, {now}, {now}
  FROM seed;
INSERT INTO partitions (dataset, partition_spec, dt, baseline_key, state, batch_id, version, published_batch_id, published_row_count,
    published_at, updated_at)
  SELECT 'ds' || i, 'dt=' || dt, dt, '', 'ready', 't' || i || '-' || ymd || '-001', 1, 't' || i || '-' || ymd || '-001', 1000, {now}, {now}
  FROM seed;
INSERT INTO batch_inputs (batch_id, input_dataset, input_partition, input_version, input_batch_id)
  SELECT 't' || i || '-' || ymd || '-001', 'ds' || (i - 1), 'dt=' || dt, 1, 't' || (i - 1) || '-' || ymd || '-001'
  FROM seed WHERE i > 0;
DROP TABLE seed;
ANALYZE;",
        last_d = datasets - 1,
        last_n = days - 1,
    )
}
