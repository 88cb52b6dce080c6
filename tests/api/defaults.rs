//! Each policy default is written once (`domain/policy.rs`): a dataset PUT
//! with an empty policy, and a dataset first named by a batch start, both
//! hold exactly `DatasetPolicy::default()`, whatever the SQL `DEFAULT`s say.

use batchgate::domain::policy::DatasetPolicy;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_backends;

on_both_backends!(
    an_empty_policy_put_stores_the_default_policy,
    a_dataset_first_named_by_a_start_has_the_default_policy,
);

/// The policy a dataset record states.
fn stated(d: &Value) -> DatasetPolicy {
    let text = |k: &str| d[k].as_str().map(str::to_owned);
    let count = |k: &str| u32::try_from(d[k].as_u64().unwrap_or_else(|| panic!("{k} in {d}"))).unwrap();
    DatasetPolicy {
        tier: d["tier"].as_str().unwrap().parse().unwrap(),
        write_mode: d["write_mode"].as_str().unwrap().parse().unwrap(),
        unique_key: serde_json::from_value(d["unique_key"].clone()).unwrap(),
        timezone: text("timezone").unwrap(),
        max_volume_change: d["max_volume_change"].as_f64().unwrap(),
        baseline_periods: count("baseline_periods"),
        allow_empty: d["allow_empty"].as_bool().unwrap(),
        owner: text("owner"),
        max_partitions_per_batch: count("max_partitions_per_batch"),
        deadline: serde_json::from_value(d["deadline"].clone()).unwrap(),
        webhook_url: text("webhook_url"),
        airflow_asset: text("airflow_asset"),
        partition_key: text("partition_key"),
        events_url: text("events_url"),
    }
}

async fn an_empty_policy_put_stores_the_default_policy(app: TestApp) {
    let put = app.put_dataset("dws.defaults", &json!({})).await;
    assert_eq!(stated(&put), DatasetPolicy::default(), "{put}");
    let (status, read) = app.get("/v1/datasets/dws.defaults").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stated(&read), DatasetPolicy::default(), "as stored: {read}");
}

async fn a_dataset_first_named_by_a_start_has_the_default_policy(app: TestApp) {
    app.start_ok("t_defaults", "dws.undescribed", "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, read) = app.get("/v1/datasets/dws.undescribed").await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(stated(&read), DatasetPolicy::default(), "{read}");
}
