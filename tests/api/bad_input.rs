//! Story 8: bad input gets a 4xx with a stable JSON error code naming the
//! field, and leaves the registry as it was.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_backends;

on_both_backends!(
    bad_requests_are_refused_by_name_and_change_nothing,
    ready_refuses_malformed_queries_but_never_errors_on_unknown_data
);

/// Everything a client can read back about the registry.
async fn snapshot(app: &TestApp) -> Value {
    let (_, batches) = app.get("/v1/batches?limit=500").await;
    let (_, partitions) = app.get("/v1/partitions?dataset=d.x").await;
    let (_, datasets) = app.get("/v1/datasets").await;
    json!([batches, partitions, datasets])
}

async fn expect(app: &TestApp, status: StatusCode, code: &str, field: Option<&str>, resp: (StatusCode, Value)) {
    let (got, body) = resp;
    assert_eq!(got, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    if let Some(f) = field {
        assert_eq!(body["error"]["details"]["field"], f, "{body}");
    }
    let _ = app;
}

async fn bad_requests_are_refused_by_name_and_change_nothing(app: TestApp) {
    let id = app.start_ok("t", "d.x", "2026-08-24", &["dt=2026-08-24"]).await;
    let before = snapshot(&app).await;
    let unproc = StatusCode::UNPROCESSABLE_ENTITY;
    let start = |extra: Value| {
        let mut b = json!({"task": "t", "dataset": "d.x", "dt": "2026-08-25", "partitions": ["dt=2026-08-25"]});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };

    expect(&app, StatusCode::BAD_REQUEST, "malformed_json", None, app.post_raw("/v1/batches", "{\"task\": ").await)
        .await;
    expect(
        &app,
        unproc,
        "invalid_type",
        Some("lease_seconds"),
        app.post("/v1/batches", &start(json!({"lease_seconds": "long"}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "unknown_field",
        Some("partiton"),
        app.post("/v1/batches", &start(json!({"partiton": "x"}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "missing_field",
        Some("partitions"),
        app.post("/v1/batches", &json!({"task": "t", "dataset": "d.x", "dt": "2026-08-25"})).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "invalid_field",
        Some("partitions"),
        app.post("/v1/batches", &start(json!({"partitions": []}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "invalid_partition",
        Some("partitions[0]"),
        app.post("/v1/batches", &start(json!({"partitions": ["dt2026-08-25"]}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "invalid_partition",
        Some("partitions[1]"),
        app.post("/v1/batches", &start(json!({"partitions": ["dt=2026-08-25", "dt=2026-08-25"]}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "invalid_field",
        Some("dt"),
        app.post("/v1/batches", &start(json!({"dt": "2026-02-30"}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "invalid_field",
        Some("trigger"),
        app.post("/v1/batches", &start(json!({"trigger": "cron"}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "invalid_field",
        Some("task"),
        app.post("/v1/batches", &start(json!({"task": "a task"}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "invalid_field",
        Some("lease_seconds"),
        app.post("/v1/batches", &start(json!({"lease_seconds": 0}))).await,
    )
    .await;
    expect(
        &app,
        unproc,
        "invalid_field",
        Some("scope.timezone"),
        app.post("/v1/batches", &start(json!({"scope": {"timezone": "Nowhere/Land"}}))).await,
    )
    .await;

    // The commit typo that must not silently drop evidence.
    let typo = json!({"marker": "m", "partitions": [{"partiton": "dt=2026-08-24", "rows_written": 1, "row_count": 1}]});
    expect(&app, unproc, "unknown_field", Some("partitions[0].partiton"), app.commit(&id, &typo).await).await;
    let wrong =
        json!({"marker": "m", "partitions": [{"partition": "dt=2026-08-24", "rows_written": -1, "row_count": 1}]});
    expect(&app, unproc, "invalid_field", Some("partitions[0].rows_written"), app.commit(&id, &wrong).await).await;
    let bad_spec = json!({"marker": "m", "partitions": [{"partition": "dt=*", "rows_written": 1, "row_count": 1}]});
    expect(&app, unproc, "invalid_partition", Some("partitions[0].partition"), app.commit(&id, &bad_spec).await).await;
    expect(
        &app,
        unproc,
        "invalid_field",
        Some("stage"),
        app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "lunch"})).await,
    )
    .await;

    let huge = format!("{{\"marker\": \"{}\", \"partitions\": []}}", "x".repeat(1 << 20));
    expect(
        &app,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        None,
        app.post_too_large(&format!("/v1/batches/{id}/commit"), huge).await,
    )
    .await;

    for path in ["/v1/batches/nope-20260824-001", "/v1/batches/not-a-batch-id"] {
        expect(&app, StatusCode::NOT_FOUND, "batch_not_found", None, app.get(path).await).await;
        expect(
            &app,
            StatusCode::NOT_FOUND,
            "batch_not_found",
            None,
            app.commit(&path[12..], &json!({"marker": "m", "partitions": []})).await,
        )
        .await;
        expect(
            &app,
            StatusCode::NOT_FOUND,
            "batch_not_found",
            None,
            app.post(&format!("{path}/heartbeat"), &json!({})).await,
        )
        .await;
        expect(
            &app,
            StatusCode::NOT_FOUND,
            "batch_not_found",
            None,
            app.post(&format!("{path}/fail"), &json!({"stage": "read"})).await,
        )
        .await;
    }
    expect(&app, unproc, "unknown_field", Some("tsak"), app.get("/v1/batches?tsak=t").await).await;
    expect(&app, unproc, "invalid_field", Some("limit"), app.get("/v1/batches?limit=501").await).await;
    expect(&app, unproc, "invalid_field", Some("cursor"), app.get("/v1/batches?cursor=garbage").await).await;
    expect(&app, unproc, "missing_field", Some("dataset"), app.get("/v1/partitions").await).await;
    expect(&app, StatusCode::NOT_FOUND, "route_not_found", None, app.get("/v2/nothing").await).await;
    expect(
        &app,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        None,
        app.request(reqwest::Method::DELETE, "/v1/batches", None).await,
    )
    .await;

    assert_eq!(snapshot(&app).await, before, "the registry is unchanged");
    let (status, _) = app.commit(&id, &crate::helpers::clean("dt=2026-08-24", 1)).await;
    assert_eq!(status, StatusCode::OK, "the batch is still committable");
}

async fn ready_refuses_malformed_queries_but_never_errors_on_unknown_data(app: TestApp) {
    for (query, field) in [
        ("", "dataset"),
        ("dataset=d.x", "partition"),
        ("dataset=d.x&partition=nope", "partition[0]"),
        ("dataset=d.x&partition=dt%3D1&wait=301", "wait"),
        ("dataset=d.x&partition=dt%3D1&wait=soon", "wait"),
        ("task=t", "dt"),
        ("task=t&dt=2026-13-01", "dt"),
        ("dataset=d.x&partition=dt%3D1&partiton=dt%3D2", "partiton"),
    ] {
        let (status, body) = app.get(&format!("/ready?{query}")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
        assert_eq!(body["error"]["details"]["field"], field, "{query}: {body}");
    }
    let (status, text) = app.ready_text("dataset=never.seen&partition=dt%3D2026-08-24").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(text.contains(r#""reason":"no_batch""#) && !text.contains(r#""ready":true"#), "{text}");
}
