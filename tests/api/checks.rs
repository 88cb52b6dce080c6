//! Story 5: each kind of bad evidence is rejected with the failing check
//! named, and the tier decides what blocks.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{check, TestApp};
use crate::on_both_backends;

on_both_backends!(
    duplicate_keys_are_rejected,
    null_keys_are_rejected,
    a_ninety_percent_volume_drop_blocks_core_and_warns_standard,
    a_source_sum_mismatch_is_rejected,
    scratch_datasets_only_block_on_marker_and_completeness,
    append_datasets_count_on_top_of_the_published_rows,
    dataset_policies_are_stored_and_validated,
);

fn evidence(partition: &str, written: u64, count: u64, distinct: u64, nulls: u64) -> Value {
    json!({"marker": "m", "partitions": [{"partition": partition, "rows_written": written, "row_count": count,
        "distinct_keys": distinct, "null_keys": nulls}]})
}

async fn rejected_by(app: &TestApp, dataset: &str, ev: Value, name: &str) -> Value {
    let id = app.start_ok("t", dataset, "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, record) = app.commit(&id, &ev).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{record}");
    assert_eq!(record["state"], "rejected");
    assert_eq!(check(&record, name)["status"], "fail", "{record}");
    assert!(record["error"]["details"]["failed_checks"].as_array().unwrap().contains(&json!(name)));
    let (status, ready) = app.ready(dataset, &["dt=2026-08-24"]).await;
    assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("rejected")));
    record
}

async fn duplicate_keys_are_rejected(app: TestApp) {
    let r = rejected_by(&app, "d.dup", evidence("dt=2026-08-24", 100, 100, 97, 0), "unique_keys").await;
    assert_eq!(check(&r, "unique_keys")["observed"], 97);
    assert_eq!(check(&r, "unique_keys")["expected"], 100);
}

async fn null_keys_are_rejected(app: TestApp) {
    let r = rejected_by(&app, "d.null", evidence("dt=2026-08-24", 100, 100, 100, 3), "null_keys").await;
    assert_eq!(check(&r, "null_keys")["observed"], 3);
}

/// Seven earlier days of about 1,000,000 rows each.
async fn seed_history(app: &TestApp, dataset: &str) {
    for day in 17..24 {
        let dt = format!("2026-08-{day}");
        let p = format!("dt={dt}");
        app.publish("t", dataset, &dt, &p, 1_000_000 + day * 100).await;
    }
}

async fn a_ninety_percent_volume_drop_blocks_core_and_warns_standard(app: TestApp) {
    app.put_dataset("d.core", &json!({"tier": "core"})).await;
    seed_history(&app, "d.core").await;
    let r = rejected_by(&app, "d.core", evidence("dt=2026-08-24", 100_000, 100_000, 100_000, 0), "volume_vs_baseline")
        .await;
    let c = check(&r, "volume_vs_baseline");
    assert_eq!(c["expected"]["periods"], 7);
    assert!((c["observed"]["change"].as_f64().unwrap() + 0.9).abs() < 0.01);

    seed_history(&app, "d.standard").await;
    let id = app.start_ok("t", "d.standard", "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, record) = app.commit(&id, &evidence("dt=2026-08-24", 100_000, 100_000, 100_000, 0)).await;
    assert_eq!(status, StatusCode::OK, "standard only warns on volume: {record}");
    assert_eq!(check(&record, "volume_vs_baseline")["status"], "warn");
}

async fn a_source_sum_mismatch_is_rejected(app: TestApp) {
    let ev = json!({"marker": "m",
        "partitions": [{"partition": "dt=2026-08-24", "rows_written": 1000, "row_count": 1000, "metrics": {"amount": 98765432.10}}],
        "source": {"row_count": 1000, "metrics": {"amount": 98765000.00}}});
    let r = rejected_by(&app, "d.src", ev, "source_reconciliation").await;
    assert_eq!(check(&r, "source_reconciliation")["expected"]["amount"], 98765000.0);

    let ok = json!({"marker": "m",
        "partitions": [{"partition": "dt=2026-08-24", "rows_written": 1000, "row_count": 1000, "metrics": {"amount": 98765432.10}}],
        "source": {"row_count": 1000, "metrics": {"amount": 98765432.10}}});
    let id = app.start_ok("t", "d.src", "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, record) = app.commit(&id, &ok).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(check(&record, "source_reconciliation")["status"], "pass");
}

async fn scratch_datasets_only_block_on_marker_and_completeness(app: TestApp) {
    app.put_dataset("d.scratch", &json!({"tier": "scratch"})).await;
    let id = app.start_ok("t", "d.scratch", "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, record) = app.commit(&id, &evidence("dt=2026-08-24", 100, 100, 90, 2)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(check(&record, "unique_keys")["status"], "warn");
    assert_eq!(check(&record, "null_keys")["status"], "warn");
    let id = app.start_ok("t", "d.scratch", "2026-08-25", &["dt=2026-08-25"]).await;
    let (status, record) = app
        .commit(&id, &json!({"partitions": [{"partition": "dt=2026-08-25", "rows_written": 1, "row_count": 1}]}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "no marker blocks even on scratch");
    assert_eq!(check(&record, "marker_present")["status"], "fail");
}

async fn append_datasets_count_on_top_of_the_published_rows(app: TestApp) {
    app.put_dataset("d.append", &json!({"write_mode": "append"})).await;
    app.publish("t", "d.append", "2026-08-24", "dt=2026-08-24", 100).await;
    let id = app.start_ok("t", "d.append", "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, record) = app.commit(&id, &evidence("dt=2026-08-24", 20, 120, 120, 0)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(check(&record, "rows_match_written")["expected"], 120);
    let id = app.start_ok("t", "d.append", "2026-08-24", &["dt=2026-08-24"]).await;
    rejected_after(&app, &id, evidence("dt=2026-08-24", 20, 160, 160, 0)).await;
}

async fn rejected_after(app: &TestApp, id: &str, ev: Value) {
    let (status, record) = app.commit(id, &ev).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{record}");
    assert_eq!(check(&record, "rows_match_written")["expected"], 140);
}

async fn dataset_policies_are_stored_and_validated(app: TestApp) {
    let (status, created) = app
        .request(reqwest::Method::PUT, "/v1/datasets/dws.order_detail",
            Some(&json!({"tier": "core", "unique_key": ["order_id"], "timezone": "Asia/Shanghai", "owner": "data-platform"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["write_mode"], "overwrite_partition");
    assert_eq!(created["max_volume_change"], 0.3);
    assert_eq!(created["baseline_periods"], 7);
    let (status, _) =
        app.request(reqwest::Method::PUT, "/v1/datasets/dws.order_detail", Some(&json!({"tier": "standard"}))).await;
    assert_eq!(status, StatusCode::OK);
    let (_, one) = app.get("/v1/datasets/dws.order_detail").await;
    assert_eq!(one["tier"], "standard");
    assert_eq!(one["unique_key"], json!([]), "PUT replaces the whole policy");
    let (_, all) = app.get("/v1/datasets").await;
    assert_eq!(all["items"].as_array().unwrap().len(), 1);
    for (body, field) in [
        (json!({"tier": "gold"}), "tier"),
        (json!({"timezone": "Mars/Olympus"}), "timezone"),
        (json!({"max_volume_change": -1}), "max_volume_change"),
        (json!({"owner": "x", "tiers": "core"}), "tiers"),
    ] {
        let (status, err) = app.request(reqwest::Method::PUT, "/v1/datasets/x", Some(&body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(err["error"]["details"]["field"], field, "{err}");
    }
    let (status, err) = app.get("/v1/datasets/x").await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("dataset_not_found")));
}
