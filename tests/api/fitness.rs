//! One fitness rule: `/ready`, lineage, repair plans, input resolution,
//! alerts and the deadline scan all judge a partition the same way.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, enc, TestApp};
use crate::on_both_backends;

on_both_backends!(
    every_view_judges_a_partition_as_ready_does,
    a_partition_taken_out_of_service_after_its_deadline_is_late_until_republished,
);

const DT: &str = "2026-08-24";
const P: &str = "dt=2026-08-24";

async fn build(app: &TestApp, dataset: &str, inputs: &[&str], rows: u64) -> Value {
    let inputs: Vec<Value> = inputs.iter().map(|d| json!({"dataset": d, "partition": P})).collect();
    let body = json!({"task": format!("t_{}", dataset.replace('.', "_")), "dataset": dataset, "dt": DT,
        "partitions": [P], "inputs": inputs});
    let (status, started) = app.post("/v1/batches", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let (status, record) = app.commit(started["batch_id"].as_str().unwrap(), &clean(P, rows)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    record
}

/// The reason `/ready` gives, or `ready`.
async fn ready_says(app: &TestApp, dataset: &str) -> String {
    let (status, body) = app.ready(dataset, &[P]).await;
    match status {
        StatusCode::OK => "ready".into(),
        _ => body["reason"].as_str().unwrap().to_owned(),
    }
}

/// What the lineage graph says of each node, by dataset.
async fn lineage_says(app: &TestApp, dataset: &str) -> Vec<(String, String)> {
    let url = format!("/v1/lineage?dataset={dataset}&partition={}&direction=downstream&depth=3", enc(P));
    let (status, graph) = app.get(&url).await;
    assert_eq!(status, StatusCode::OK, "{graph}");
    graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["dataset"].as_str().unwrap().to_owned(), n["state"].as_str().unwrap().to_owned()))
        .collect()
}

async fn every_view_judges_a_partition_as_ready_does(app: TestApp) {
    build(&app, "ods.a", &[], 100).await;
    build(&app, "dwd.b", &["ods.a"], 100).await;
    build(&app, "ods.c", &[], 100).await;
    // Restate A: B was built on the old version.
    build(&app, "ods.a", &[], 101).await;
    let (status, _) =
        app.post(&format!("/v1/partitions/ods.c/{}/invalidate", enc(P)), &json!({"reason": "duplicates"})).await;
    assert_eq!(status, StatusCode::OK);
    app.start_ok("t_ods_d", "ods.d", DT, &[P]).await;

    for (dataset, fitness) in [
        ("ods.a", "ready"),
        ("dwd.b", "stale_upstream"),
        ("ods.c", "invalidated"),
        ("ods.d", "running"),
        ("ods.none", "no_batch"),
    ] {
        assert_eq!(ready_says(&app, dataset).await, fitness, "/ready on {dataset}");
        assert_eq!(
            lineage_says(&app, dataset).await[0],
            (dataset.to_owned(), fitness.to_owned()),
            "lineage root {dataset}"
        );
    }
    assert_eq!(
        lineage_says(&app, "ods.a").await,
        vec![("ods.a".to_owned(), "ready".to_owned()), ("dwd.b".to_owned(), "stale_upstream".to_owned())]
    );

    // A repair plan: the partition and what is downstream, as /ready says.
    let (status, plan) = app
        .post("/v1/repairs", &json!({"dataset": "ods.a", "partitions": [P], "action": "resume", "reason": "check"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{plan}");
    assert_eq!(plan["partitions"][0]["state"], "ready");
    assert_eq!(plan["downstream"][0]["state"], "stale_upstream", "{plan}");
    let (_, got) = app.get(&format!("/v1/repairs/{}", plan["id"])).await;
    let down = &got["progress"]["downstream"][0];
    assert_eq!((down["state"].as_str(), down["stale"].as_bool()), (Some("stale_upstream"), Some(true)), "{got}");
    assert_eq!(got["progress"]["partitions"][0]["state"], "ready");

    // A batch that reads them: the unready inputs, each with /ready's reason.
    let inputs: Vec<Value> = ["ods.a", "dwd.b", "ods.c", "ods.d", "ods.none"]
        .iter()
        .map(|d| json!({"dataset": d, "partition": P}))
        .collect();
    let body = json!({"task": "t_ads_e", "dataset": "ads.e", "dt": DT, "partitions": [P], "inputs": inputs});
    let (status, err) = app.post("/v1/batches", &body).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    let reasons: Vec<(&str, &str)> = err["error"]["details"]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["dataset"].as_str().unwrap(), i["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reasons,
        [("dwd.b", "stale_upstream"), ("ods.c", "invalidated"), ("ods.d", "running"), ("ods.none", "no_batch")]
    );
}

fn at(s: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&chrono::Utc)
}

async fn a_partition_taken_out_of_service_after_its_deadline_is_late_until_republished(app: TestApp) {
    app.clock.set(at("2026-08-25T01:00:00Z"));
    app.put_dataset("d.late", &json!({"owner": "ops", "deadline": {"time": "06:00", "days_after_dt": 1}})).await;
    app.publish("t", "d.late", DT, P, 10).await;
    app.clock.set(at("2026-08-25T07:00:00Z"));
    assert_eq!(app.scan().await.deadlines_missed, 0, "published and fit before the deadline");

    let (status, _) =
        app.post(&format!("/v1/partitions/d.late/{}/invalidate", enc(P)), &json!({"reason": "wrong currency"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ready_says(&app, "d.late").await, "invalidated");
    assert_eq!(app.scan().await.deadlines_missed, 1, "/ready refuses it, so the date is late");
    let (_, open) = app.get("/v1/alerts?kind=deadline_missed&state=open").await;
    let alert = &open["items"][0];
    assert_eq!(alert["partitions"], json!([P]), "{open}");
    assert!(alert["message"].as_str().unwrap().contains("is invalidated"), "{alert}");
    assert_eq!(app.scan().await.deadlines_missed, 0, "raised once");

    app.publish("t", "d.late", DT, P, 10).await;
    assert_eq!(ready_says(&app, "d.late").await, "ready");
    let (_, resolved) = app.get("/v1/alerts?kind=deadline_missed&state=resolved").await;
    assert_eq!(resolved["items"].as_array().unwrap().len(), 1, "{resolved}");
    assert_eq!(app.scan().await.deadlines_missed, 0);
}
