//! OpenLineage intake: the events Airflow's and Spark's integrations post
//! start, commit and fail batches, and every event is stored.
//! The bodies are in `fixtures/openlineage/` (see its README for their shape).

use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::{check, Backend, TestApp};
use crate::on_both_backends;

on_both_backends!(
    an_airflow_task_run_starts_and_publishes_its_batch,
    duplicate_keys_in_data_quality_metrics_reject_the_commit,
    a_failed_task_fails_its_batch_with_the_error_message,
    repeated_events_change_nothing,
    a_complete_without_row_counts_leaves_the_batch_running,
    events_without_enough_information_are_stored_with_warnings,
    a_starts_input_datasets_become_the_batchs_inputs,
);

const START: &str = include_str!("fixtures/openlineage/airflow_task_start.json");
const COMPLETE: &str = include_str!("fixtures/openlineage/airflow_task_complete.json");
const COMPLETE_DUPLICATES: &str = include_str!("fixtures/openlineage/airflow_task_complete_duplicate_keys.json");
const FAIL: &str = include_str!("fixtures/openlineage/airflow_task_fail.json");
const DAG_START: &str = include_str!("fixtures/openlineage/airflow_dag_start.json");
const SPARK_START: &str = include_str!("fixtures/openlineage/spark_hive_insert_start.json");
const SPARK_COMPLETE: &str = include_str!("fixtures/openlineage/spark_hive_insert_complete.json");

const RUN: &str = "0198e2a4-5c1b-7d3e-9f42-6a1c0b7e2d91";
const DS: &str = "warehouse.dws.order_detail";
const BATCH: &str = "dws_order_detail_daily.load_order_detail-20260824-001";
const P: &str = "dt=2026-08-24";

/// Posts an event body byte for byte, as an OpenLineage client sends it.
async fn post(app: &TestApp, body: &str) -> Value {
    let (status, answer) = app.post_raw("/api/v1/lineage", body.to_owned()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["accepted"], true);
    answer
}

fn warnings(answer: &Value) -> Vec<&str> {
    answer["warnings"].as_array().expect("warnings").iter().map(|w| w.as_str().expect("a warning is text")).collect()
}

/// `(run_id, event_type, outcome)` of every stored event, oldest first.
async fn stored_events(app: &TestApp) -> Vec<(Option<String>, Option<String>, Value)> {
    let sql = "SELECT run_id, event_type, CAST(outcome AS TEXT) FROM openlineage_events ORDER BY id";
    let rows: Vec<(Option<String>, Option<String>, Option<String>)> = match app.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&app.db.url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
        }
    };
    rows.into_iter()
        .map(|(run, kind, outcome)| {
            let outcome = outcome.map_or(Value::Null, |o| serde_json::from_str(&o).unwrap());
            (run, kind, outcome)
        })
        .collect()
}

async fn an_airflow_task_run_starts_and_publishes_its_batch(app: TestApp) {
    let started = post(&app, START).await;
    assert_eq!(started["event_type"], "START");
    assert_eq!(started["run_id"], RUN);
    assert_eq!(started["batches"], json!([{"dataset": DS, "batch_id": BATCH, "state": "running"}]));
    assert_eq!(warnings(&started), Vec::<&str>::new());
    let (status, ready) = app.ready(DS, &[P]).await;
    assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("running")));

    let completed = post(&app, COMPLETE).await;
    assert_eq!(completed["batches"], json!([{"dataset": DS, "batch_id": BATCH, "state": "published"}]));
    assert_eq!(warnings(&completed), Vec::<&str>::new());
    let (status, ready) = app.ready(DS, &[P]).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["partitions"][0]["row_count"], 1_048_576);

    let (_, batch) = app.get(&format!("/v1/batches/{BATCH}")).await;
    assert_eq!(batch["task"], "dws_order_detail_daily.load_order_detail");
    assert_eq!(batch["marker"], format!("openlineage:{RUN}"));
    assert_eq!(batch["run_ref"], RUN);
    assert_eq!(batch["idempotency_key"], format!("openlineage:{RUN}:{DS}"));
    assert_eq!(batch["partitions"][0]["rows_written"], 1_048_576);
    assert_eq!(check(&batch, "rows_match_written")["status"], "pass");
    assert_eq!(batch["scope"]["business_start"], "2026-08-24T00:00:00+00:00");
    assert_eq!(
        batch["scope"]["openlineage"]["dataset"],
        json!({"namespace": "postgres://warehouse-db:5432", "name": DS})
    );

    let events = stored_events(&app).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].1.as_deref(), Some("START"));
    assert_eq!(events[1].0.as_deref(), Some(RUN));
    assert_eq!(events[1].2, completed, "the stored outcome is the answer");
}

async fn duplicate_keys_in_data_quality_metrics_reject_the_commit(app: TestApp) {
    app.put_dataset(DS, &json!({"unique_key": ["order_id"]})).await;
    post(&app, START).await;

    let answer = post(&app, COMPLETE_DUPLICATES).await;
    assert_eq!(
        answer["batches"],
        json!([{"dataset": DS, "batch_id": BATCH, "state": "rejected", "failed_checks": ["unique_keys"]}])
    );
    let (status, ready) = app.ready(DS, &[P]).await;
    assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("rejected")));
    let (_, batch) = app.get(&format!("/v1/batches/{BATCH}")).await;
    let unique = check(&batch, "unique_keys");
    assert_eq!((unique["observed"].clone(), unique["expected"].clone()), (json!(1_040_000), json!(1_048_576)));
    assert_eq!(check(&batch, "null_keys")["status"], "pass");
    assert_eq!(batch["partitions"][0]["metrics"], json!({"amount": 98765432.1}));
}

async fn a_failed_task_fails_its_batch_with_the_error_message(app: TestApp) {
    post(&app, START).await;

    let answer = post(&app, FAIL).await;
    assert_eq!(answer["batches"], json!([{"dataset": DS, "batch_id": BATCH, "state": "failed"}]));
    assert_eq!(warnings(&answer), Vec::<&str>::new());
    let (_, batch) = app.get(&format!("/v1/batches/{BATCH}")).await;
    assert_eq!(
        batch["failure"],
        json!({"stage": "write", "category": "unknown",
               "message": "could not extend file \"base/16384/1259\": No space left on device"})
    );
    let (status, ready) = app.ready(DS, &[P]).await;
    assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("failed")));
}

async fn repeated_events_change_nothing(app: TestApp) {
    let first = post(&app, START).await;
    let again = post(&app, START).await;
    assert_eq!(again["batches"], first["batches"]);
    let (_, listed) = app.get(&format!("/v1/batches?dataset={DS}")).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);

    let committed = post(&app, COMPLETE).await;
    let replayed = post(&app, COMPLETE).await;
    assert_eq!(replayed["batches"], committed["batches"]);
    assert_eq!(warnings(&replayed), Vec::<&str>::new());
    let (_, ready) = app.ready(DS, &[P]).await;
    assert_eq!(ready["partitions"][0]["version"], 1, "published once");

    // A late START of the same run still names the same batch, now published.
    let late = post(&app, START).await;
    assert_eq!(late["batches"], json!([{"dataset": DS, "batch_id": BATCH, "state": "published"}]));
    // A FAIL after the commit cannot unpublish it; it says so.
    let fail = post(&app, FAIL).await;
    assert_eq!(fail["batches"][0]["state"], "published");
    let w = warnings(&fail);
    assert!(
        w.len() == 1
            && w[0].starts_with(&format!("{DS}: batch {BATCH} not failed: batch {BATCH} is already published")),
        "{w:?}"
    );
    let (status, _) = app.ready(DS, &[P]).await;
    assert_eq!(status, StatusCode::OK);
    let stored = stored_events(&app).await;
    assert_eq!(stored.len(), 3, "START, COMPLETE and FAIL, each stored once however often it came");
    assert_eq!(stored[2].2, fail, "a repeat keeps the latest answer");
}

async fn a_complete_without_row_counts_leaves_the_batch_running(app: TestApp) {
    post(&app, START).await;
    // What SQLExecuteQueryOperator sends: the outputs again, with no counts.
    let bare = START.replace(r#""eventType": "START""#, r#""eventType": "COMPLETE""#);

    let answer = post(&app, &bare).await;
    assert_eq!(answer["batches"], json!([{"dataset": DS, "batch_id": BATCH, "state": "running"}]));
    assert_eq!(
        warnings(&answer),
        [format!("{DS}: batch {BATCH} is not committed and stays running: neither outputStatistics nor dataQualityMetrics \
                  gives a rowCount: there is no evidence to check (POST /v1/batches/{BATCH}/commit can commit it with per-partition stats)")]
    );
    let (status, ready) = app.ready(DS, &[P]).await;
    assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("running")));
}

async fn events_without_enough_information_are_stored_with_warnings(app: TestApp) {
    let dag = post(&app, DAG_START).await;
    assert_eq!(dag["batches"], json!([]));
    assert_eq!(warnings(&dag), ["no output dataset to start a batch for"]);

    // Spark names the table by its location and sends no nominalTime.
    let spark = post(&app, SPARK_START).await;
    assert_eq!(
        warnings(&spark),
        ["dws.order_detail: no batch started: run.facets.nominalTime.nominalStartTime is missing: there is no data date"]
    );
    let spark = post(&app, SPARK_COMPLETE).await;
    assert_eq!(
        warnings(&spark),
        ["run 0198e2b6-0a3f-7b21-a9d4-51c7e8f30b12 started no batch (its START never came or named no usable output): nothing to commit"]
    );

    let running = post(&app, &SPARK_START.replace(r#""eventType": "START""#, r#""eventType": "RUNNING""#)).await;
    assert_eq!(warnings(&running), ["RUNNING events change no batch; recorded only"]);

    let empty = post(&app, "{}").await;
    assert_eq!(empty["event_type"], Value::Null);
    assert_eq!(warnings(&empty).len(), 2, "{empty}");

    let (status, body) = app.post_raw("/api/v1/lineage", "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "malformed_json");

    let (_, listed) = app.get("/v1/batches").await;
    assert_eq!(listed["items"], json!([]));
    let events = stored_events(&app).await;
    let kinds: Vec<Option<&str>> = events.iter().map(|e| e.1.as_deref()).collect();
    assert_eq!(kinds, [Some("START"), Some("START"), Some("COMPLETE"), Some("RUNNING"), None]);
    assert_eq!(events[2].2, spark);
    assert_eq!(events[4].2, empty);
}

/// The START fixture reads `warehouse.ods.orders` (no subset facet: the
/// partition of the run's data date).
async fn a_starts_input_datasets_become_the_batchs_inputs(app: TestApp) {
    const UP: &str = "warehouse.ods.orders";
    app.publish("load_orders", UP, "2026-08-24", P, 10).await;

    post(&app, START).await;
    post(&app, COMPLETE).await;

    let (status, record) = app.get(&format!("/v1/batches/{BATCH}")).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["inputs"][0]["dataset"], UP, "{record}");
    assert_eq!(record["inputs"][0]["partition"], P);
    assert_eq!(record["inputs"][0]["version"], 1);
    assert_eq!(record["inputs"].as_array().unwrap().len(), 1);
    let (status, _) = app.ready(DS, &[P]).await;
    assert_eq!(status, StatusCode::OK);

    // A new version of the input makes the output stale, as for any batch.
    app.publish("load_orders", UP, "2026-08-24", P, 11).await;
    let (status, ready) = app.ready(DS, &[P]).await;
    assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("stale_upstream")), "{ready}");
    assert_eq!(ready["upstream"]["dataset"], UP);
}

/// An input with a partition subset facet names its partitions; an input
/// the registry does not know is not recorded.
#[test]
fn input_subsets_name_the_partitions_read() {
    use batchgate::domain::openlineage::RunEvent;
    let mut event: Value = serde_json::from_str(START).unwrap();
    event["inputs"] = json!([
        {"namespace": "hive", "name": "dwd.orders", "inputFacets": {"subset": {"inputCondition": {
            "type": "partition", "partitions": [{"dimensions": {"dt": "2026-08-23"}}, {"dimensions": {"dt": "2026-08-24"}}]}}}},
        {"namespace": "hive", "name": "dim.region"},
    ]);
    let e = RunEvent::parse(event.to_string().as_bytes()).unwrap();
    assert_eq!(e.warnings, Vec::<String>::new());
    let plan = e.start_plan(&e.outputs[0], &Default::default()).unwrap();
    let pairs = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
    assert_eq!(
        plan.inputs,
        pairs(&[("dwd.orders", "dt=2026-08-23"), ("dwd.orders", "dt=2026-08-24"), ("dim.region", "dt=2026-08-24")])
    );
}
