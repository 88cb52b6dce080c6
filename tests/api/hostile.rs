//! Hostile bytes and numbers (issue 9): NUL anywhere, repeated JSON keys,
//! sums past what a number can hold, numbers past a double, and names that
//! look like something they are not. Each is a 4xx naming the field, the same
//! on both backends, and never a 5xx.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{check, clean, enc, TestApp};
use crate::on_both_backends;

on_both_backends!(
    a_nul_in_any_body_field_is_refused_by_name,
    a_nul_in_the_path_or_the_query_is_refused_by_name,
    a_repeated_json_key_is_refused_by_name,
    row_sums_past_i64_fail_the_check_instead_of_wrapping,
    metric_sums_past_a_double_fail_the_check_and_infinite_numbers_are_refused,
    dot_bidi_and_zero_width_names_are_refused,
    metrics_near_the_largest_double_are_stored_and_read_back,
);

const UNPROC: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;

/// Everything a client can read back about the registry.
async fn snapshot(app: &TestApp) -> Value {
    let (_, batches) = app.get("/v1/batches?limit=500").await;
    let (_, partitions) = app.get("/v1/partitions?dataset=d.x").await;
    let (_, datasets) = app.get("/v1/datasets").await;
    let (_, alerts) = app.get("/v1/alerts").await;
    json!([batches, partitions, datasets, alerts])
}

#[track_caller]
fn refused(resp: (StatusCode, Value), code: &str, field: &str) {
    let (status, body) = resp;
    assert_eq!(status, UNPROC, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["error"]["details"]["field"], field, "{body}");
}

async fn a_nul_in_any_body_field_is_refused_by_name(app: TestApp) {
    let id = app.start_ok("t", "d.x", "2026-08-24", &["dt=2026-08-24"]).await;
    let before = snapshot(&app).await;
    let start = |extra: Value| {
        let mut b = json!({"task": "t", "dataset": "d.x", "dt": "2026-08-25", "partitions": ["dt=2026-08-25"]});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };

    refused(app.post("/v1/batches", &start(json!({"run_ref": "manual\u{0}1"}))).await, "invalid_field", "run_ref");
    refused(app.post("/v1/batches", &start(json!({"task": "t\u{0}"}))).await, "invalid_field", "task");
    refused(
        app.post("/v1/batches", &start(json!({"scope": {"note": "a\u{0}b"}}))).await,
        "invalid_field",
        "scope.note",
    );
    refused(
        app.post("/v1/batches", &start(json!({"scope": {"no\u{0}te": "ab"}}))).await,
        "invalid_field",
        "scope.no\\u0000te",
    );
    let fail = format!("/v1/batches/{id}/fail");
    refused(app.post(&fail, &json!({"stage": "write", "message": "disk full\u{0}"})).await, "invalid_field", "message");
    let mut ev = clean("dt=2026-08-24", 10);
    ev["marker"] = json!("hdfs://x/_SUCCESS\u{0}");
    refused(app.commit(&id, &ev).await, "invalid_field", "marker");
    let mut ev = clean("dt=2026-08-24", 10);
    ev["partitions"][0]["metrics"] = json!({"amo\u{0}unt": 1.5});
    refused(app.commit(&id, &ev).await, "invalid_field", "partitions[0].metrics.amo\\u0000unt");
    refused(
        app.request(reqwest::Method::PUT, "/v1/datasets/d.y", Some(&json!({"owner": "team\u{0}a"}))).await,
        "invalid_field",
        "owner",
    );
    refused(
        app.post("/v1/partitions/d.x/dt%3D2026-08-24/invalidate", &json!({"reason": "bad\u{0}"})).await,
        "invalid_field",
        "reason",
    );
    refused(
        app.post(
            "/v1/repairs",
            &json!({"dataset": "d.x", "partitions": ["dt=2026-08-24"], "action": "rerun", "reason": "x\u{0}"}),
        )
        .await,
        "invalid_field",
        "reason",
    );
    let event = json!({"eventType": "START", "eventTime": "2026-08-25T00:00:00Z",
        "run": {"runId": "0190c0de-0000-7000-8000-000000000001"},
        "job": {"namespace": "airflow", "name": "dag.task\u{0}"}, "inputs": [], "outputs": []});
    refused(app.post("/api/v1/lineage", &event).await, "invalid_field", "job.name");

    assert_eq!(snapshot(&app).await, before, "a refused request changed the registry");
    // The batch is still running: a clean fail report is recorded.
    let (status, body) = app.post(&fail, &json!({"stage": "write", "message": "disk full"})).await;
    assert!(status.is_success(), "{status} {body}");
    assert_eq!(body["state"], "failed", "{body}");
}

async fn a_nul_in_the_path_or_the_query_is_refused_by_name(app: TestApp) {
    let id = app.start_ok("t", "d.x", "2026-08-24", &["dt=2026-08-24"]).await;
    let before = snapshot(&app).await;
    let nul_id = format!("{id}%00");
    refused(app.get(&format!("/v1/batches/{nul_id}")).await, "invalid_field", "batch_id");
    refused(app.post(&format!("/v1/batches/{nul_id}/heartbeat"), &json!({})).await, "invalid_field", "batch_id");
    refused(app.commit(&nul_id, &clean("dt=2026-08-24", 1)).await, "invalid_field", "batch_id");
    refused(
        app.post(&format!("/v1/batches/{nul_id}/fail"), &json!({"stage": "write"})).await,
        "invalid_field",
        "batch_id",
    );
    refused(app.get("/v1/datasets/d.x%00").await, "invalid_field", "dataset");
    refused(
        app.post("/v1/partitions/d.x/dt%3D2026-08-24%00/invalidate", &json!({"reason": "r"})).await,
        "invalid_field",
        "partition",
    );
    refused(app.get("/v1/repairs/1%00").await, "invalid_field", "id");
    refused(app.get("/v1/batches?task=t%00").await, "invalid_field", "task");
    refused(app.get("/v1/partitions?dataset=d.x%00").await, "invalid_field", "dataset");
    refused(app.get("/ready?dataset=d.x&partition=dt%3D2026-08-24%00").await, "invalid_field", "partition");
    refused(app.get("/v1/lineage?dataset=d%00").await, "invalid_field", "dataset");
    refused(app.get("/v1/changes?after=0%00").await, "invalid_field", "after");
    refused(app.get("/v1/alerts?dataset=%00").await, "invalid_field", "dataset");
    assert_eq!(snapshot(&app).await, before);
}

async fn a_repeated_json_key_is_refused_by_name(app: TestApp) {
    let id = app.start_ok("t", "d.x", "2026-08-24", &["dt=2026-08-24"]).await;
    let before = snapshot(&app).await;
    // Evidence of 7 null keys must not be silently replaced by 0.
    let body = r#"{"marker": "m", "partitions": [{"partition": "dt=2026-08-24", "rows_written": 10,
        "row_count": 10, "distinct_keys": 10, "null_keys": 7, "null_keys": 0}]}"#;
    refused(
        app.post_raw(&format!("/v1/batches/{id}/commit"), body).await,
        "duplicate_field",
        "partitions[0].null_keys",
    );
    let body = r#"{"task": "t", "dataset": "d.x", "dt": "2026-08-25", "dt": "2026-08-26", "partitions": ["dt=1"]}"#;
    refused(app.post_raw("/v1/batches", body).await, "duplicate_field", "dt");
    let body = r#"{"eventType": "COMPLETE", "eventType": "FAIL", "run": {"runId": "r"}, "job": {}}"#;
    refused(app.post_raw("/api/v1/lineage", body).await, "duplicate_field", "eventType");
    assert_eq!(snapshot(&app).await, before);
    let (status, record) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!((status, record["state"].as_str()), (StatusCode::OK, Some("running")), "{record}");
}

async fn row_sums_past_i64_fail_the_check_instead_of_wrapping(app: TestApp) {
    let specs = ["dt=2026-08-24/p=1", "dt=2026-08-24/p=2", "dt=2026-08-24/p=3", "dt=2026-08-24/p=4"];
    let id = app.start_ok("t", "d.x", "2026-08-24", &specs).await;
    let rows: u64 = 1 << 62;
    let parts: Vec<Value> = specs
        .iter()
        .map(
            |p| json!({"partition": p, "rows_written": rows, "row_count": rows, "distinct_keys": rows, "null_keys": 0}),
        )
        .collect();
    let (status, record) =
        app.commit(&id, &json!({"marker": "m", "partitions": parts, "source": {"row_count": 0}})).await;
    assert_eq!(status, UNPROC, "four partitions of 2^62 rows must not sum to 0: {record}");
    assert_eq!(record["state"], "rejected", "{record}");
    let c = check(&record, "source_reconciliation");
    assert_eq!(c["status"], "fail", "{record}");
    assert!(c["message"].as_str().unwrap().contains("cannot be represented"), "{c}");
    let (status, ready) = app.ready("d.x", &specs).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{ready}");
}

async fn metric_sums_past_a_double_fail_the_check_and_infinite_numbers_are_refused(app: TestApp) {
    let specs = ["dt=2026-08-24/p=1", "dt=2026-08-24/p=2"];
    let id = app.start_ok("t", "d.x", "2026-08-24", &specs).await;
    let part = |p: &str, amount: &str| {
        format!(
            r#"{{"partition": "{p}", "rows_written": 1, "row_count": 1, "distinct_keys": 1, "null_keys": 0,
                "metrics": {{"amount": {amount}}}}}"#
        )
    };
    // A literal too large for a double is refused, not read as infinity.
    let body = format!(
        r#"{{"marker": "m", "partitions": [{}, {}], "source": {{"row_count": 2, "metrics": {{"amount": 1e999}}}}}}"#,
        part(specs[0], "1"),
        part(specs[1], "1")
    );
    refused(app.post_raw(&format!("/v1/batches/{id}/commit"), body).await, "invalid_field", "source.metrics.amount");
    let body = format!(r#"{{"marker": "m", "partitions": [{}, {}]}}"#, part(specs[0], "-1e400"), part(specs[1], "1"));
    refused(
        app.post_raw(&format!("/v1/batches/{id}/commit"), body).await,
        "invalid_field",
        "partitions[0].metrics.amount",
    );

    // Two finite amounts whose sum is infinite fail the check (never a 500).
    let body = format!(
        r#"{{"marker": "m", "partitions": [{}, {}], "source": {{"row_count": 2, "metrics": {{"amount": 1.7e308}}}}}}"#,
        part(specs[0], "1.7e308"),
        part(specs[1], "1.7e308")
    );
    let (status, record) = app.post_raw(&format!("/v1/batches/{id}/commit"), body).await;
    assert_eq!(status, UNPROC, "{record}");
    assert_eq!(record["state"], "rejected", "{record}");
    let c = check(&record, "source_reconciliation");
    assert_eq!(c["status"], "fail", "{record}");
    assert!(c["message"].as_str().unwrap().contains("too large"), "{c}");
    let (status, again) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!((status, again["state"].as_str()), (StatusCode::OK, Some("rejected")), "{again}");
}

async fn dot_bidi_and_zero_width_names_are_refused(app: TestApp) {
    let before = snapshot(&app).await;
    for (i, bad) in [
        "dt=..",
        "dt=.",
        "dt=..\\..\\x",
        "dt=2026-08-24\u{200b}",
        "dt=2026-08-24\u{200d}",
        "dt=2026-08-24\u{2060}",
        "dt=\u{feff}2026-08-24",
        "dt=2026-08-24/region=\u{202e}nc",
        "dt=2026-08-24/region=c\u{2066}n",
        "dt=2026-08-24/region=cn\u{1b}",
    ]
    .into_iter()
    .enumerate()
    {
        let body =
            json!({"task": "t", "dataset": "d.x", "dt": "2026-08-24", "partitions": ["dt=2026-08-24/region=ok", bad]});
        let (status, resp) = app.post("/v1/batches", &body).await;
        assert_eq!(status, UNPROC, "case {i} {bad:?}: {resp}");
        assert_eq!(resp["error"]["code"], "invalid_partition", "{resp}");
        assert_eq!(resp["error"]["details"]["field"], "partitions[1]", "{resp}");
        let (status, resp) = app.get(&format!("/ready?dataset=d.x&partition={}", enc(bad))).await;
        assert_eq!(status, UNPROC, "/ready {bad:?}: {resp}");
    }
    for bad in ["..", "."] {
        let (status, resp) = app.start(bad, "d.x", "2026-08-24", &["dt=2026-08-24"]).await;
        assert_eq!((status, resp["error"]["details"]["field"].as_str()), (UNPROC, Some("task")), "{resp}");
        let (status, resp) = app.start("t", bad, "2026-08-24", &["dt=2026-08-24"]).await;
        assert_eq!((status, resp["error"]["details"]["field"].as_str()), (UNPROC, Some("dataset")), "{resp}");
    }
    assert_eq!(snapshot(&app).await, before);
}

/// Found by schemathesis on PostgreSQL: jsonb prints -1.7976931348623155e308
/// as 309 digits, which a parser without correct rounding reads back as out
/// of range (a 500 when the alert for the rejection was read).
async fn metrics_near_the_largest_double_are_stored_and_read_back(app: TestApp) {
    let id = app.start_ok("t", "d.x", "2026-08-24", &["dt=2026-08-24"]).await;
    let body = r#"{"marker": "m", "partitions": [{"partition": "dt=2026-08-24", "rows_written": 1, "row_count": 1,
        "distinct_keys": 1, "null_keys": 0, "metrics": {"amount": -1.7976931348623155e308}}],
        "source": {"row_count": 0, "metrics": {"amount": 1.7976931348623157e308}}}"#;
    let (status, record) = app.post_raw(&format!("/v1/batches/{id}/commit"), body).await;
    assert_eq!(status, UNPROC, "{record}");
    assert_eq!(record["state"], "rejected", "{record}");
    let (status, again) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["partitions"][0]["metrics"]["amount"].as_f64(), Some(-1.7976931348623155e308), "{again}");
    let (status, alerts) = app.get("/v1/alerts").await;
    assert_eq!(status, StatusCode::OK, "{alerts}");
}
