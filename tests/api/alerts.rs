//! Deadlines, alerts and their webhooks.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, Backend, Receiver, TestApp};
use crate::on_both_backends;

on_both_backends!(
    a_missed_deadline_is_raised_once_and_resolved_on_publish,
    failures_and_rejections_carry_owner_checks_and_action,
    a_stale_downstream_partition_raises_an_alert_for_its_owner,
);

async fn alerts(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, body) = app.get(&format!("/v1/alerts?{query}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["items"].as_array().unwrap().clone()
}

fn at(s: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&chrono::Utc)
}

async fn a_missed_deadline_is_raised_once_and_resolved_on_publish(app: TestApp) {
    // An old data date left running before the policy existed.
    app.clock.set(at("2026-08-21T03:00:00Z"));
    let old = app.start_ok("t", "d.dl", "2026-08-20", &["dt=2026-08-20"]).await;
    app.clock.set(at("2026-08-25T05:00:00+08:00"));
    let body = json!({"task": "t", "dataset": "d.dl", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"], "lease_seconds": 7200});
    let (_, started) = app.post("/v1/batches", &body).await;
    let id = started["batch_id"].as_str().unwrap().to_owned();
    app.put_dataset(
        "d.dl",
        &json!({"tier": "core", "timezone": "Asia/Shanghai", "owner": "ads-team",
        "deadline": {"time": "06:00", "days_after_dt": 1}}),
    )
    .await;

    assert_eq!(app.scan().await.deadlines_missed, 1, "only the old date is past its deadline");
    let open = alerts(&app, "kind=deadline_missed&state=open").await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0]["dt"], "2026-08-20");
    assert_eq!(open[0]["severity"], "critical");
    assert_eq!(open[0]["owner"], "ads-team");

    app.clock.set(at("2026-08-25T06:00:01+08:00"));
    assert_eq!(app.scan().await.deadlines_missed, 1, "now 2026-08-24 is late too");
    assert_eq!(app.scan().await.deadlines_missed, 0, "raised once");
    let late = alerts(&app, "kind=deadline_missed&dataset=d.dl").await;
    let today = late.iter().find(|a| a["dt"] == "2026-08-24").unwrap();
    assert_eq!(today["state"], "open");
    assert_eq!(today["partitions"], json!(["dt=2026-08-24"]));
    assert_eq!(today["recommended_action"], "wait_for_retry", "the batch is still running");

    assert_eq!(app.commit(&id, &clean("dt=2026-08-24", 10)).await.0, StatusCode::OK);
    let resolved = alerts(&app, "kind=deadline_missed&state=resolved").await;
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["dt"], "2026-08-24");
    assert!(resolved[0]["resolved_at"].is_string());
    assert_eq!(app.scan().await.deadlines_missed, 0, "a published date is not raised again");
    let still_open = alerts(&app, "kind=deadline_missed&state=open").await;
    assert_eq!(still_open.len(), 1);
    assert_eq!(still_open[0]["dt"], "2026-08-20", "the old date is still running: {old}");
}

async fn failures_and_rejections_carry_owner_checks_and_action(app: TestApp) {
    app.put_dataset("d.al", &json!({"owner": "orders-team"})).await;
    let cases = [
        ("data", "fix_source_data", false),
        ("resource", "wait_for_retry", true),
        ("logic", "fix_code_then_rerun", false),
        ("partial_write", "clean_residue_then_rerun", true),
    ];
    for (i, (category, action, retryable)) in cases.iter().enumerate() {
        let dt = format!("2026-08-1{i}");
        let id = app.start_ok("t", "d.al", &dt, &[&format!("dt={dt}")]).await;
        let (status, _) = app
            .post(
                &format!("/v1/batches/{id}/fail"),
                &json!({"stage": "compute", "category": category, "message": "boom"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let found = alerts(&app, "kind=failed")
            .await
            .into_iter()
            .find(|a| a["batch_id"] == id.as_str())
            .expect("a failed alert");
        assert_eq!(found["recommended_action"], *action, "{category}");
        assert_eq!(found["retryable"], *retryable, "{category}");
        assert_eq!(found["owner"], "orders-team");
        assert_eq!(found["category"], *category);
        assert_eq!(found["stage"], "compute");
        assert_eq!(found["task"], "t");
        assert_eq!(found["severity"], "warning");
    }

    let id = app.start_ok("t", "d.al", "2026-08-24", &["dt=2026-08-24"]).await;
    let dup = json!({"marker": "m", "partitions": [{"partition": "dt=2026-08-24", "rows_written": 10, "row_count": 10, "distinct_keys": 8}]});
    assert_eq!(app.commit(&id, &dup).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    let rejected = alerts(&app, "kind=rejected&state=open&dataset=d.al").await;
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0]["recommended_action"], "clean_residue_then_rerun");
    let failing = rejected[0]["failing_checks"].as_array().unwrap();
    assert_eq!(failing.len(), 1);
    assert_eq!(failing[0]["name"], "unique_keys");
    assert_eq!((failing[0]["observed"].clone(), failing[0]["expected"].clone()), (json!(8), json!(10)));

    let id = app.start_ok("t", "d.al", "2026-08-24", &["dt=2026-08-24"]).await;
    let src = json!({"marker": "m", "partitions": [{"partition": "dt=2026-08-24", "rows_written": 10, "row_count": 10}], "source": {"row_count": 12}});
    app.commit(&id, &src).await;
    let latest = &alerts(&app, "kind=rejected&dataset=d.al").await[0];
    assert_eq!(latest["recommended_action"], "fix_source_data");

    app.publish("t", "d.al", "2026-08-24", "dt=2026-08-24", 10).await;
    assert!(alerts(&app, "kind=rejected&state=open").await.is_empty(), "a publish resolves the date's alerts");
    let (status, err) = app.get("/v1/alerts?severity=loud").await;
    assert_eq!(
        (status, err["error"]["details"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("severity"))
    );
}

async fn webhook_retries_until_delivered(backend: Backend) {
    let receiver = Receiver::start(2).await;
    let Some(app) = TestApp::spawn_with_webhook(backend, &receiver.url).await else {
        return;
    };
    let id = app.start_ok("t", "d.hook", "2026-08-24", &["dt=2026-08-24"]).await;
    app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "write", "category": "resource"})).await;

    assert_eq!(app.scan().await.failed_deliveries, 1);
    assert_eq!(app.scan().await.failed_deliveries, 0, "not before the backoff");
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.scan().await.failed_deliveries, 1, "second attempt after 1 s");
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.scan().await.delivered, 0, "the third waits 2 s");
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.scan().await.delivered, 1);
    app.clock.advance(chrono::Duration::seconds(600));
    assert_eq!(app.scan().await.delivered, 0, "delivered once");

    let seen = receiver.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    let key = seen[0].0.clone().expect("Idempotency-Key header");
    assert!(
        seen.iter().all(|(k, body)| k.as_deref() == Some(key.as_str()) && body["batch_id"] == id.as_str()),
        "one logical alert: {seen:?}"
    );
    assert_eq!(seen[0].1["kind"], "failed");
    assert_eq!(seen[0].1["recommended_action"], "wait_for_retry");
}

async fn webhook_survives_a_restart_before_delivery(backend: Backend) {
    let receiver = Receiver::start(0).await;
    let Some(app) = TestApp::spawn_with_webhook(backend, &receiver.url).await else {
        return;
    };
    let id = app.start_ok("t", "d.hook", "2026-08-24", &["dt=2026-08-24"]).await;
    app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "read", "category": "data"})).await;
    assert_eq!(receiver.count(), 0, "raised, not yet delivered");
    let app = app.restart().await;
    assert_eq!(app.scan().await.delivered, 1);
    assert_eq!(app.scan().await.delivered, 0);
    assert_eq!(receiver.count(), 1);
    assert_eq!(receiver.seen.lock().unwrap()[0].1["batch_id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_webhook_retries_until_delivered() {
    webhook_retries_until_delivered(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_webhook_retries_until_delivered() {
    webhook_retries_until_delivered(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_webhook_survives_a_restart_before_delivery() {
    webhook_survives_a_restart_before_delivery(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_webhook_survives_a_restart_before_delivery() {
    webhook_survives_a_restart_before_delivery(Backend::Postgres).await;
}

async fn a_stale_downstream_partition_raises_an_alert_for_its_owner(app: TestApp) {
    app.put_dataset("dws.sum", &json!({"owner": "finance", "tier": "core"})).await;
    let p = "dt=2026-08-24";
    app.publish("t", "ods.src", "2026-08-24", p, 10).await;
    let build = |rows: u64| {
        let body = json!({"task": "sum", "dataset": "dws.sum", "dt": "2026-08-24", "partitions": [p],
            "inputs": [{"dataset": "ods.src", "partition": p}]});
        let app = &app;
        async move {
            let (_, started) = app.post("/v1/batches", &body).await;
            assert_eq!(app.commit(started["batch_id"].as_str().unwrap(), &clean(p, rows)).await.0, StatusCode::OK);
        }
    };
    build(10).await;

    // A failure upstream names the partitions built on it.
    let id = app.start_ok("t", "ods.src", "2026-08-24", &[p]).await;
    app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "compute", "category": "logic"})).await;
    let failed = &alerts(&app, "kind=failed").await[0];
    assert_eq!(failed["downstream"], json!([{"dataset": "dws.sum", "partition": p, "state": "ready"}]));

    app.publish("t", "ods.src", "2026-08-24", p, 11).await;
    let stale = alerts(&app, "kind=stale_downstream&state=open").await;
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert_eq!(stale[0]["dataset"], "dws.sum");
    assert_eq!(stale[0]["owner"], "finance");
    assert_eq!(stale[0]["severity"], "critical");
    assert_eq!(stale[0]["recommended_action"], "recompute_downstream");

    build(11).await;
    assert!(alerts(&app, "kind=stale_downstream&state=open").await.is_empty(), "recomputing resolves it");

    // Bad source data is for the owners of the inputs.
    app.put_dataset("ods.src", &json!({"owner": "ingest-team"})).await;
    let body = json!({"task": "sum", "dataset": "dws.sum", "dt": "2026-08-24", "partitions": [p],
        "inputs": [{"dataset": "ods.src", "partition": p}]});
    let (_, started) = app.post("/v1/batches", &body).await;
    let id = started["batch_id"].as_str().unwrap();
    app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "compute", "category": "data"})).await;
    let data = alerts(&app, "kind=failed&dataset=dws.sum").await;
    assert_eq!(
        (data[0]["owner"].as_str(), data[0]["recommended_action"].as_str()),
        (Some("ingest-team"), Some("fix_source_data"))
    );
}
