//! Whole numbers in any JSON notation: `1000.0` and `1e3` are the integer
//! 1000 to the spec's `integer` (JSON Schema) and to a task that counted in
//! floats, so every integer field takes them and stores the integer. A
//! fraction is still a 422 naming the field, and changes nothing.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::TestApp;
use crate::on_both_backends;

on_both_backends!(whole_numbers_written_as_floats_are_integers, fractions_are_refused_by_name_and_change_nothing);

async fn whole_numbers_written_as_floats_are_integers(app: TestApp) {
    // A policy: whole-number floats for the integer fields, the deadline's too.
    let (status, policy) = app
        .request(
            reqwest::Method::PUT,
            "/v1/datasets/n.x",
            Some(&json!({"baseline_periods": 7.0, "max_partitions_per_batch": 3.0,
                "deadline": {"time": "06:00", "days_after_dt": 1.0}})),
        )
        .await;
    assert!(status.is_success(), "{status} {policy}");
    let (_, policy) = app.get("/v1/datasets/n.x").await;
    assert_eq!(policy["baseline_periods"], json!(7), "{policy}");
    assert_eq!(policy["max_partitions_per_batch"], json!(3), "{policy}");
    assert_eq!(policy["deadline"]["days_after_dt"], json!(1), "{policy}");

    // A start and a commit, every count written with a fraction part or an
    // exponent, as the raw bytes a Python task's json.dumps of floats sends.
    let (status, started) = app
        .post_raw(
            "/v1/batches",
            r#"{"task": "t", "dataset": "n.x", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"], "lease_seconds": 600.0}"#,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let id = started["batch_id"].as_str().unwrap();
    let (status, written) = app
        .post_raw(
            &format!("/v1/batches/{id}/written"),
            r#"{"partitions": [{"partition": "dt=2026-08-24", "rows_written": 1e3}]}"#,
        )
        .await;
    assert!(status.is_success(), "{status} {written}");
    let (status, committed) = app
        .post_raw(
            &format!("/v1/batches/{id}/commit"),
            r#"{"marker": "hdfs://w/n.x/dt=2026-08-24/_SUCCESS", "partitions": [{"partition": "dt=2026-08-24", "rows_written": 1000.0, "row_count": 1E3,
                "distinct_keys": 1000.0, "null_keys": 0.0}], "source": {"row_count": 1000.0}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{committed}");
    assert_eq!(committed["state"], "published", "{committed}");
    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(record["lease_seconds"], json!(600), "{record}");
    let stored = record.to_string();
    assert!(!stored.contains("1000.0") && stored.contains("1000"), "counts are stored as integers: {record}");
    let (_, ready) = app.ready("n.x", &["dt=2026-08-24"]).await;
    assert_eq!(ready["ready"], json!(true), "{ready}");

    // A token's lifetime in seconds.
    let (status, token) =
        app.post_raw("/v1/tokens", r#"{"name": "n", "scopes": ["read"], "expires_in": 3600.0}"#).await;
    assert_eq!(status, StatusCode::CREATED, "{token}");
}

async fn fractions_are_refused_by_name_and_change_nothing(app: TestApp) {
    let id = app.start_ok("t", "n.x", "2026-08-24", &["dt=2026-08-24"]).await;
    let (_, before) = app.get(&format!("/v1/batches/{id}")).await;
    let commit = format!("/v1/batches/{id}/commit");
    let refusals = [
        (
            commit.as_str(),
            r#"{"partitions": [{"partition": "dt=2026-08-24", "rows_written": 1000.5, "row_count": 1000}]}"#,
            "partitions[0].rows_written",
        ),
        // 2^53 + 2 as a double: beyond 2^53 the digits sent may not be the number read.
        (
            commit.as_str(),
            r#"{"partitions": [{"partition": "dt=2026-08-24", "rows_written": 1, "row_count": 9007199254740994.0}]}"#,
            "partitions[0].row_count",
        ),
        (
            "/v1/batches",
            r#"{"task": "t", "dataset": "n.y", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"], "lease_seconds": 60.5}"#,
            "lease_seconds",
        ),
    ];
    for (path, body, field) in refusals {
        let (status, answer) = app.post_raw(path, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_type", "{answer}");
        assert_eq!(answer["error"]["details"]["field"], field, "{answer}");
    }
    let (_, after) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(after, before, "a refused commit changed the batch");
    assert_eq!(after["state"], "running");
    let (_, batches) = app.get("/v1/batches?dataset=n.y").await;
    assert_eq!(batches["items"], json!([]), "a refused start made a batch: {batches}");
}
