//! Commit cost independent of registry size (issue 14): the statements a
//! start, commit or fail runs against the whole registry are index seeks on
//! both backends, checked on their query plans (no timing): on a fresh
//! database without statistics, and on a seeded one after `ANALYZE`.

use batchgate::domain::batch::BatchState;
use batchgate::store::db::{Arg, Dialect};
use batchgate::store::{
    audit_page_sql, baseline_sql, batch_page_sql, changes_page_sql, expiry_sql, AuditQuery, BatchQuery, CONSUMERS_SQL,
    DOWNSTREAM_SQL, NEXT_SEQ_SQL,
};
use sqlx::{Connection, Row};

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{clean, Backend, TestApp};
use crate::on_both_backends;
use crate::seed;

/// The lineage statements each publish, invalidation and failure alert run,
/// by name. Each reads `partitions` by the batch that published or writes it.
const STATEMENTS: &[(&str, &str)] = &[("consumers", CONSUMERS_SQL), ("downstream", DOWNSTREAM_SQL)];

/// `sql` with its `$n` parameters replaced by text literals, so both backends
/// plan it as they would a bound statement on a typical key.
fn with_literals(sql: &str) -> String {
    (1..=4).rev().fold(sql.to_owned(), |s, n| s.replace(&format!("${n}"), &format!("'ds{n}'")))
}

/// Each line of the plan of `sql`.
async fn plan(app: &TestApp, sql: &str) -> Vec<String> {
    let sql = with_literals(sql);
    match app.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&app.db.url).await.expect("sqlite");
            let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}")).fetch_all(&mut c).await.expect("explain");
            rows.iter().map(|r| r.get::<String, _>("detail")).collect()
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&app.db.url).await.expect("postgres");
            // With sequential scans priced out, the planner still picks one
            // where no index can answer: so a `Seq Scan` left in the plan
            // means a missing index, whatever the table's size.
            sqlx::query("SET enable_seqscan = off").execute(&mut c).await.expect("set");
            let rows = sqlx::query(&format!("EXPLAIN {sql}")).fetch_all(&mut c).await.expect("explain");
            rows.iter().map(|r| r.get::<String, _>(0)).collect()
        }
    }
}

/// A scan of a whole table or index in a plan line, if it is one.
fn full_scan(backend: Backend, line: &str) -> bool {
    match backend {
        // `SEARCH t USING INDEX i (k=?)` seeks; `SCAN t [USING INDEX i]` reads it all.
        Backend::Sqlite => sqlite_step(line).starts_with("SCAN "),
        Backend::Postgres => line.contains("Seq Scan"),
    }
}

/// A line of SQLite's `EXPLAIN QUERY PLAN` without the tree drawn before it.
fn sqlite_step(line: &str) -> &str {
    line.trim_start_matches(['|', '`', '-', ' '])
}

/// A scan of a whole table in a plan line: on SQLite a `SCAN` of one of
/// `sqlite_scans` (a page's query scans the rows its inner query took,
/// which is not a table read); on PostgreSQL any sequential scan.
fn scans_one_of(backend: Backend, line: &str, sqlite_scans: &[&str]) -> bool {
    match backend {
        Backend::Sqlite => sqlite_scans.iter().any(|scan| sqlite_step(line).starts_with(scan)),
        Backend::Postgres => full_scan(backend, line),
    }
}

/// A scan of a whole table in a plan line, if it is one; SQLite's `SCAN b`
/// reads the page a record query's inner query picked, not a table.
fn scans_a_table(backend: Backend, line: &str) -> bool {
    full_scan(backend, line) && !sqlite_step(line).eq("SCAN b")
}

/// The SQL dialect of a backend.
fn dialect(backend: Backend) -> Dialect {
    match backend {
        Backend::Sqlite => Dialect::Sqlite,
        Backend::Postgres => Dialect::Postgres,
    }
}

/// Seeds `datasets` × `days` batches in the backend's SQL.
async fn seed_registry(app: &TestApp, datasets: u32, days: u32) {
    match app.backend {
        Backend::Sqlite => app.sql(&seed::sqlite(datasets, days)).await,
        Backend::Postgres => app.sql(&seed::postgres(datasets, days)).await,
    }
}

/// The lineage statements seek `batch_inputs` by the input, each reading
/// batch's `task_produce_log` rows by its primary key, and each partition
/// by dataset and partition: by its primary key once the planner has
/// statistics (`keyed`); before, PostgreSQL may take `partitions_dt`
/// (dataset, dt, partition), equal in cost on empty tables.
async fn assert_seeks(app: &TestApp, when: &str, keyed: bool) {
    let (log_key, partition_key) = match app.backend {
        Backend::Sqlite => ("sqlite_autoindex_task_produce_log_1", "sqlite_autoindex_partitions_1"),
        Backend::Postgres => ("task_produce_log_pkey", "partitions_pkey"),
    };
    for (name, sql) in STATEMENTS {
        let lines = plan(app, sql).await;
        let text = lines.join("\n");
        assert!(!lines.iter().any(|l| full_scan(app.backend, l)), "{name} ({when}) scans a table:\n{text}");
        assert!(text.contains("batch_inputs_input"), "{name} ({when}) does not seek the input's readers:\n{text}");
        assert!(text.contains(log_key), "{name} ({when}) does not seek {log_key}:\n{text}");
        let by_key = match app.backend {
            Backend::Sqlite => text.contains(&format!("{partition_key} (dataset=? AND partition_spec=?)")),
            Backend::Postgres if keyed => text.contains(&format!("Index Scan using {partition_key} on partitions d")),
            Backend::Postgres => {
                text.contains("on partitions d")
                    && text
                        .contains("Index Cond: ((dataset = l.target_table) AND (partition_spec = l.target_partition))")
            }
        };
        assert!(by_key, "{name} ({when}) does not seek partitions by dataset and partition:\n{text}");
    }
}

/// The plan of the baseline query for `key` with literal values, one line
/// of text.
async fn baseline_plan(app: &TestApp, key: &str) -> String {
    let sql = baseline_sql(key)
        .replace("$1", "'ds3'")
        .replace("$2", &format!("'{key}'"))
        .replace("$3", "'2000-01-20'")
        .replace("$4", "7");
    plan(app, &sql).await.join("\n")
}

/// A commit's volume baseline (migration 0018): for a partition of `dt`
/// alone (key '') the dataset's earlier dates in `partitions_dt`, newest
/// first, with no sort; for a partition with more keys, `partitions_baseline`,
/// which holds only those. Fresh and seeded (2,000 partitions of key '',
/// then 200 of `region=…`), on both backends.
async fn the_volume_baseline_seeks_the_index_of_its_key(app: TestApp) {
    for when in ["fresh", "seeded"] {
        if when == "seeded" {
            seed_registry(&app, 50, 40).await;
            app.sql(
                "INSERT INTO partitions (dataset, partition_spec, dt, baseline_key, state, version, published_row_count, \
                   updated_at) \
                 SELECT 'ds3', 'dt=' || p.dt || '/region=r' || p.version, p.dt, 'region=r' || p.version, 'ready', 1, 10, \
                   p.updated_at FROM (SELECT dt, updated_at, version + (CAST(substr(partition_spec, 12, 1) AS INTEGER) % 5) \
                   AS version FROM partitions WHERE dataset = 'ds3') p",
            )
            .await;
            app.sql("ANALYZE").await;
        }
        let plain = baseline_plan(&app, "").await;
        assert!(!plain.lines().any(|l| full_scan(app.backend, l)), "key '' ({when}) scans:\n{plain}");
        assert!(plain.contains("partitions_dt"), "key '' ({when}) does not seek partitions_dt:\n{plain}");
        assert!(!plain.contains("TEMP B-TREE") && !plain.contains("Sort"), "key '' ({when}) sorts:\n{plain}");
        let keyed = baseline_plan(&app, "region=r3").await;
        assert!(!keyed.lines().any(|l| full_scan(app.backend, l)), "a key ({when}) scans:\n{keyed}");
        assert!(keyed.contains("partitions_baseline"), "a key ({when}) does not seek partitions_baseline:\n{keyed}");
    }
}

async fn commit_path_lineage_statements_seek_indexes(app: TestApp) {
    assert_seeks(&app, "fresh database, no statistics", false).await;
    seed_registry(&app, 50, 40).await;
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM batch_inputs").await, 49 * 40);
    assert_seeks(&app, "2,000 batches, after ANALYZE", true).await;

    // The seeded registry is one the service serves: a restatement of an
    // upstream partition finds its reader and makes it stale.
    assert_eq!(app.ready("ds1", &["dt=2000-01-05"]).await.0, StatusCode::OK);
    let id = app.start_ok("t0", "ds0", "2000-01-05", &["dt=2000-01-05"]).await;
    let (status, record) = app.commit(&id, &clean("dt=2000-01-05", 1000)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    let (status, stale) = app.ready("ds1", &["dt=2000-01-05"]).await;
    assert_ne!(status, StatusCode::OK, "{stale}");
    assert_ne!(app.ready("ds2", &["dt=2000-01-05"]).await.0, StatusCode::OK, "ds2 read ds1: stale transitively");
    assert_eq!(app.ready("ds1", &["dt=2000-01-06"]).await.0, StatusCode::OK, "another day of ds1 is untouched");
}

/// 20,000 audit rows as the version before wrote them (`audit`, ids 1 to
/// 20,000) and 20,000 by number after them (`audit_log`; `audit_names`
/// ds0…ds49; ds1 is there already), then `ANALYZE`. The actor and the
/// dataset `ds1` are rare (one row in a thousand): the pages the test reads.
async fn seed_audit(app: &TestApp) {
    let series = match app.backend {
        Backend::Sqlite => "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)",
        Backend::Postgres => "WITH n(i) AS (SELECT generate_series(1, 20000))",
    };
    let actor = "CASE WHEN i % 1000 = 0 THEN 'ds1' ELSE 'ds' || (2 + i % 48) END";
    let dataset = "CASE WHEN i % 997 = 0 THEN 'ds1' ELSE 'ds' || (2 + i % 47) END";
    let number = |name: &str| format!("(SELECT id FROM audit_names WHERE name = {name})");
    app.sql(&format!(
        "INSERT INTO audit_names (name) {series} SELECT 'ds' || (i - 1) FROM n WHERE i <= 50 AND i <> 2;
         INSERT INTO audit_names (name) VALUES ('batch.start'), ('POST');
         INSERT INTO audit (at, actor, request_id, action, method, path, dataset, status)
             {series} SELECT '2026-01-01T00:00:00Z', {actor}, 'r' || i, 'batch.start', 'POST', '/v1/batches', {dataset}, 201 FROM n;
         INSERT INTO audit_log (id, at, actor, action, method, dataset, status, request_id, path)
             {series} SELECT 20000 + i, {at}, {actor_number}, {start}, {post}, {dataset_number}, 201, 'r' || i, '/v1/batches' FROM n;
         ANALYZE;",
        at = match app.backend {
            Backend::Sqlite => "1767225600000000",
            Backend::Postgres => "'2026-01-01T00:00:00Z'",
        },
        actor_number = number(actor),
        dataset_number = number(dataset),
        start = number("'batch.start'"),
        post = number("'POST'"),
    ))
    .await;
}

/// `sql` with its parameters `args` written in as literals.
fn with_args(sql: &str, args: Vec<Arg>) -> String {
    let literals: Vec<String> = args
        .into_iter()
        .map(|a| match a {
            Arg::Int(Some(n)) => n.to_string(),
            Arg::Text(Some(t)) => format!("'{}'", t.replace('\'', "''")),
            other => panic!("no literal for {other:?} here"),
        })
        .collect();
    literals.iter().enumerate().rev().fold(sql.to_owned(), |s, (i, l)| s.replace(&format!("${}", i + 1), l))
}

/// `GET /v1/audit?actor=…` and `?dataset=…`: each of the two tables the
/// log is read from (migration 0019) is sought on its index of that
/// filter, newest first.
async fn a_page_of_the_audit_log_seeks_indexes(app: TestApp) {
    let dialect = dialect(app.backend);
    // The page the service reads, its filter's number bound as it binds it.
    app.sql("INSERT INTO audit_names (name) VALUES ('ds1')").await;
    let ds1 = app.sql_count("SELECT CAST(id AS BIGINT) FROM audit_names WHERE name = 'ds1'").await;
    let numbers = std::collections::HashMap::from([("ds1".to_owned(), ds1)]);
    let page = |q: AuditQuery| {
        let (sql, args) = audit_page_sql(dialect, &AuditQuery { limit: 100, ..q }, &numbers);
        with_args(&sql, args)
    };
    let by_actor = page(AuditQuery { actor: Some("ds1".into()), ..AuditQuery::default() });
    let by_dataset = page(AuditQuery { dataset: Some("ds1".into()), ..AuditQuery::default() });
    // SQLite's `SCAN compact` and `SCAN old` read the two pages taken, not a table.
    let reads_a_table = |line: &String| {
        scans_one_of(app.backend, line, &["SCAN l", "SCAN audit", "SCAN who", "SCAN what", "SCAN how", "SCAN ds"])
    };
    for when in ["fresh database, no statistics", "40,000 audit rows, after ANALYZE"] {
        if when.starts_with("40,000") {
            seed_audit(&app).await;
        }
        for (filter, sql, indexes) in [
            ("actor", &by_actor, ["audit_log_actor", "audit_actor"]),
            ("dataset", &by_dataset, ["audit_log_dataset", "audit_dataset"]),
        ] {
            let lines = plan(&app, sql).await;
            let text = lines.join("\n");
            assert!(!lines.iter().any(reads_a_table), "the page by {filter} ({when}) scans a table:\n{text}");
            for index in indexes {
                assert!(text.contains(index), "the page by {filter} ({when}) does not seek {index}:\n{text}");
            }
        }
        if app.backend == Backend::Postgres {
            let text = plan(&app, &page(AuditQuery::default())).await.join("\n");
            for key in ["audit_log_pkey", "audit_pkey"] {
                assert!(
                    text.contains(&format!("Index Scan Backward using {key}")),
                    "the unfiltered page ({when}) does not walk {key} down:\n{text}"
                );
            }
        }
    }
    let (status, listed) = app.get("/v1/audit?actor=ds1&limit=100").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 40, "20 rows of each table");
    assert!(items.iter().all(|i| i["actor"] == "ds1" && i["action"] == "batch.start"), "{listed}");
    assert!(items[..20].iter().all(|i| i["id"].as_i64() > Some(20_000)), "the newer table's rows come first");
}

/// 20,000 changes by name (`changes`, ids 1-20,000) and 20,000 by number
/// after them (`change_log`), then `ANALYZE`. The dataset `ds1` is rare
/// (one change in a thousand): the page the test reads.
async fn seed_changes(app: &TestApp) {
    let series = match app.backend {
        Backend::Sqlite => "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)",
        Backend::Postgres => "WITH n(i) AS (SELECT generate_series(1, 20000))",
    };
    let dataset = "CASE WHEN i % 1000 = 0 THEN 'ds1' ELSE 'ds' || (2 + i % 47) END";
    let (at, old_at, detail) = match app.backend {
        Backend::Sqlite => ("1767225600000000", "'2026-01-01T00:00:00Z'", "'{}'"),
        Backend::Postgres => ("'2026-01-01T00:00:00Z'", "'2026-01-01T00:00:00Z'", "'{}'::jsonb"),
    };
    app.sql(&format!(
        "INSERT INTO audit_names (name) {series} SELECT 'ds' || (i - 1) FROM n WHERE i <= 50 AND i <> 2 ON CONFLICT (name) DO NOTHING;
         INSERT INTO changes (kind, dataset, partition_spec, version, batch_id, at, detail)
             {series} SELECT 'published', {dataset}, 'dt=' || i, 1, 'b-' || i, {old_at}, {detail} FROM n;
         INSERT INTO change_log (id, at, kind, dataset, partition_spec, version)
             {series} SELECT 20000 + i, {at}, (SELECT id FROM audit_names WHERE name = 'published'),
                 (SELECT id FROM audit_names WHERE name = {dataset}), 'dt=' || i, 1 FROM n;
         ANALYZE;"
    ))
    .await;
}

/// `GET /v1/changes?dataset=…` and the whole feed from a cursor: each of
/// the two tables the feed is read from (migration 0020) is sought on its
/// index, oldest first from the cursor.
async fn a_page_of_the_change_feed_seeks_indexes(app: TestApp) {
    let dialect = dialect(app.backend);
    app.sql("INSERT INTO audit_names (name) VALUES ('ds1')").await;
    let ds1 = app.sql_count("SELECT CAST(id AS BIGINT) FROM audit_names WHERE name = 'ds1'").await;
    let page = |dataset: Option<(&str, Option<i64>)>, after: i64| {
        let (sql, args) = changes_page_sql(dialect, after, dataset, 100);
        with_args(&sql, args)
    };
    let by_dataset = page(Some(("ds1", Some(ds1))), 0);
    let from_cursor = page(None, 10_000);
    // SQLite's `SCAN l` and `SCAN old` read the two pages taken, not a table.
    let reads_a_table = |line: &String| {
        scans_one_of(app.backend, line, &["SCAN change_log", "SCAN changes", "SCAN audit_names", "SCAN batches"])
    };
    for when in ["fresh database, no statistics", "40,000 changes, after ANALYZE"] {
        if when.starts_with("40,000") {
            seed_changes(&app).await;
        }
        let lines = plan(&app, &by_dataset).await;
        let text = lines.join("\n");
        assert!(!lines.iter().any(reads_a_table), "the page of a dataset ({when}) scans a table:\n{text}");
        for index in ["change_log_dataset", "changes_dataset"] {
            assert!(text.contains(index), "the page of a dataset ({when}) does not seek {index}:\n{text}");
        }
        let lines = plan(&app, &from_cursor).await;
        let text = lines.join("\n");
        assert!(!lines.iter().any(reads_a_table), "the page from a cursor ({when}) scans a table:\n{text}");
        if app.backend == Backend::Postgres {
            for key in ["change_log_pkey", "changes_pkey"] {
                assert!(text.contains(key), "the page from a cursor ({when}) does not walk {key}:\n{text}");
            }
        }
    }
    let (status, listed) = app.get("/v1/changes?dataset=ds1&limit=100").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 40, "20 changes of each table");
    assert!(items.iter().all(|i| i["dataset"] == "ds1" && i["kind"] == "published"), "{listed}");
    assert_eq!(items[19]["batch_id"], "b-20000", "the old table's first, in id order: {listed}");
    assert_eq!(items[20]["batch_id"], Value::Null, "{listed}");
}

on_both_backends!(
    a_page_of_the_change_feed_seeks_indexes,
    commit_path_lineage_statements_seek_indexes,
    the_volume_baseline_seeks_the_index_of_its_key,
    a_page_of_batch_history_seeks_indexes,
    a_page_of_a_large_dataset_seeks_its_index,
    a_task_s_batches_of_a_date_are_found_by_its_sequence_key,
    a_page_of_the_audit_log_seeks_indexes
);

/// A task's batches of one date (`GET /v1/batches?task=…&dt=…`, the
/// latest of them that `/ready?task=…` answers with, and the number a start
/// gives the next) are sought on the `UNIQUE (task, dt, seq)` key: the
/// `(task, dt, id)` index that did it too is gone (migration 0011), its
/// entries a second copy of the key's.
async fn a_task_s_batches_of_a_date_are_found_by_its_sequence_key(app: TestApp) {
    let dialect = dialect(app.backend);
    let key = match app.backend {
        Backend::Sqlite => "sqlite_autoindex_batches_3",
        Backend::Postgres => "batches_task_dt_seq_key",
    };
    let by_task = BatchQuery {
        task: Some("t3".into()),
        dt: Some("2000-01-07".parse().unwrap()),
        limit: 100,
        ..BatchQuery::default()
    };
    let page = batch_page_sql(dialect, &by_task).0.replace("$1", "'t3'").replace("$2", "'2000-01-07'");
    let latest =
        "SELECT batch_id, dataset FROM batches WHERE task = 't3' AND dt = '2000-01-07' ORDER BY seq DESC LIMIT 1";
    for when in ["fresh database, no statistics", "2,000 batches, after ANALYZE"] {
        if when.starts_with("2,000") {
            seed_registry(&app, 50, 40).await;
        }
        let next = NEXT_SEQ_SQL.replace("$3", "'t3'").replace("$4", "'2000-01-07'");
        for (name, sql) in [("page", page.as_str()), ("latest", latest), ("next number", next.as_str())] {
            let lines = plan(&app, sql).await;
            let text = lines.join("\n");
            let scans = lines.iter().filter(|l| scans_a_table(app.backend, l));
            assert_eq!(scans.count(), 0, "{name} ({when}) scans a table:\n{text}");
            assert!(text.contains(key), "{name} ({when}) does not seek {key}:\n{text}");
        }
    }
    let (status, page) = app.get("/v1/batches?task=t3&dt=2000-01-07").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(items[0]["batch_id"], "t3-20000107-001");
}

/// `GET /v1/batches?dataset=…`: the page of batches is read down the
/// dataset's index, each batch's partitions and inputs by their primary keys.
async fn a_page_of_batch_history_seeks_indexes(app: TestApp) {
    let dialect = dialect(app.backend);
    let by_dataset = BatchQuery { dataset: Some("ds1".into()), limit: 100, ..BatchQuery::default() };
    let sql = batch_page_sql(dialect, &by_dataset).0;
    for when in ["fresh database, no statistics", "2,000 batches, after ANALYZE"] {
        if when.starts_with("2,000") {
            seed_registry(&app, 50, 40).await;
        }
        let lines = plan(&app, &sql).await;
        let text = lines.join("\n");
        let scans = lines.iter().filter(|l| scans_a_table(app.backend, l));
        assert_eq!(scans.count(), 0, "the page ({when}) scans a table:\n{text}");
        for index in ["batches_dataset", "task_produce_log", "batch_inputs"] {
            assert!(text.contains(index), "the page ({when}) does not seek {index}:\n{text}");
        }
    }
    let (status, page) = app.get("/v1/batches?dataset=ds1&limit=100").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 40);
    assert_eq!(items[0]["partitions"][0]["partition"], "dt=2000-02-09", "newest first");
    assert_eq!(items[0]["inputs"][0]["batch_id"], "t0-20000209-001");
}

/// A page of a dataset that is a large share of the registry, and wrote
/// before most others (20 datasets of 1,000 batches, the second one's
/// page): its `(dataset, id)` index answers, also for a state. PostgreSQL's
/// planner, asked for `dataset = $1 ORDER BY id DESC`, walked the primary
/// key down from the newest batch instead and skipped 18,000 rows of the
/// other datasets (`store::batch_page_sql`). A page of a state the state
/// index holds seeks it, and so does the lease scan; the published batches
/// (all of these) are not in it (migration 0015).
async fn a_page_of_a_large_dataset_seeks_its_index(app: TestApp) {
    let dialect = dialect(app.backend);
    seed_registry(&app, 20, 1000).await;
    let pages = [
        ("dataset", BatchQuery { dataset: Some("ds1".into()), ..BatchQuery::default() }, "'ds1'", "batches_dataset"),
        ("state", BatchQuery { state: Some(BatchState::Failed), ..BatchQuery::default() }, "'failed'", "batches_state"),
    ];
    for (name, q, value, index) in pages {
        let sql = batch_page_sql(dialect, &BatchQuery { limit: 100, ..q }).0.replace("$1", value);
        let lines = plan(&app, &sql).await;
        let text = lines.join("\n");
        assert!(text.contains(index), "the page by {name} does not seek {index}:\n{text}");
        let walks = lines
            .iter()
            .filter(|l| scans_a_table(app.backend, l) || l.contains("Filter: (dataset") || l.contains("batches_pkey"));
        assert_eq!(walks.count(), 0, "the page by {name} reads other batches' rows:\n{text}");
    }
    let lines = plan(&app, &expiry_sql(dialect).replace("$1", "'2026-01-01T00:00:00+00:00'")).await;
    let text = lines.join("\n");
    assert!(text.contains("batches_state"), "the lease scan does not seek batches_state:\n{text}");
    assert!(!lines.iter().any(|l| full_scan(app.backend, l)), "the lease scan scans a table:\n{text}");
    let (status, page) = app.get("/v1/batches?dataset=ds1&limit=100").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!((items.len(), items[0]["batch_id"].as_str()), (100, Some("t1-20020926-001")), "newest first");
    let next = page["next_cursor"].as_str().expect("a next page");
    let (_, more) = app.get(&format!("/v1/batches?dataset=ds1&limit=100&cursor={}", crate::helpers::enc(next))).await;
    assert_eq!(more["items"][0]["batch_id"], "t1-20020618-001", "the page after, by the cursor");
}

/// The registry's tables that grow with it: no statement of the start,
/// commit and fail path may read one of them whole.
const GROWING: &str =
    "'batches', 'task_produce_log', 'partitions', 'batch_inputs', 'batch_events', 'changes', 'change_log', \
     'alerts', 'audit', 'audit_log', 'outbox'";

/// Sequential scans of each growing table so far, once every other session
/// of the database has ended (a session hands its counters over at exit;
/// the service's pool opens new ones, which start with the planner setting
/// the database has now).
async fn seq_scans(app: &TestApp) -> Vec<(String, i64)> {
    let mut c = sqlx::PgConnection::connect(&app.db.url).await.expect("postgres");
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut c)
    .await
    .expect("sessions");
    sqlx::query("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid")
        .bind(&pids)
        .execute(&mut c)
        .await
        .expect("end");
    for _ in 0..200 {
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ANY($1)")
            .bind(&pids)
            .fetch_one(&mut c)
            .await
            .expect("sessions left");
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut c).await.expect("snapshot");
    let sql = format!(
        "SELECT relname::text, seq_scan FROM pg_stat_user_tables WHERE relname IN ({GROWING}) ORDER BY relname"
    );
    sqlx::query_as(&sql).fetch_all(&mut c).await.expect("counters")
}

/// Every statement a start, a commit (a restatement with a reader, so
/// lineage walks) and a fail run on PostgreSQL is an index seek: with
/// sequential scans priced out the planner still picks one where no index
/// can answer, and the table's scan counter says so, whichever statement it
/// was. (The lineage statements are checked on both backends above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_start_commit_and_fail_read_no_growing_table_whole() {
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    app.sql(&seed::postgres(20, 40)).await;
    app.sql("DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET enable_seqscan = off', current_database()); END $$")
        .await;
    let before = seq_scans(&app).await;
    assert_eq!(before.len(), GROWING.split(',').count(), "every growing table is counted: {before:?}");

    let id = app.start_ok("t3", "ds3", "2000-01-07", &["dt=2000-01-07"]).await;
    let (status, record) = app.commit(&id, &clean("dt=2000-01-07", 1000)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    let id = app.start_ok("t5", "ds5", "2000-01-09", &["dt=2000-01-09"]).await;
    let (status, body) = app
        .post(&format!("/v1/batches/{id}/fail"), &serde_json::json!({"stage": "write", "category": "resource"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_ne!(app.ready("ds4", &["dt=2000-01-07"]).await.0, StatusCode::OK, "the reader of the restatement is stale");

    let after = seq_scans(&app).await;
    let scanned: Vec<String> = before
        .iter()
        .zip(&after)
        .filter(|((_, a), (_, b))| b > a)
        .map(|((t, a), (_, b))| format!("{t}: {} sequential scans", b - a))
        .collect();
    assert!(scanned.is_empty(), "start/commit/fail read whole tables: {scanned:?}");
}

/// A publish changes no indexed column of its partition (migration 0017:
/// the lineage walks find readers through `task_produce_log`), so
/// PostgreSQL updates the row in place (HOT) and writes no new entry into
/// any of `partitions`' indexes: every update of a partition that a start
/// and a commit made here is a HOT one. (Before migration 0017 none was:
/// `partitions_published_batch` covered the column a publish sets.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_publish_updates_its_partition_in_place() {
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    for day in 1..=9 {
        let dt = format!("2026-01-0{day}");
        let partition = format!("dt={dt}");
        let id = app.start_ok("t_hot", "hot.daily", &dt, &[partition.as_str()]).await;
        let (status, record) = app.commit(&id, &clean(&partition, 1000)).await;
        assert_eq!(status, StatusCode::OK, "{record}");
    }
    // Restatements too: a start marks the partition running, a commit publishes it.
    for _ in 0..3 {
        let id = app.start_ok("t_hot", "hot.daily", "2026-01-01", &["dt=2026-01-01"]).await;
        let (status, record) = app.commit(&id, &clean("dt=2026-01-01", 1000)).await;
        assert_eq!(status, StatusCode::OK, "{record}");
    }
    // The service's sessions flush their counters when they end.
    seq_scans(&app).await;
    let mut c = sqlx::PgConnection::connect(&app.db.url).await.expect("postgres");
    let (updates, hot): (i64, i64) =
        sqlx::query_as("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'partitions'")
            .fetch_one(&mut c)
            .await
            .expect("stats");
    assert!(updates >= 12, "the publishes' updates are counted: {updates}");
    assert_eq!(hot, updates, "{} of {updates} updates of partitions wrote new index entries", updates - hot);
}
