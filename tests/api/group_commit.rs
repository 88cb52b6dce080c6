//! Many writers at once (issue 14): on SQLite they share commits (group
//! commit on the write lane), on PostgreSQL they take turns. Either way
//! every well-formed request gets its answer (never a 5xx), a writer that
//! fails takes only its own work with it, a storage fault at `COMMIT` leaves
//! nothing of anyone's work, and a request cancelled mid-write leaves the
//! registry writable.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, enc, Backend, TestApp};
use crate::on_both_backends;

on_both_backends!(
    concurrent_cycles_all_publish_and_the_feed_has_each_once,
    a_failing_writer_takes_only_its_own_work,
    a_fault_at_commit_fails_every_writer_and_leaves_nothing,
    a_cancelled_write_leaves_the_registry_writable,
    concurrent_writes_are_each_audited_before_they_are_answered,
);

const PARTITION: &str = "dt=2026-08-24";

/// Start then commit on dataset `d.g{i}`: the two statuses and the commit's body.
async fn cycle(app: &TestApp, i: usize) -> (StatusCode, StatusCode, Value) {
    let (status, started) = app.start("t", &format!("d.g{i}"), "2026-08-24", &[PARTITION]).await;
    if status != StatusCode::CREATED {
        return (status, StatusCode::NOT_FOUND, started);
    }
    let id = started["batch_id"].as_str().expect("batch_id");
    let (committed, body) = app.commit(id, &clean(PARTITION, 10)).await;
    (status, committed, body)
}

/// Every change of the feed, read in small pages (each page continues where
/// the previous one's cursor says).
async fn feed(app: &TestApp) -> Vec<Value> {
    let mut all = Vec::new();
    let mut path = String::from("/v1/changes?limit=7");
    loop {
        let (status, page) = app.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let items = page["items"].as_array().expect("items").clone();
        if items.is_empty() {
            return all;
        }
        all.extend(items);
        path = format!("/v1/changes?limit=7&after={}", enc(page["next_cursor"].as_str().expect("next_cursor")));
    }
}

async fn concurrent_cycles_all_publish_and_the_feed_has_each_once(app: TestApp) {
    let n = 48;
    let results = join_all((0..n).map(|i| cycle(&app, i))).await;
    for (start, commit, body) in &results {
        assert_eq!((*start, *commit), (StatusCode::CREATED, StatusCode::OK), "{body}");
        assert_eq!(body["state"], "published", "{body}");
    }
    for i in 0..n {
        let (status, ready) = app.ready(&format!("d.g{i}"), &[PARTITION]).await;
        assert_eq!(status, StatusCode::OK, "d.g{i} is ready once its commit was answered: {ready}");
    }
    // The feed, read page by page, has each dataset's publish exactly once.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for c in feed(&app).await {
        *seen.entry(c["dataset"].as_str().expect("dataset").to_owned()).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = (0..n).map(|i| (format!("d.g{i}"), 1)).collect();
    assert_eq!(seen, expected);
}

async fn a_failing_writer_takes_only_its_own_work(app: TestApp) {
    let n = 24;
    // Batches that will report a write of a declared partition and then of
    // one they never declared: refused after the first row was written.
    let mut failing = Vec::new();
    for i in 0..n / 2 {
        failing.push(app.start_ok("t", &format!("d.bad{i}"), "2026-08-24", &[PARTITION]).await);
    }
    let app = &app;
    let bad = |id: &String| {
        let body = json!({"partitions": [
            {"partition": PARTITION, "rows_written": 7},
            {"partition": "dt=2026-08-25", "rows_written": 7},
        ]});
        let path = format!("/v1/batches/{id}/written");
        async move { app.post(&path, &body).await }
    };
    let (good, refused) = futures::join!(join_all((0..n).map(|i| cycle(app, i))), join_all(failing.iter().map(bad)));
    for (start, commit, body) in &good {
        assert_eq!((*start, *commit), (StatusCode::CREATED, StatusCode::OK), "{body}");
    }
    for (status, body) in &refused {
        assert_eq!(status.as_u16(), 422, "{body}");
        assert_eq!(body["error"]["code"], "unknown_partition");
    }
    // The refused writes left nothing: not the first partition's row count,
    // not a `written` event.
    for id in &failing {
        let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
        assert_eq!(record["state"], "running", "{record}");
        assert!(record["partitions"][0]["rows_written"].is_null(), "{record}");
        let events = record["events"].as_array().expect("events");
        assert!(events.iter().all(|e| e["kind"] != "written"), "{record}");
    }
    for i in 0..n {
        assert_eq!(app.ready(&format!("d.g{i}"), &[PARTITION]).await.0, StatusCode::OK);
    }
}

/// A constraint checked only at `COMMIT`: any transaction that publishes a
/// partition's log row fails to commit.
async fn fail_at_commit(app: &TestApp) {
    app.sql(match app.backend {
        Backend::Sqlite => {
            "CREATE TABLE inject_fault (batch INTEGER REFERENCES batches (id) DEFERRABLE INITIALLY DEFERRED); \
             CREATE TRIGGER inject_fault AFTER UPDATE ON task_produce_log WHEN NEW.status = 'published' \
             BEGIN INSERT INTO inject_fault VALUES (-1); END;"
        }
        Backend::Postgres => {
            "CREATE FUNCTION inject_fault() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$ LANGUAGE plpgsql; \
             CREATE CONSTRAINT TRIGGER inject_fault AFTER UPDATE ON task_produce_log DEFERRABLE INITIALLY DEFERRED \
             FOR EACH ROW WHEN (NEW.status = 'published') EXECUTE FUNCTION inject_fault();"
        }
    })
    .await;
}

async fn a_fault_at_commit_fails_every_writer_and_leaves_nothing(app: TestApp) {
    let n = 16;
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(app.start_ok("t", &format!("d.f{i}"), "2026-08-24", &[PARTITION]).await);
    }
    let mut before = Vec::new();
    for id in &ids {
        before.push(app.get(&format!("/v1/batches/{id}")).await.1);
    }
    let changes_before = feed(&app).await;
    let evidence = clean(PARTITION, 10);
    fail_at_commit(&app).await;

    let results = join_all(ids.iter().map(|id| app.commit(id, &evidence))).await;
    for (status, body) in &results {
        assert_eq!(
            (*status, body["error"]["code"].as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, Some("storage_error"))
        );
        assert!(!body.to_string().contains("injected"), "internal details stay in the log: {body}");
    }
    for (i, id) in ids.iter().enumerate() {
        let (_, after) = app.get(&format!("/v1/batches/{id}")).await;
        assert_eq!(after, before[i], "nothing of the failed commit stays");
        let (status, ready) = app.ready(&format!("d.f{i}"), &[PARTITION]).await;
        assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("running")));
    }
    assert_eq!(feed(&app).await, changes_before);

    app.sql(match app.backend {
        Backend::Sqlite => "DROP TRIGGER inject_fault",
        Backend::Postgres => "DROP TRIGGER inject_fault ON task_produce_log",
    })
    .await;
    let results = join_all(ids.iter().map(|id| app.commit(id, &evidence))).await;
    for (status, body) in &results {
        assert_eq!(*status, StatusCode::OK, "{body}");
        assert_eq!(body["partitions"][0]["version"], 1);
    }
}

/// Makes every publishing commit slow: a statement that takes a while runs
/// for each log row it publishes.
async fn slow_commits(app: &TestApp) {
    app.sql(match app.backend {
        Backend::Sqlite => {
            "CREATE TABLE slow_sink (n INTEGER); \
             CREATE TRIGGER slow AFTER UPDATE ON task_produce_log WHEN NEW.status = 'published' BEGIN \
             INSERT INTO slow_sink SELECT COUNT(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT x FROM c); \
             END;"
        }
        Backend::Postgres => {
            "CREATE FUNCTION slow() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END $$ LANGUAGE plpgsql; \
             CREATE TRIGGER slow AFTER UPDATE ON task_produce_log FOR EACH ROW WHEN (NEW.status = 'published') EXECUTE FUNCTION slow();"
        }
    })
    .await;
}

async fn a_cancelled_write_leaves_the_registry_writable(app: TestApp) {
    let ids = [
        app.start_ok("t", "d.c0", "2026-08-24", &[PARTITION]).await,
        app.start_ok("t", "d.c1", "2026-08-24", &[PARTITION]).await,
    ];
    slow_commits(&app).await;
    // Clients that give up while their commit is being written: the
    // service drops those requests mid-write (or, if they got through,
    // they committed whole).
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(100)).build().expect("client");
    join_all(
        ids.iter().map(|id| {
            impatient.post(format!("{}/v1/batches/{id}/commit", app.base)).json(&clean(PARTITION, 10)).send()
        }),
    )
    .await;
    app.sql(match app.backend {
        Backend::Sqlite => "DROP TRIGGER slow",
        Backend::Postgres => "DROP TRIGGER slow ON task_produce_log",
    })
    .await;

    // Whole or nothing: a cancelled commit left no trace (here, with
    // commits slower than the clients' patience, the batches stay running).
    for id in &ids {
        let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
        let committed = record["events"].as_array().expect("events").iter().any(|e| e["kind"] == "committed");
        assert_eq!(committed, record["state"] == "published", "{record}");
    }
    // Writes go on: each batch ends published exactly once, by the
    // cancelled commit if it got through or by this one.
    for (i, id) in ids.iter().enumerate() {
        let (status, body) = app.commit(id, &clean(PARTITION, 10)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["state"], "published");
        assert_eq!(body["partitions"][0]["version"], 1);
        assert_eq!(app.ready(&format!("d.c{i}"), &[PARTITION]).await.0, StatusCode::OK);
    }
    let results = join_all((0..8).map(|i| cycle(&app, i))).await;
    for (start, commit, body) in &results {
        assert_eq!((*start, *commit), (StatusCode::CREATED, StatusCode::OK), "{body}");
    }
}

/// Audit rows of concurrent requests are written together: each request is
/// still answered only once its own row is stored, with its own status.
async fn concurrent_writes_are_each_audited_before_they_are_answered(app: TestApp) {
    let n = 32;
    let app = &app;
    let write = |i: usize| async move {
        let dataset = format!("d.a{i}");
        let (first, _) = app.start("t", &dataset, "2026-08-24", &[PARTITION]).await;
        let (first_audit, page) = app.get(&format!("/v1/audit?dataset={dataset}")).await;
        let first_rows: Vec<(Value, Value)> = page["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|r| (r["action"].clone(), r["status"].clone()))
            .collect();
        // The same partition again while the first runs: refused, audited too.
        let (second, _) = app.start("t", &dataset, "2026-08-24", &[PARTITION]).await;
        let (_, page) = app.get(&format!("/v1/audit?dataset={dataset}")).await;
        let statuses: Vec<Value> =
            page["items"].as_array().expect("items").iter().map(|r| r["status"].clone()).collect();
        (first, first_audit, first_rows, second, statuses)
    };
    for (first, first_audit, first_rows, second, statuses) in join_all((0..n).map(write)).await {
        assert_eq!((first, first_audit, second), (StatusCode::CREATED, StatusCode::OK, StatusCode::CONFLICT));
        assert_eq!(first_rows, [(json!("batch.start"), json!(201))], "the start's row, stored when it was answered");
        assert_eq!(statuses, [json!(409), json!(201)], "newest first, each with its own status");
    }
    let (_, page) = app.get("/v1/audit?action=batch.start&limit=500").await;
    let mut request_ids: Vec<&str> =
        page["items"].as_array().expect("items").iter().map(|r| r["request_id"].as_str().expect("id")).collect();
    assert_eq!(request_ids.len(), 2 * n, "{page}");
    request_ids.sort_unstable();
    request_ids.dedup();
    assert_eq!(request_ids.len(), 2 * n, "one row per request");
}
