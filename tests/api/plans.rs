//! Commit cost independent of registry size (issue 14): the statements a
//! start, commit or fail runs against the whole registry are index seeks on
//! both backends, checked on their query plans (no timing): on a fresh
//! database without statistics, and on a seeded one after `ANALYZE`.

use batchgate::store::{CONSUMERS_SQL, DOWNSTREAM_SQL};
use sqlx::{Connection, Row};

use reqwest::StatusCode;

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
        Backend::Sqlite => line.trim_start_matches(['|', '`', '-', ' ']).starts_with("SCAN "),
        Backend::Postgres => line.contains("Seq Scan"),
    }
}

async fn assert_seeks(app: &TestApp, when: &str) {
    for (name, sql) in STATEMENTS {
        let lines = plan(app, sql).await;
        let text = lines.join("\n");
        assert!(!lines.iter().any(|l| full_scan(app.backend, l)), "{name} ({when}) scans a table:\n{text}");
        assert!(
            text.contains("partitions_published_batch"),
            "{name} ({when}) does not find readers by partitions_published_batch:\n{text}"
        );
    }
    let downstream = plan(app, DOWNSTREAM_SQL).await.join("\n");
    assert!(
        downstream.contains("partitions_batch"),
        "downstream ({when}) does not seek partitions_batch:\n{downstream}"
    );
}

async fn commit_path_lineage_statements_seek_indexes(app: TestApp) {
    assert_seeks(&app, "fresh database, no statistics").await;
    match app.backend {
        Backend::Sqlite => app.sql(&seed::sqlite(50, 40)).await,
        Backend::Postgres => app.sql(&seed::postgres(50, 40)).await,
    }
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM batch_inputs").await, 49 * 40);
    assert_seeks(&app, "2,000 batches, after ANALYZE").await;

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

on_both_backends!(commit_path_lineage_statements_seek_indexes);
