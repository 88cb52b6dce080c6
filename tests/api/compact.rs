//! Compact rows (issue 14): the audit log names its actor, action, method and
//! dataset by number (`audit_names`) and, on SQLite, keeps its time as an
//! integer (migration 0019); so does the change feed its kind and dataset,
//! and its batch by `batches.id` (migration 0020). A registry upgraded from
//! before keeps its rows where they were, and each lists both as one.

use std::str::FromStr;

use batchgate::clock::Clock;
use batchgate::store::db::Dialect;
use chrono::{DateTime, SubsecRound, Utc};
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::migrate::Migrator;
use sqlx::Connection;

use crate::helpers::{clean, enc, Backend, TestApp, TestDb};
use crate::per_backend;

/// The last migration before the audit log went by number.
const BEFORE_COMPACT_AUDIT: i64 = 18;
/// The last migration before the change feed went by number.
const BEFORE_COMPACT_FEED: i64 = 19;
/// The last migration before the audit log kept paths by route.
const BEFORE_AUDIT_ROUTES: i64 = 20;

/// The audit rows an older version wrote (`audit`): time, actor, request
/// id, action, dataset. Their ids are the sequence's first.
const OLD_ROWS: &[(&str, &str, &str, &str, Option<&str>)] = &[
    ("2026-01-01T00:00:00.000001Z", "old-etl", "old-1", "batch.start", Some("d.shared")),
    ("2026-01-01T00:00:01.999999Z", "old-etl", "old-2", "batch.commit", Some("d.gone")),
    ("2026-01-01T00:00:02.500000Z", "admin", "old-3", "token.create", None),
];

/// Applies the migrations up to `through` to `db`, as the version that
/// shipped them left it, then runs `rows` (the rows it wrote).
async fn registry_through(backend: Backend, db: &TestDb, through: i64, rows: &str) {
    let dir = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    // The migrations up to that one, as the version before shipped them.
    let older = tempfile::tempdir().expect("temp dir");
    let all = std::fs::read_dir(format!("{}/migrations/{dir}", env!("CARGO_MANIFEST_DIR"))).expect("migrations");
    for file in all.map(|f| f.expect("migration").path()) {
        let name = file.file_name().and_then(|n| n.to_str()).expect("name").to_owned();
        let version: i64 = name.split('_').next().and_then(|v| v.parse().ok()).expect("numbered");
        if version <= through {
            std::fs::copy(&file, older.path().join(name)).expect("copy");
        }
    }
    let migrator = Migrator::new(older.path()).await.expect("migrations");
    assert_eq!(migrator.iter().count() as i64, through - 2, "0001-0006 and 0009-{through:04}");
    match backend {
        Backend::Sqlite => {
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(&db.url).expect("url").create_if_missing(true);
            let mut c = sqlx::SqliteConnection::connect_with(&options).await.expect("sqlite");
            migrator.run(&mut c).await.expect("migrate");
            sqlx::raw_sql(rows).execute(&mut c).await.expect("old rows");
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.expect("postgres");
            migrator.run(&mut c).await.expect("migrate");
            sqlx::raw_sql(rows).execute(&mut c).await.expect("old rows");
        }
    }
}

/// Applies the migrations up to [`BEFORE_COMPACT_AUDIT`] to `db`, as the
/// version before left it, and writes [`OLD_ROWS`] into its `audit`.
async fn registry_before_compact_audit(backend: Backend, db: &TestDb) {
    // The times as text in the form the version before wrote SQLite's in
    // (PostgreSQL reads the same text as a timestamptz).
    let quoted = |v: Option<&str>| v.map_or("NULL".to_owned(), |v| format!("'{v}'"));
    let rows: Vec<String> = OLD_ROWS
        .iter()
        .map(|&(at, actor, request, action, dataset)| {
            format!("('{at}', '{actor}', '{request}', '{action}', 'POST', '/v1/old', {}, 200)", quoted(dataset))
        })
        .collect();
    let insert = format!(
        "INSERT INTO audit (at, actor, request_id, action, method, path, dataset, status) VALUES {}",
        rows.join(", ")
    );
    registry_through(backend, db, BEFORE_COMPACT_AUDIT, &insert).await;
}

fn field<'a>(row: &'a Value, key: &str) -> &'a str {
    row[key].as_str().unwrap_or_default()
}

/// Every row of `/v1/audit?{query}`, page by page (`limit=2`), by cursor.
async fn all_pages(app: &TestApp, query: &str) -> Vec<Value> {
    app.all_pages(&format!("/v1/audit?limit=2&{query}")).await
}

async fn an_upgraded_audit_log_lists_the_rows_before_and_after_as_one(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else { return };
    registry_before_compact_audit(backend, &db).await;
    let app = TestApp::spawn_on_prepared(backend, db).await;

    // Written by this version: a start and a commit of d.shared.
    let id = app.start_ok("t", "d.shared", "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, body) = app.commit(&id, &clean("dt=2026-08-24", 10)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let written_at = app.clock.now().trunc_subsecs(6);

    let (status, page) = app.get("/v1/audit?limit=100").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let rows = page["items"].as_array().expect("items");
    let requests: Vec<&str> = rows.iter().map(|r| field(r, "request_id")).collect();
    assert_eq!(requests.len(), 5, "two new rows and the three old ones: {page}");
    assert_eq!(&requests[2..], ["old-3", "old-2", "old-1"], "the old rows after the new, newest first");
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().expect("id")).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "ids go down across both tables: {ids:?}");
    assert_eq!((field(&rows[0], "action"), field(&rows[1], "action")), ("batch.commit", "batch.start"));
    for new in &rows[..2] {
        assert_eq!(
            (field(new, "actor"), field(new, "method"), field(new, "dataset")),
            ("anonymous", "POST", "d.shared")
        );
        // The time the store wrote, to the microsecond (an integer on SQLite).
        let at: DateTime<Utc> = field(new, "at").parse().expect("at");
        assert_eq!(at, written_at, "{new}");
    }
    assert_eq!(field(&rows[1], "path"), "/v1/batches");
    assert_eq!(field(&rows[0], "path"), format!("/v1/batches/{id}/commit"));
    assert_eq!(rows[0]["status"], 200);
    for (row, (at, actor, _, action, dataset)) in rows[2..].iter().rev().zip(OLD_ROWS) {
        let (listed, old): (DateTime<Utc>, DateTime<Utc>) =
            (field(row, "at").parse().expect("at"), at.parse().expect("at"));
        assert_eq!(listed, old, "{row}");
        assert_eq!((field(row, "actor"), field(row, "action")), (*actor, *action));
        assert_eq!(row["dataset"].as_str(), *dataset, "{row}");
        assert_eq!((field(row, "method"), field(row, "path"), row["status"].as_i64()), ("POST", "/v1/old", Some(200)));
    }

    // Each filter applies to both tables; pages of two cross from one to the other.
    let requests_of = |rows: Vec<Value>| rows.iter().map(|r| field(r, "request_id").to_owned()).collect::<Vec<_>>();
    let everything = requests_of(all_pages(&app, "").await);
    assert_eq!(everything, requests, "paging by cursor gives the same rows");
    let shared = requests_of(all_pages(&app, "dataset=d.shared").await);
    assert_eq!(&shared[2..], ["old-1"], "{shared:?}");
    assert_eq!(shared.len(), 3, "{shared:?}");
    assert_eq!(requests_of(all_pages(&app, "dataset=d.gone").await), ["old-2"]);
    assert_eq!(requests_of(all_pages(&app, "actor=old-etl").await), ["old-2", "old-1"]);
    assert_eq!(requests_of(all_pages(&app, "actor=anonymous").await), requests[..2]);
    let starts = requests_of(all_pages(&app, "action=batch.start").await);
    assert_eq!((starts.len(), starts[1].as_str()), (2, "old-1"), "{starts:?}");
    let since = requests_of(all_pages(&app, &format!("since={}", enc("2026-01-01T00:00:01.999999Z"))).await);
    assert_eq!(&since[2..], ["old-3", "old-2"], "since is inclusive, on both tables: {since:?}");
    assert_eq!(since.len(), 4, "{since:?}");
    let at_last = requests_of(all_pages(&app, &format!("since={}", enc(&written_at.to_rfc3339()))).await);
    assert_eq!(at_last, requests[..2], "since the instant of the last write: both of its rows");
    let future = (written_at + chrono::Duration::microseconds(1)).to_rfc3339();
    assert!(all_pages(&app, &format!("since={}", enc(&future))).await.is_empty(), "nothing after the last write");
    assert!(all_pages(&app, "actor=nobody").await.is_empty(), "an actor never seen matches nothing");

    // The new rows went to `audit_log` by number; nothing writes `audit` any more.
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM audit").await, 3);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM audit_log").await, 2);
    let names = "SELECT COUNT(*) FROM audit_names WHERE name IN ('anonymous', 'batch.start', 'batch.commit', 'POST', 'd.shared')";
    assert_eq!(app.sql_count(names).await, 5, "each name once");
    let all_names = "SELECT COUNT(*) FROM audit_names";
    assert_eq!(
        app.sql_count(all_names).await,
        12,
        "only the names used (two routes among them), and the feed's five kinds (0020)"
    );
    if backend == Backend::Sqlite {
        assert_eq!(app.sql_count("SELECT COUNT(*) FROM audit_log WHERE typeof(at) = 'integer'").await, 2);
    }

    // A restarted instance (its names not in memory) reads their numbers:
    // a start is its own write and its audit row's, nothing more.
    let app = app.restart().await;
    let writes = |s: &crate::metrics::Scrape| s.value("batchgate_db_operations_total", &[("kind", "write")]);
    let before = writes(&crate::metrics::scrape(&app).await);
    let id = app.start_ok("t", "d.shared", "2026-08-25", &["dt=2026-08-25"]).await;
    assert_eq!(writes(&crate::metrics::scrape(&app).await) - before, 2.0, "no name stored again");
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM audit_names").await, 12);
    let (_, page) = app.get("/v1/audit?limit=1").await;
    assert_eq!((field(&page["items"][0], "action"), field(&page["items"][0], "dataset")), ("batch.start", "d.shared"));
    assert!(!id.is_empty());
}

per_backend! {
    an_upgraded_audit_log_lists_the_rows_before_and_after_as_one
        => sqlite_an_upgraded_audit_log_lists_the_rows_before_and_after_as_one,
           postgres_an_upgraded_audit_log_lists_the_rows_before_and_after_as_one;
}

/// A registry whose audit log has rows written as the version before 0021
/// wrote them (path and request id as text) lists them as they were, and
/// the rows written after, kept as route and parameters and as two
/// numbers, as they were recorded: the path requested, the `x-request-id`
/// answered (or sent by the client, which is kept as it came).
async fn audit_rows_kept_by_route_list_as_recorded_beside_the_rows_before(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else { return };
    let old_rows = "INSERT INTO audit_names (name) VALUES ('old-etl'), ('batch.commit'), ('POST'); \
        INSERT INTO audit_log (at, actor, action, method, dataset, status, request_id, path) \
        SELECT 1, who.id, what.id, how.id, NULL, 200, '0123456789ab-7', '/v1/batches/o-20260101-001/commit' \
        FROM audit_names who, audit_names what, audit_names how \
        WHERE who.name = 'old-etl' AND what.name = 'batch.commit' AND how.name = 'POST'";
    let old_rows = match backend {
        Backend::Sqlite => old_rows.to_owned(),
        Backend::Postgres => old_rows.replace("SELECT 1,", "SELECT TIMESTAMPTZ '2026-01-01T00:00:00Z',"),
    };
    registry_through(backend, &db, BEFORE_AUDIT_ROUTES, &old_rows).await;
    let app = TestApp::spawn_on_prepared(backend, db).await;

    // A start and a heartbeat, answered with request ids of the service's
    // own; a commit that sends its own request id, with a character of the
    // batch id percent-encoded (axum decodes it: the same batch).
    let body =
        serde_json::json!({"task": "t", "dataset": "d.routes", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]});
    let resp = app.client.post(format!("{}/v1/batches", app.base)).json(&body).send().await.expect("start");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let start_request = resp.headers()["x-request-id"].to_str().expect("id").to_owned();
    let id = resp.json::<Value>().await.expect("json")["batch_id"].as_str().expect("batch id").to_owned();
    let resp = app.client.post(format!("{}/v1/batches/{id}/heartbeat", app.base)).send().await.expect("heartbeat");
    assert_eq!(resp.status(), StatusCode::OK);
    let heartbeat_request = resp.headers()["x-request-id"].to_str().expect("id").to_owned();
    let commit_path = format!("/v1/batches/{}/commit", id.replacen('-', "%2D", 1));
    let resp = app
        .client
        .post(format!("{}{commit_path}", app.base))
        .header("x-request-id", "airflow-run-42")
        .json(&clean("dt=2026-08-24", 10))
        .send()
        .await
        .expect("commit");
    assert_eq!(resp.status(), StatusCode::OK);

    let rows = all_pages(&app, "").await;
    let listed: Vec<(&str, &str, &str)> =
        rows.iter().map(|r| (field(r, "action"), field(r, "path"), field(r, "request_id"))).collect();
    assert_eq!(
        listed,
        [
            ("batch.commit", commit_path.as_str(), "airflow-run-42"),
            ("batch.heartbeat", &format!("/v1/batches/{id}/heartbeat"), heartbeat_request.as_str()),
            ("batch.start", "/v1/batches", start_request.as_str()),
            ("batch.commit", "/v1/batches/o-20260101-001/commit", "0123456789ab-7"),
        ]
    );
    assert_eq!(field(&rows[0], "dataset"), "d.routes", "{}", rows[0]);

    // How they are kept: the old row as it was; the new by route, a stored
    // batch by number, the service's request id as numbers, the client's
    // (and a batch id as the client encoded it) as its text.
    let kept = app
        .sql_rows(
            "SELECT r.name, l.path, l.request_id, CAST(l.request_process AS TEXT), CAST(l.request_seq AS TEXT), \
                    b.batch_id \
             FROM audit_log l LEFT JOIN audit_names r ON r.id = l.route LEFT JOIN batches b ON b.id = l.batch \
             ORDER BY l.id",
        )
        .await;
    let some = |s: &str| Some(s.to_owned());
    let numbers = |request: &str| {
        let (process, seq) = request.split_once('-').expect("the service's form");
        let number = |hex: &str| Some(i64::from_str_radix(hex, 16).expect("hex").to_string());
        (number(process), number(seq))
    };
    let ((start_process, start_seq), (beat_process, beat_seq)) = (numbers(&start_request), numbers(&heartbeat_request));
    assert_eq!(
        kept,
        [
            vec![None, some("/v1/batches/o-20260101-001/commit"), some("0123456789ab-7"), None, None, None],
            vec![some("/v1/batches"), some(""), some(""), start_process, start_seq, None],
            vec![some("/v1/batches/{batch_id}/heartbeat"), some(""), some(""), beat_process, beat_seq, some(&id)],
            vec![
                some("/v1/batches/{batch_id}/commit"),
                some(&id.replacen('-', "%2D", 1)),
                some("airflow-run-42"),
                None,
                None,
                None
            ],
        ]
    );
}

per_backend! {
    audit_rows_kept_by_route_list_as_recorded_beside_the_rows_before
        => sqlite_audit_rows_kept_by_route_list_as_recorded_beside_the_rows_before,
           postgres_audit_rows_kept_by_route_list_as_recorded_beside_the_rows_before;
}

/// The changes an older version wrote (`changes`): time, kind, dataset,
/// partition, version, batch id, detail. Their ids are the sequence's first.
type OldChange = (&'static str, &'static str, &'static str, &'static str, i64, Option<&'static str>, &'static str);
const OLD_CHANGES: &[OldChange] = &[
    ("2001-01-01T00:00:00.000000Z", "published", "d.gone", "dt=2001-01-01", 1, Some("t-20010101-001"), "{}"),
    ("2001-01-01T00:00:01.000000Z", "invalidated", "d.gone", "dt=2001-01-01", 1, None, r#"{"reason":"bad load"}"#),
    ("2026-01-01T00:00:00.000001Z", "published", "d.shared", "dt=2026-01-01", 1, Some("t-20260101-001"), "{}"),
    ("2026-01-01T00:00:02.500000Z", "restated", "d.shared", "dt=2026-01-01", 2, Some("t-20260101-002"), "{}"),
];

/// Every change of `/v1/changes?{query}`, page by page (`limit=2`), by cursor.
async fn whole_feed(app: &TestApp, query: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut url = format!("/v1/changes?limit=2&{query}");
    loop {
        let (status, page) = app.get(&url).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let got = page["items"].as_array().expect("items");
        if got.is_empty() {
            return items;
        }
        items.extend(got.iter().cloned());
        url = format!("/v1/changes?limit=2&{query}&after={}", enc(page["next_cursor"].as_str().expect("cursor")));
    }
}

async fn an_upgraded_change_feed_lists_the_changes_before_and_after_as_one(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else { return };
    let rows: Vec<String> = OLD_CHANGES
        .iter()
        .map(|(at, kind, dataset, partition, version, batch, detail)| {
            let batch = batch.map_or("NULL".to_owned(), |b| format!("'{b}'"));
            format!("('{at}', '{kind}', '{dataset}', '{partition}', {version}, {batch}, '{detail}')")
        })
        .collect();
    let insert = format!(
        "INSERT INTO changes (at, kind, dataset, partition_spec, version, batch_id, detail) VALUES {}",
        rows.join(", ")
    );
    registry_through(backend, &db, BEFORE_COMPACT_FEED, &insert).await;
    let app = TestApp::spawn_on_prepared(backend, db).await;

    // Written by this version: a publish of d.shared, then its invalidation.
    let (ds, p) = ("d.shared", "dt=2026-08-24");
    let published = app.publish("t", ds, "2026-08-24", p, 10).await;
    let batch = published["batch_id"].as_str().expect("batch id").to_owned();
    let written_at = app.clock.now().trunc_subsecs(6);
    let (status, body) =
        app.post(&format!("/v1/partitions/{ds}/{}/invalidate", enc(p)), &serde_json::json!({"reason": "dupes"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, page) = app.get("/v1/changes?limit=100").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 6, "the four old changes, then the two new: {page}");
    for (item, (at, kind, dataset, partition, version, batch, detail)) in items.iter().zip(OLD_CHANGES) {
        let (listed, old): (DateTime<Utc>, DateTime<Utc>) =
            (field(item, "at").parse().expect("at"), at.parse().expect("at"));
        assert_eq!(listed, old, "{item}");
        assert_eq!(
            (field(item, "kind"), field(item, "dataset"), field(item, "partition")),
            (*kind, *dataset, *partition)
        );
        assert_eq!((item["version"].as_i64(), item["batch_id"].as_str()), (Some(*version), *batch), "{item}");
        let stored: Value = serde_json::from_str(detail).expect("detail");
        assert_eq!(item["detail"], stored, "{item}");
    }
    let (new_published, new_invalidated) = (&items[4], &items[5]);
    assert_eq!(
        (field(new_published, "kind"), field(new_published, "dataset"), field(new_published, "partition")),
        ("published", ds, p)
    );
    assert_eq!((new_published["version"].as_i64(), field(new_published, "batch_id")), (Some(1), batch.as_str()));
    assert_eq!(new_published["detail"], items[2]["detail"], "no detail reads as before (stored as none)");
    assert_eq!(field(new_invalidated, "kind"), "invalidated");
    assert_eq!(new_invalidated["detail"], serde_json::json!({"reason": "dupes"}));
    assert_eq!(new_invalidated["batch_id"], new_published["batch_id"], "{new_invalidated}");
    for new in [new_published, new_invalidated] {
        // The time the store wrote, to the microsecond (an integer on SQLite).
        let at: DateTime<Utc> = field(new, "at").parse().expect("at");
        assert_eq!(at, written_at, "{new}");
    }
    let cursors: Vec<&str> = items.iter().map(|i| field(i, "cursor")).collect();
    let everything = whole_feed(&app, "").await;
    assert_eq!(everything.iter().map(|i| field(i, "cursor")).collect::<Vec<_>>(), cursors, "pages cross the tables");
    assert_eq!(everything, *items);
    let of = |rows: Vec<Value>| {
        rows.iter().map(|i| (field(i, "kind").to_owned(), field(i, "partition").to_owned())).collect::<Vec<_>>()
    };
    let shared = of(whole_feed(&app, &format!("dataset={ds}")).await);
    let expected: Vec<(String, String)> =
        [("published", "dt=2026-01-01"), ("restated", "dt=2026-01-01"), ("published", p), ("invalidated", p)]
            .iter()
            .map(|(k, p)| (k.to_string(), p.to_string()))
            .collect();
    assert_eq!(shared, expected, "a dataset's changes in both tables");
    assert_eq!(whole_feed(&app, "dataset=d.gone").await, items[..2].to_vec());
    assert!(whole_feed(&app, "dataset=d.never").await.is_empty(), "a dataset never seen has no change");

    // The new changes went to `change_log` by number; nothing writes `changes` any more.
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM changes").await, 4);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM change_log").await, 2);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM change_log WHERE detail IS NULL").await, 1, "the publish's");
    if backend == Backend::Sqlite {
        assert_eq!(app.sql_count("SELECT COUNT(*) FROM change_log WHERE typeof(at) = 'integer'").await, 2);
    }

    // Retention prunes the feed as one prefix across both tables: the two
    // changes of 2001 (in `changes`) go; a change of `change_log` dated
    // 2001 (a clock set back) stays, numbered after kept ones.
    let old = match backend {
        Backend::Sqlite => "978307200000000",
        Backend::Postgres => "TIMESTAMPTZ '2001-01-01T00:00:00+00:00'",
    };
    app.sql(&format!(
        "INSERT INTO change_log (at, kind, dataset, partition_spec, version) \
         SELECT {old}, (SELECT id FROM audit_names WHERE name = 'published'), \
                (SELECT id FROM audit_names WHERE name = 'd.shared'), 'dt=set-back', 1"
    ))
    .await;
    assert_eq!(app.scan().await.pruned, 2, "the old table's two changes of 2001");
    let (status, err) = app.get(&format!("/v1/changes?after={}", enc(cursors[0]))).await;
    assert_eq!((status, &err["error"]["code"]), (StatusCode::GONE, &Value::from("cursor_expired")), "{err}");
    let (status, rest) = app.get(&format!("/v1/changes?after={}", enc(cursors[1]))).await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    let partitions: Vec<&str> =
        rest["items"].as_array().expect("items").iter().map(|i| field(i, "partition")).collect();
    assert_eq!(partitions, ["dt=2026-01-01", "dt=2026-01-01", p, p, "dt=set-back"]);
}

per_backend! {
    an_upgraded_change_feed_lists_the_changes_before_and_after_as_one
        => sqlite_an_upgraded_change_feed_lists_the_changes_before_and_after_as_one,
           postgres_an_upgraded_change_feed_lists_the_changes_before_and_after_as_one;
}

/// A batch's checks are stored packed (`Dialect::packed`): on PostgreSQL
/// as one JSONB string holding their JSON text, under half the bytes of
/// the JSONB array stored before; on SQLite as that text, as before. Checks
/// stored as the document itself (every batch decided before) read back the
/// same, published and rejected alike.
async fn stored_checks_are_packed_and_the_form_before_reads_the_same(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let published = app.publish("t", "d.packed", "2026-08-24", "dt=2026-08-24", 1000).await;
    let published = published["batch_id"].as_str().expect("batch_id").to_owned();
    let rejected = app.start_ok("t", "d.packed", "2026-08-25", &["dt=2026-08-25"]).await;
    let (status, body) = app.commit(&rejected, &clean("dt=2026-08-25", 0)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "an empty partition is rejected: {body}");
    let records = || async {
        let mut checks = Vec::new();
        for id in [&published, &rejected] {
            let (status, record) = app.get(&format!("/v1/batches/{id}")).await;
            assert_eq!(status, StatusCode::OK, "{record}");
            checks.push(record["checks"].clone());
        }
        checks
    };
    let written = records().await;
    for checks in &written {
        assert_eq!(checks.as_array().map(Vec::len), Some(8), "eight checks: {checks}");
    }
    assert!(written[1].to_string().contains(r#""status":"fail""#), "the rejection's failed check: {}", written[1]);

    let (kind, size) = match backend {
        Backend::Sqlite => ("json_type(checks)", "length(checks)"),
        Backend::Postgres => ("jsonb_typeof(checks)", "pg_column_size(checks)"),
    };
    let kinds = format!("SELECT {kind} FROM batches ORDER BY id");
    let bytes = format!("SELECT CAST(SUM({size}) AS BIGINT) FROM batches");
    let packed = match backend {
        Backend::Sqlite => "array",
        Backend::Postgres => "string",
    };
    assert_eq!(app.sql_rows(&kinds).await, vec![vec![Some(packed.to_owned())]; 2], "as stored");
    let packed_bytes = app.sql_count(&bytes).await;

    if backend == Backend::Postgres {
        // The form every batch decided before this one was stored in.
        app.sql("UPDATE batches SET checks = (checks #>> '{}')::jsonb").await;
        assert_eq!(app.sql_rows(&kinds).await, vec![vec![Some("array".to_owned())]; 2], "as stored before");
        let array_bytes = app.sql_count(&bytes).await;
        assert!(packed_bytes * 2 < array_bytes, "packed {packed_bytes} bytes, as an array {array_bytes}");
    }
    assert_eq!(records().await, written, "the checks read back the same from either form");
}

per_backend! {
    stored_checks_are_packed_and_the_form_before_reads_the_same
        => sqlite_stored_checks_are_packed_and_the_form_before_reads_the_same,
           postgres_stored_checks_are_packed_and_the_form_before_reads_the_same;
}

/// The first transaction that stores `name` in `audit_names` is refused at
/// its `COMMIT` (PostgreSQL: a deferred trigger); the next stores it.
async fn refuse_a_name_once_at_commit(app: &TestApp, name: &str) {
    app.sql(&format!(
        "CREATE SEQUENCE name_faults; \
         CREATE FUNCTION refuse_a_name() RETURNS trigger AS $$ BEGIN \
           IF NEW.name = '{name}' AND nextval('name_faults') = 1 THEN RAISE EXCEPTION 'injected at commit'; END IF; \
           RETURN NEW; END $$ LANGUAGE plpgsql; \
         CREATE CONSTRAINT TRIGGER refuse_a_name AFTER INSERT ON audit_names DEFERRABLE INITIALLY DEFERRED \
           FOR EACH ROW EXECUTE FUNCTION refuse_a_name();"
    ))
    .await;
}

/// The number of a name whose insert was rolled back names nothing: it is
/// not remembered, and the next write of that name stores it again. The
/// fault is injected at `COMMIT` (a deferred trigger that refuses once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_name_whose_insert_was_rolled_back_is_stored_again() {
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    refuse_a_name_once_at_commit(&app, "d.rolled").await;
    // The write stands; its audit row could not be stored (the log says so).
    app.start_ok("t", "d.rolled", "2026-08-24", &["dt=2026-08-24"]).await;
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM audit_names WHERE name = 'd.rolled'").await, 0);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM audit_log").await, 0);

    app.start_ok("t", "d.rolled", "2026-08-25", &["dt=2026-08-25"]).await;
    let (status, page) = app.get("/v1/audit?dataset=d.rolled").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let rows = page["items"].as_array().expect("items");
    assert_eq!(rows.len(), 1, "the second start's row, under its dataset's stored number: {page}");
    assert_eq!((field(&rows[0], "action"), field(&rows[0], "dataset")), ("batch.start", "d.rolled"));
    let dangling =
        "SELECT COUNT(*) FROM audit_log l WHERE NOT EXISTS (SELECT 1 FROM audit_names n WHERE n.id = l.dataset)";
    assert_eq!(app.sql_count(dangling).await, 0, "no row refers to a number that names nothing");
}

/// The number of a dataset that a publish stored for the feed (its first
/// change, on a store no request's audit row has named it to) is
/// remembered only once that publish commits: a publish refused at
/// `COMMIT` leaves nothing remembered, and the commit after stores the
/// name again. The fault is injected at `COMMIT` (a deferred trigger).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_feed_name_stored_by_a_rolled_back_publish_is_stored_again() {
    use crate::statements::{clean_evidence, start_request};
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    refuse_a_name_once_at_commit(&app, "d.direct").await;
    let store = batchgate::store::SqlStore::connect(
        &app.db.url,
        &Default::default(),
        std::sync::Arc::new(batchgate::clock::SystemClock),
    )
    .await
    .expect("connect");
    let (ds, dt) = ("d.direct", "2026-08-24");
    let started = store.start_batch(start_request(ds, dt, &[])).await.expect("start");
    let refused = store.commit_batch(&started.batch_id, clean_evidence(ds, dt), "c".into()).await;
    assert!(refused.is_err(), "the publish is refused at COMMIT: {refused:?}");
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM audit_names WHERE name = 'd.direct'").await, 0);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM change_log").await, 0);

    let decision = store.commit_batch(&started.batch_id, clean_evidence(ds, dt), "c".into()).await.expect("commit");
    assert_eq!(decision.decided, batchgate::store::Decided::Published);
    let dangling =
        "SELECT COUNT(*) FROM change_log l WHERE NOT EXISTS (SELECT 1 FROM audit_names n WHERE n.id = l.dataset)";
    assert_eq!(app.sql_count(dangling).await, 0, "no change refers to a number that names nothing");
    let feed = store.list_changes(0, Some(ds), 10).await.expect("feed");
    let listed: Vec<(&str, &str)> = feed.iter().map(|c| (c.kind.as_str(), c.dataset.as_str())).collect();
    assert_eq!(listed, [("published", ds)]);
}

/// On SQLite a batch's and a partition's instants are stored as integers
/// beside their text column, which holds '' (migration 0022); rows written
/// before hold the text alone. Either form reads the same: the batch's
/// record and its listing filtered by start time, the partitions' listing,
/// and a lease expired in either form is found and abandoned by the scan.
async fn instants_are_numbers_on_sqlite_and_rows_written_before_read_the_same(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let ds = "d.instants";
    let published = app.publish("t", ds, "2026-08-24", "dt=2026-08-24", 1000).await;
    let published = published["batch_id"].as_str().expect("batch_id").to_owned();
    app.clock.advance(chrono::Duration::milliseconds(1500));
    let failed = app.start_ok("t", ds, "2026-08-25", &["dt=2026-08-25"]).await;
    let (status, body) = app
        .post(
            &format!("/v1/batches/{failed}/fail"),
            &serde_json::json!({"stage": "write", "category": "partial_write"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    app.clock.advance(chrono::Duration::microseconds(1_000_001));
    let (status, body) = app
        .post(
            &format!("/v1/partitions/{ds}/{}/invalidate", enc("dt=2026-08-24")),
            &serde_json::json!({"reason": "dupes"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let running = [
        app.start_ok("t", ds, "2026-08-26", &["dt=2026-08-26"]).await,
        app.start_ok("t", ds, "2026-08-27", &["dt=2026-08-27"]).await,
    ];
    let (status, body) = app.post(&format!("/v1/batches/{}/heartbeat", running[0]), &serde_json::json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let since = enc(&app.clock_now());
    let read = || async {
        let mut seen = Vec::new();
        for id in [&published, &failed, &running[0], &running[1]] {
            let (status, record) = app.get(&format!("/v1/batches/{id}")).await;
            assert_eq!(status, StatusCode::OK, "{record}");
            seen.push(record);
        }
        let (status, partitions) = app.get(&format!("/v1/partitions?dataset={ds}")).await;
        assert_eq!(status, StatusCode::OK, "{partitions}");
        seen.push(partitions);
        let (status, recent) = app.get(&format!("/v1/batches?dataset={ds}&since={since}")).await;
        assert_eq!(status, StatusCode::OK, "{recent}");
        seen.push(recent);
        let (status, earlier) = app.get(&format!("/v1/batches?dataset={ds}&until={since}")).await;
        assert_eq!(status, StatusCode::OK, "{earlier}");
        seen.push(earlier);
        seen
    };
    let written = read().await;
    for record in &written[..4] {
        for field in ["started_at", "lease_expires_at"] {
            assert!(record[field].is_string(), "{field}: {record}");
        }
    }
    assert!(written[0]["decided_at"].is_string() && written[1]["decided_at"].is_string(), "{written:?}");
    assert!(written[2]["decided_at"].is_null(), "{}", written[2]);
    let recent: Vec<&str> =
        written[5]["items"].as_array().expect("items").iter().filter_map(|b| b["batch_id"].as_str()).collect();
    assert_eq!(recent, [running[1].as_str(), running[0].as_str()], "started since {since}");
    let earlier: Vec<&str> =
        written[6]["items"].as_array().expect("items").iter().filter_map(|b| b["batch_id"].as_str()).collect();
    assert_eq!(earlier, [failed.as_str(), published.as_str()], "started before {since}");

    if backend == Backend::Sqlite {
        let forms = "SELECT typeof(lease_expires_at_us) || typeof(started_at_us) || typeof(decided_at_us) \
                     || '/' || lease_expires_at || started_at || COALESCE(decided_at, 'null') FROM batches ORDER BY id";
        let forms: Vec<String> = app.sql_rows(forms).await.into_iter().filter_map(|r| r[0].clone()).collect();
        let decided = "integerintegerinteger/".to_owned();
        let undecided = "integerintegernull/null".to_owned();
        assert_eq!(forms, [decided.clone(), decided, undecided.clone(), undecided], "numbers, the text columns ''");
        let forms = "SELECT typeof(published_at_us) || typeof(updated_at_us) || '/' || updated_at || COALESCE(published_at, 'null') \
                     FROM partitions ORDER BY partition_spec";
        let forms: Vec<String> = app.sql_rows(forms).await.into_iter().filter_map(|r| r[0].clone()).collect();
        let unpublished = "nullinteger/null".to_owned();
        assert_eq!(forms, ["integerinteger/".to_owned(), unpublished.clone(), unpublished.clone(), unpublished]);

        // The form every row written before migration 0022 has.
        let text =
            |col: &str| format!("{col} = {}, {col}_us = NULL", Dialect::Sqlite.instant_value(&format!("{col}_us")));
        app.sql(&format!(
            "UPDATE batches SET {}, {}, {}",
            text("lease_expires_at"),
            text("started_at"),
            text("decided_at")
        ))
        .await;
        app.sql(&format!("UPDATE partitions SET {}, {}", text("published_at"), text("updated_at"))).await;
        let left = "SELECT COUNT(*) FROM batches WHERE started_at = '' OR started_at_us IS NOT NULL \
                    OR lease_expires_at = '' OR decided_at = '' OR decided_at_us IS NOT NULL";
        assert_eq!(app.sql_count(left).await, 0, "every batch in the form before");
        // One running batch back in the form written since.
        let number = |col: &str| format!("{col}_us = {}, {col} = ''", micros(col));
        app.sql(&format!(
            "UPDATE batches SET {}, {} WHERE batch_id = '{}'",
            number("lease_expires_at"),
            number("started_at"),
            running[1]
        ))
        .await;
    }
    assert_eq!(read().await, written, "the same from either form");

    // A scan before their leases expire leaves both running; once they
    // expired, it finds each, whatever its form.
    app.scan().await;
    for id in &running {
        let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
        assert_eq!(record["state"], "running", "{record}");
    }
    app.clock.advance(chrono::Duration::hours(3));
    app.scan().await;
    for id in &running {
        let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
        assert_eq!(record["state"], "abandoned", "{record}");
    }
}

/// A start-time filter finds a batch started at exactly its instant in every
/// form SQLite has held one in: a number (since migration 0022), the text
/// written before it (six digits and `Z`), and sqlx's text the first
/// versions wrote (`+00:00`, and no fraction for a whole second). Text of
/// the two forms sorts a tie apart (`…:00+00:00` below `…:00.000000Z`),
/// so a row at the instant was once left out of `since` and kept in
/// `until`. The old audit table's times are filtered the same way. On
/// PostgreSQL the same instants, as `timestamptz`.
async fn a_start_time_filter_keeps_ties_in_every_stored_form(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let ds = "d.ties";
    let mut ids = Vec::new();
    for dt in ["2026-08-24", "2026-08-25", "2026-08-26", "2026-08-27"] {
        ids.push(app.start_ok("t", ds, dt, &[&format!("dt={dt}")]).await);
    }
    let (at, after) = ("2026-08-24T10:00:00Z", "2026-08-24T10:00:00.000001Z");
    // Each batch's start, as each form stores it: ids[2] a microsecond later.
    let forms: [(&str, &str); 4] = match backend {
        Backend::Sqlite => [
            ("started_at = '2026-08-24T10:00:00+00:00', started_at_us = NULL", "sqlx's text, a whole second"),
            ("started_at = '2026-08-24T10:00:00.000000Z', started_at_us = NULL", "six digits and Z"),
            ("started_at = '2026-08-24T10:00:00.000001+00:00', started_at_us = NULL", "sqlx's text, a microsecond on"),
            ("started_at = '', started_at_us = 1787565600000000", "a number"),
        ],
        Backend::Postgres => [
            ("started_at = '2026-08-24T10:00:00Z'", "timestamptz"),
            ("started_at = '2026-08-24T10:00:00Z'", "timestamptz"),
            ("started_at = '2026-08-24T10:00:00.000001Z'", "timestamptz, a microsecond on"),
            ("started_at = '2026-08-24T10:00:00Z'", "timestamptz"),
        ],
    };
    for (id, (set, _)) in ids.iter().zip(forms) {
        app.sql(&format!("UPDATE batches SET {set} WHERE batch_id = '{id}'")).await;
    }
    let listed = |filter: String| {
        let app = &app;
        async move {
            let (status, page) = app.get(&format!("/v1/batches?dataset={ds}&{filter}")).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            let mut found: Vec<String> = page["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|b| b["batch_id"].as_str().expect("batch_id").to_owned())
                .collect();
            found.sort();
            found
        }
    };
    let of = |which: &[usize]| which.iter().map(|&i| ids[i].clone()).collect::<Vec<_>>();
    let described: Vec<&str> = forms.iter().map(|(_, form)| *form).collect();
    assert_eq!(listed(format!("since={}", enc(at))).await, of(&[0, 1, 2, 3]), "since is inclusive: {described:?}");
    assert_eq!(listed(format!("until={}", enc(at))).await, of(&[]), "until is exclusive: {described:?}");
    assert_eq!(listed(format!("until={}", enc(after))).await, of(&[0, 1, 3]), "{described:?}");
    assert_eq!(listed(format!("since={}", enc(after))).await, of(&[2]), "{described:?}");

    // The audit rows of the version before migration 0019, in both text forms.
    app.sql(
        "INSERT INTO audit (at, actor, request_id, action, method, path, dataset, status) VALUES \
         ('2026-08-24T10:00:00+00:00', 'old-etl', 'sqlx-form', 'batch.start', 'POST', '/v1/old', NULL, 200), \
         ('2026-08-24T10:00:00.000000Z', 'old-etl', 'z-form', 'batch.start', 'POST', '/v1/old', NULL, 200)",
    )
    .await;
    let audit = |since: &str| {
        let app = &app;
        let query = format!("actor=old-etl&since={}", enc(since));
        async move {
            let mut found: Vec<String> =
                all_pages(app, &query).await.iter().map(|r| field(r, "request_id").to_owned()).collect();
            found.sort();
            found
        }
    };
    assert_eq!(audit(at).await, ["sqlx-form", "z-form"], "since is inclusive in the old audit table");
    assert!(audit(after).await.is_empty(), "nothing after");
}

/// SQLite: the microseconds since 1970 of the text instant column `col`.
fn micros(col: &str) -> String {
    format!("(CAST(strftime('%s', substr({col}, 1, 19)) AS INTEGER) * 1000000 + CAST(substr({col}, 21, 6) AS INTEGER))")
}

per_backend! {
    a_start_time_filter_keeps_ties_in_every_stored_form
        => sqlite_a_start_time_filter_keeps_ties_in_every_stored_form,
           postgres_a_start_time_filter_keeps_ties_in_every_stored_form;
    instants_are_numbers_on_sqlite_and_rows_written_before_read_the_same
        => sqlite_instants_are_numbers_on_sqlite_and_rows_written_before_read_the_same,
           postgres_instants_are_numbers_on_sqlite_and_rows_written_before_read_the_same;
}
