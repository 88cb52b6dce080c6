//! Growth: heartbeats and repeated OpenLineage events do not pile up, and
//! history older than `--retain` is pruned in batches, with a `410
//! cursor_expired` for a change-feed consumer left behind.

use batchgate::clock::Clock;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, enc, Backend, Receiver, TestApp};
use crate::on_both_backends;

on_both_backends!(
    three_thousand_heartbeats_make_a_small_record,
    twenty_repeats_of_an_openlineage_event_are_stored_once,
    old_changes_are_pruned_in_batches_of_a_thousand,
    the_change_feed_is_pruned_only_as_a_prefix,
    a_pass_cut_short_in_the_older_feed_table_prunes_nothing_newer,
);

const START: &str = include_str!("fixtures/openlineage/airflow_task_start.json");

async fn three_thousand_heartbeats_make_a_small_record(app: TestApp) {
    let id = app.start_ok("t", "d.beat", "2026-08-24", &["dt=2026-08-24"]).await;
    let first_at = app.clock.now();
    for _ in 0..3000 {
        let (status, _) = app.post(&format!("/v1/batches/{id}/heartbeat"), &json!({})).await;
        assert_eq!(status, StatusCode::OK);
        app.clock.advance(chrono::Duration::seconds(1));
    }
    let last_at = app.clock.now() - chrono::Duration::seconds(1);

    let (status, record) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    let events = record["events"].as_array().unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["started", "heartbeat"], "one heartbeat event, not 3,000");
    let beat = &events[1]["detail"];
    assert_eq!(beat["count"], 3000);
    let at = |v: &Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    assert_eq!(at(&beat["first_at"]), first_at);
    assert_eq!(at(&beat["last_at"]), last_at);
    assert_eq!(beat["lease_expires_at"], record["lease_expires_at"], "the last heartbeat set the lease");
    let size = serde_json::to_vec(&record).unwrap().len();
    assert!(size < 4096, "the record is {size} bytes");

    app.commit(&id, &clean("dt=2026-08-24", 5)).await;
    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    let kinds: Vec<&str> = record["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(kinds.iter().filter(|k| **k == "heartbeat").count(), 1);
}

async fn twenty_repeats_of_an_openlineage_event_are_stored_once(app: TestApp) {
    let mut answers = Vec::new();
    for _ in 0..20 {
        let (status, answer) = app.post_raw("/api/v1/lineage", START.to_owned()).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answers.push(answer);
    }
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM openlineage_events").await, 1);
    assert!(answers.iter().all(|a| a["event_id"] == answers[0]["event_id"]), "every repeat names the stored event");
    assert!(answers.iter().all(|a| a["batches"] == answers[0]["batches"]));

    // The same event written differently (other key order, spaces) is the same event.
    let reordered: Value = serde_json::from_str(START).unwrap();
    let (status, _) = app.post_raw("/api/v1/lineage", serde_json::to_string_pretty(&reordered).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM openlineage_events").await, 1);
    // Another event is stored.
    let mut other = reordered;
    other["eventTime"] = json!("2026-08-25T01:00:00.000Z");
    app.post_raw("/api/v1/lineage", other.to_string()).await;
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM openlineage_events").await, 2);
}

/// `n` changes of `d.old` dated 2001-01-01, written straight into the
/// feed's table as the service writes them (`change_log`, migration 0020).
fn old_changes(backend: Backend, n: u32) -> String {
    let old = match backend {
        Backend::Sqlite => "978307200000000",
        Backend::Postgres => "TIMESTAMPTZ '2001-01-01T00:00:00+00:00'",
    };
    format!(
        "INSERT INTO audit_names (name) VALUES ('d.old') ON CONFLICT (name) DO NOTHING; \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) \
         INSERT INTO change_log (at, kind, dataset, partition_spec, version) \
         SELECT {old}, (SELECT id FROM audit_names WHERE name = 'published'), \
                (SELECT id FROM audit_names WHERE name = 'd.old'), 'dt=x', 1 FROM n"
    )
}

/// 2,500 changes from long ago go in one pass, a thousand rows per
/// statement; the recent ones stay.
async fn old_changes_are_pruned_in_batches_of_a_thousand(app: TestApp) {
    app.sql(&old_changes(app.backend, 2500)).await;
    app.publish("t", "d.new", "2026-08-24", "dt=2026-08-24", 5).await;
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM change_log").await, 2501);

    let report = app.scan().await;
    assert_eq!(report.pruned, 2500);
    let (status, feed) = app.get("/v1/changes").await;
    assert_eq!(status, StatusCode::OK);
    let items = feed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{feed}");
    assert_eq!(items[0]["dataset"], "d.new");
}

/// A change dated before the retention but numbered after a recent one (a
/// clock set back) stays until the changes before it go: the feed is cut
/// as a prefix, so a cursor at a kept change is never told it expired.
async fn the_change_feed_is_pruned_only_as_a_prefix(app: TestApp) {
    let insert_old = |n: u32| old_changes(app.backend, n);
    app.sql(&insert_old(3)).await;
    app.publish("t", "d.new", "2026-08-24", "dt=2026-08-24", 5).await;
    app.sql(&insert_old(2)).await;
    let (_, feed) = app.get("/v1/changes").await;
    let items = feed["items"].as_array().unwrap();
    assert_eq!(items.len(), 6, "{feed}");
    let recent = items.iter().find(|c| c["dataset"] == "d.new").expect("the publish's change");
    let before_recent = items[2]["cursor"].as_str().unwrap().to_owned();
    assert_eq!(items[3]["dataset"], "d.new", "{feed}");

    assert_eq!(app.scan().await.pruned, 3, "the old changes before the recent one");
    let (status, feed) = app.get("/v1/changes").await;
    assert_eq!(status, StatusCode::OK);
    let datasets: Vec<&str> =
        feed["items"].as_array().unwrap().iter().map(|c| c["dataset"].as_str().unwrap()).collect();
    assert_eq!(datasets, ["d.new", "d.old", "d.old"], "{feed}");
    assert_eq!(feed["items"][0]["cursor"], recent["cursor"]);
    let (status, after) = app.get(&format!("/v1/changes?after={}", enc(&before_recent))).await;
    assert_eq!(status, StatusCode::OK, "a cursor just before the first kept change missed nothing: {after}");
    assert_eq!(after["items"], feed["items"]);
}

/// What a year and a bit leaves: batches and the registry stay; the change
/// feed, resolved alerts, delivered webhooks and raw OpenLineage events from
/// before `--retain` go; a cursor into the pruned feed is 410.
async fn history_older_than_the_retention_is_pruned(backend: Backend) {
    let receiver = Receiver::start(0).await;
    let Some(app) = TestApp::spawn_with(backend, {
        let url = receiver.url.clone();
        move |s| {
            s.webhook_url = Some(url.clone());
            s.retain = Some(std::time::Duration::from_secs(400 * 86_400));
        }
    })
    .await
    else {
        return;
    };
    let (ds, dt, p) = ("d.retain", "2026-08-24", "dt=2026-08-24");
    let failed = app.start_ok("t", ds, dt, &[p]).await;
    app.post(&format!("/v1/batches/{failed}/fail"), &json!({"stage": "write", "category": "resource"})).await;
    let published = app.publish("t", ds, dt, p, 5).await;
    let published = published["batch_id"].as_str().unwrap().to_owned();
    app.publish("t", ds, "2026-08-25", "dt=2026-08-25", 5).await;
    // An event that starts no batch (a running one would be abandoned meanwhile).
    let event = json!({"eventType": "OTHER", "eventTime": "2026-08-24T01:00:00Z", "run": {"runId": "r-1"},
        "job": {"namespace": "n", "name": "j"}, "producer": "p", "schemaURL": "s"});
    assert_eq!(app.post_raw("/api/v1/lineage", event.to_string()).await.0, StatusCode::OK);
    let report = app.scan().await;
    assert_eq!((report.delivered, report.pruned), (1, 0), "nothing is old yet");
    let (_, resolved) = app.get(&format!("/v1/alerts?state=resolved&dataset={ds}")).await;
    assert_eq!(resolved["items"].as_array().unwrap().len(), 1, "the publish resolved the alert");
    let (_, feed) = app.get("/v1/changes").await;
    let early = feed["items"][0]["cursor"].as_str().unwrap().to_owned();
    let caught_up = feed["next_cursor"].as_str().unwrap().to_owned();

    app.clock.advance(chrono::Duration::days(399));
    assert_eq!(app.scan().await.pruned, 0, "399 days are within the retention");
    app.clock.advance(chrono::Duration::days(2));
    app.publish("t", ds, "2027-10-01", "dt=2027-10-01", 6).await;
    let report = app.scan().await;
    assert!(report.pruned >= 4, "{report:?}");

    let (status, feed) = app.get("/v1/changes").await;
    assert_eq!(status, StatusCode::OK);
    let items = feed["items"].as_array().unwrap();
    assert!(!items.is_empty() && items.iter().all(|c| c["partition"] == "dt=2027-10-01"), "{feed}");
    let (status, err) = app.get(&format!("/v1/changes?after={}", enc(&early))).await;
    assert_eq!(status, StatusCode::GONE, "{err}");
    assert_eq!(err["error"]["code"], "cursor_expired");
    assert!(err["error"]["message"].as_str().unwrap().contains("--retain"));
    let (status, after) = app.get(&format!("/v1/changes?after={}", enc(&caught_up))).await;
    assert_eq!(status, StatusCode::OK, "a consumer that had read all the pruned changes missed nothing: {after}");
    assert_eq!(after["items"], feed["items"]);

    let (_, resolved) = app.get(&format!("/v1/alerts?state=resolved&dataset={ds}")).await;
    assert_eq!(resolved["items"], json!([]));
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM outbox").await, 0);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM openlineage_events").await, 0);
    // The history stays.
    for id in [&failed, &published] {
        assert_eq!(app.get(&format!("/v1/batches/{id}")).await.0, StatusCode::OK);
    }
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM task_produce_log").await, 4);
    let (status, ready) = app.ready(ds, &[p]).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
}

/// An undelivered webhook keeps its alert, however old.
async fn an_alert_waiting_for_delivery_is_kept(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| s.webhook_url = Some("http://127.0.0.1:9/hook".into())).await
    else {
        return;
    };
    let id = app.start_ok("t", "d.keep", "2026-08-24", &["dt=2026-08-24"]).await;
    app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "write", "category": "resource"})).await;
    app.publish("t", "d.keep", "2026-08-24", "dt=2026-08-24", 5).await;
    app.clock.advance(chrono::Duration::days(401));
    app.scan().await;
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM alerts").await, 1);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_history_older_than_the_retention_is_pruned() {
    history_older_than_the_retention_is_pruned(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_history_older_than_the_retention_is_pruned() {
    history_older_than_the_retention_is_pruned(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_alert_waiting_for_delivery_is_kept() {
    an_alert_waiting_for_delivery_is_kept(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_alert_waiting_for_delivery_is_kept() {
    an_alert_waiting_for_delivery_is_kept(Backend::Postgres).await;
}

/// A pass prunes at most `MAX_BATCHES_PER_PASS` statements of a thousand
/// rows per table. When it stops short in `changes` (the feed's rows from
/// before migration 0020), it leaves `change_log` for the next pass: the
/// feed is cut as one prefix, so a listing never hands out a cursor below
/// what was pruned (which the next request would answer `410`).
async fn a_pass_cut_short_in_the_older_feed_table_prunes_nothing_newer(app: TestApp) {
    let per_pass = batchgate::store::PRUNE_BATCH as u32 * batchgate::store::MAX_BATCHES_PER_PASS as u32;
    let old_rows = per_pass + 500;
    let (series, old_text, old_number, after_them) = match app.backend {
        Backend::Sqlite => (
            format!("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {old_rows})"),
            "'2001-01-01T00:00:00Z'",
            "978307200000000",
            "",
        ),
        Backend::Postgres => (
            format!("WITH n(i) AS (SELECT generate_series(1, {old_rows}))"),
            "TIMESTAMPTZ '2001-01-01T00:00:00Z'",
            "TIMESTAMPTZ '2001-01-01T00:00:00Z'",
            "SELECT setval(pg_get_serial_sequence('changes', 'id'), 300010);",
        ),
    };
    // Ids: the old table's first, then ten old-dated rows of the new one.
    app.sql(&format!(
        "{series} INSERT INTO changes (kind, dataset, partition_spec, version, at) SELECT 'published', 'd.old', 'dt=x', 1, {old_text} FROM n;
         INSERT INTO audit_names (name) VALUES ('d.old') ON CONFLICT (name) DO NOTHING;
         INSERT INTO change_log (id, at, kind, dataset, partition_spec, version)
             SELECT 300000 + i, {old_number}, (SELECT id FROM audit_names WHERE name = 'published'),
                    (SELECT id FROM audit_names WHERE name = 'd.old'), 'dt=y', 1
             FROM (SELECT 1 AS i UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
                   UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10) AS t;
         {after_them}"
    ))
    .await;
    app.publish("t", "d.new", "2026-08-24", "dt=2026-08-24", 5).await;

    assert_eq!(app.scan().await.pruned, u64::from(per_pass), "one pass's worth, all of the old table's");
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM changes").await, 500);
    assert_eq!(app.sql_count("SELECT COUNT(*) FROM change_log").await, 11, "the newer table waits for the next pass");
    let (status, feed) = app.get("/v1/changes?limit=1000").await;
    assert_eq!(status, StatusCode::OK, "{feed}");
    let items = feed["items"].as_array().unwrap();
    assert_eq!(items.len(), 511, "what is left of both tables");
    let first = items[0]["cursor"].as_str().unwrap();
    let (status, next) = app.get(&format!("/v1/changes?limit=1&after={}", enc(first))).await;
    assert_eq!(status, StatusCode::OK, "the first cursor listed is not pruned yet: {next}");
    assert_eq!(next["items"][0]["cursor"], items[1]["cursor"]);

    app.clock.advance(chrono::Duration::hours(1));
    assert_eq!(app.scan().await.pruned, 510, "the next pass: the rest of the old table, then the newer's old rows");
    let (_, feed) = app.get("/v1/changes").await;
    let datasets: Vec<&str> =
        feed["items"].as_array().unwrap().iter().map(|c| c["dataset"].as_str().unwrap()).collect();
    assert_eq!(datasets, ["d.new"]);
}
