//! Leases, the written report, and the safe-retry policy by write mode.

use futures::future::join;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, Backend, TestApp};
use crate::on_both_backends;

on_both_backends!(
    an_expired_lease_is_abandoned_by_the_scan_once,
    written_reports_tell_never_wrote_from_wrote_then_died,
    overwrite_retries_are_safe,
    delete_insert_retries_name_the_cleanup_statement,
    merge_without_a_unique_key_refuses_a_retry_over_residue,
    append_refuses_until_the_residue_is_acknowledged,
    the_overwrite_guard_refuses_wildcards_and_wide_batches,
);

const DT: &str = "2026-08-24";
const P: &str = "dt=2026-08-24";

async fn start_with(app: &TestApp, dataset: &str, extra: Value) -> (StatusCode, Value) {
    let mut body = json!({"task": "t", "dataset": dataset, "dt": DT, "partitions": [P]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    app.post("/v1/batches", &body).await
}

/// Leaves a rejected attempt behind on `P`; returns its id.
async fn leave_residue(app: &TestApp, dataset: &str) -> String {
    let id = app.start_ok("t", dataset, DT, &[P]).await;
    let dup = json!({"marker": "m", "partitions": [{"partition": P, "rows_written": 10, "row_count": 20}]});
    assert_eq!(app.commit(&id, &dup).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    id
}

async fn alerts(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, body) = app.get(&format!("/v1/alerts?{query}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["items"].as_array().unwrap().clone()
}

async fn an_expired_lease_is_abandoned_by_the_scan_once(app: TestApp) {
    let (_, started) = start_with(&app, "d.lease", json!({"lease_seconds": 60})).await;
    let id = started["batch_id"].as_str().unwrap();
    assert!(app.scan().await.abandoned.is_empty(), "the lease still runs");
    app.clock.advance(chrono::Duration::seconds(61));
    assert_eq!(app.scan().await.abandoned, vec![id.to_owned()]);
    assert!(app.scan().await.abandoned.is_empty(), "abandoned once");

    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(record["state"], "abandoned");
    assert_eq!(record["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "abandoned").count(), 1);
    let (status, body) = app.ready("d.lease", &[P]).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("abandoned")));
    for path in ["commit", "fail"] {
        let body = if path == "commit" { clean(P, 1) } else { json!({"stage": "write"}) };
        let (status, err) = app.post(&format!("/v1/batches/{id}/{path}"), &body).await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (StatusCode::CONFLICT, Some("lease_expired")),
            "late {path}"
        );
    }
    let open = alerts(&app, "kind=abandoned").await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0]["batch_id"], id);
    assert_eq!(open[0]["recommended_action"], "clean_residue_then_rerun");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_scanning_abandon_a_batch_exactly_once() {
    let Some(a) = TestApp::spawn(Backend::Postgres).await else {
        return;
    };
    let b = a.replica().await;
    for i in 0..5 {
        let p = format!("dt=2026-08-24/shard={i}");
        let body = json!({"task": "t", "dataset": "d.lease", "dt": DT, "partitions": [p], "lease_seconds": 60});
        assert_eq!(a.post("/v1/batches", &body).await.0, StatusCode::CREATED);
    }
    a.clock.advance(chrono::Duration::seconds(61));
    let (ra, rb) = join(a.scan(), b.scan()).await;
    let mut all: Vec<String> = ra.abandoned.iter().chain(&rb.abandoned).cloned().collect();
    all.sort();
    all.dedup();
    assert_eq!(
        ra.abandoned.len() + rb.abandoned.len(),
        5,
        "each batch abandoned by exactly one instance: {ra:?} {rb:?}"
    );
    assert_eq!(all.len(), 5);
    assert_eq!(alerts(&a, "kind=abandoned").await.len(), 5, "one alert each");
}

async fn written_reports_tell_never_wrote_from_wrote_then_died(app: TestApp) {
    let id = app.start_ok("t", "d.w", DT, &[P]).await;
    let (status, err) = app
        .post(
            &format!("/v1/batches/{id}/written"),
            &json!({"partitions": [{"partition": "dt=2026-08-25", "rows_written": 5}]}),
        )
        .await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("unknown_partition")));
    let (status, record) = app
        .post(&format!("/v1/batches/{id}/written"), &json!({"partitions": [{"partition": P, "rows_written": 5}]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert!(record["written_at"].is_string());
    assert_eq!(record["partitions"][0]["rows_written"], 5);
    assert!(record["events"].as_array().unwrap().iter().any(|e| e["kind"] == "written"));

    let quiet = app.start_ok("t", "d.w", DT, &["dt=2026-08-25"]).await;
    let (_, quiet_record) = app.get(&format!("/v1/batches/{quiet}")).await;
    assert!(quiet_record["written_at"].is_null(), "never wrote");

    app.commit(&id, &clean(P, 5)).await;
    let (status, _) = app
        .post(&format!("/v1/batches/{id}/written"), &json!({"partitions": [{"partition": P, "rows_written": 5}]}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
}

async fn overwrite_retries_are_safe(app: TestApp) {
    leave_residue(&app, "d.ow").await;
    let (status, started) = start_with(&app, "d.ow", json!({})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(started["retry"]["safe"], true);
    assert_eq!(started["retry"]["cleanup"], json!({}));
}

async fn delete_insert_retries_name_the_cleanup_statement(app: TestApp) {
    app.put_dataset("d.di", &json!({"write_mode": "delete_insert_by_batch"})).await;
    let (_, first) = start_with(&app, "d.di", json!({})).await;
    assert_eq!(first["retry"]["cleanup"], json!({}));
    assert_eq!(
        app.commit(
            first["batch_id"].as_str().unwrap(),
            &json!({"marker": "m", "partitions": [{"partition": P, "rows_written": 1, "row_count": 2}]})
        )
        .await
        .0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let residue = first["batch_id"].as_str().unwrap();
    let (status, started) = start_with(&app, "d.di", json!({})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(started["retry"]["safe"], true);
    assert_eq!(started["retry"]["cleanup"]["batch_ids"], json!([residue]));
    assert_eq!(started["retry"]["cleanup"]["statement"], format!("DELETE FROM d.di WHERE batch_id IN ('{residue}')"));
}

async fn merge_without_a_unique_key_refuses_a_retry_over_residue(app: TestApp) {
    app.put_dataset("d.m", &json!({"write_mode": "merge"})).await;
    let (_, first) = start_with(&app, "d.m", json!({})).await;
    assert_eq!(first["retry"]["safe"], false);
    app.post(
        &format!("/v1/batches/{}/fail", first["batch_id"].as_str().unwrap()),
        &json!({"stage": "write", "category": "partial_write"}),
    )
    .await;
    let (status, err) = start_with(&app, "d.m", json!({})).await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("unsafe_retry")), "{err}");
    app.put_dataset("d.m", &json!({"write_mode": "merge", "unique_key": ["order_id"]})).await;
    let (status, started) = start_with(&app, "d.m", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(started["retry"]["safe"], true);
}

async fn append_refuses_until_the_residue_is_acknowledged(app: TestApp) {
    app.put_dataset("d.app", &json!({"write_mode": "append"})).await;
    let residue = leave_residue(&app, "d.app").await;
    let (status, err) = start_with(&app, "d.app", json!({})).await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("cleanup_required")), "{err}");
    assert_eq!(err["error"]["details"]["not_cleaned"], json!([residue]));
    let (status, err) = start_with(&app, "d.app", json!({"cleaned_batch_ids": ["t-20260824-099"]})).await;
    assert_eq!(status, StatusCode::CONFLICT, "acknowledging other batches is not enough: {err}");
    let (status, started) = start_with(&app, "d.app", json!({"cleaned_batch_ids": [residue]})).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(started["retry"]["safe"], true);
    assert_eq!(started["seq"], 2, "refused starts consumed no sequence number");
}

async fn the_overwrite_guard_refuses_wildcards_and_wide_batches(app: TestApp) {
    let (status, err) = start_with(&app, "d.g", json!({"partitions": ["dt=*"]})).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("overwrite_scope_too_wide"))
    );
    let many: Vec<String> = (0..32).map(|h| format!("dt=2026-08-24/h={h}")).collect();
    let (status, err) = start_with(&app, "d.g", json!({"partitions": many})).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("overwrite_scope_too_wide"))
    );
    let (status, _) = start_with(&app, "d.g", json!({"partitions": many[..31]})).await;
    assert_eq!(status, StatusCode::CREATED, "31 is the default limit");

    app.put_dataset("d.g2", &json!({"write_mode": "append"})).await;
    let (status, err) = start_with(&app, "d.g2", json!({"partitions": ["dt=*"]})).await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_partition")));
    let wide: Vec<String> = (0..40).map(|h| format!("dt=2026-08-24/h={h}")).collect();
    assert_eq!(
        start_with(&app, "d.g2", json!({"partitions": wide})).await.0,
        StatusCode::CREATED,
        "no limit outside overwrite"
    );
}
