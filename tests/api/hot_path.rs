//! `/ready`'s hot path answers a query it has answered before from bytes it
//! kept: those bytes must never outlive the partition state they describe.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, enc, TestApp};
use crate::on_both_backends;

on_both_backends!(a_kept_ready_answer_never_outlives_the_partition_it_describes);

const DT: &str = "2026-08-24";
const P1: &str = "dt=2026-08-24";
const P2: &str = "dt=2026-08-25";

async fn publish(app: &TestApp, dataset: &str, partitions: &[&str], inputs: &[&str], rows: u64) {
    let inputs: Vec<Value> = inputs.iter().map(|d| json!({"dataset": d, "partition": P1})).collect();
    let body = json!({"task": format!("t_{}", dataset.replace('.', "_")), "dataset": dataset, "dt": DT,
        "partitions": partitions, "inputs": inputs});
    let (status, started) = app.post("/v1/batches", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let evidence: Vec<Value> = partitions.iter().map(|p| clean(p, rows)["partitions"][0].clone()).collect();
    let mut commit = clean(partitions[0], rows);
    commit["partitions"] = Value::Array(evidence);
    let (status, record) = app.commit(started["batch_id"].as_str().unwrap(), &commit).await;
    assert_eq!(status, StatusCode::OK, "{record}");
}

/// The same query, asked `n` times: every answer, as status and the
/// version of each partition (or the not-ready reason).
async fn ask(app: &TestApp, query: &str, n: usize) -> Vec<(StatusCode, Value)> {
    let mut answers = Vec::new();
    for _ in 0..n {
        let (status, body) = app.get(&format!("/ready?{query}")).await;
        let said = match status {
            StatusCode::OK => body["partitions"].as_array().unwrap().iter().map(|p| p["version"].clone()).collect(),
            _ => body["reason"].clone(),
        };
        answers.push((status, said));
    }
    answers
}

async fn a_kept_ready_answer_never_outlives_the_partition_it_describes(app: TestApp) {
    publish(&app, "ods.a", &[P1, P2], &[], 100).await;
    publish(&app, "dwd.b", &[P1], &["ods.a"], 100).await;
    let both = format!("dataset=ods.a&partition={}&partition={}", enc(P1), enc(P2));
    let downstream = format!("dataset=dwd.b&partition={}", enc(P1));
    let v = |a: &[i64]| Value::Array(a.iter().map(|n| json!(n)).collect());

    // Asked again and again: the same answer (from kept bytes after the first).
    assert_eq!(ask(&app, &both, 3).await, vec![(StatusCode::OK, v(&[1, 1])); 3]);
    assert_eq!(ask(&app, &downstream, 3).await, vec![(StatusCode::OK, v(&[1])); 3]);

    // A restatement of both partitions: the very next answer is the new one,
    // and the reader built on the old version is stale at once.
    publish(&app, "ods.a", &[P1, P2], &[], 101).await;
    assert_eq!(ask(&app, &both, 2).await, vec![(StatusCode::OK, v(&[2, 2])); 2]);
    assert_eq!(ask(&app, &downstream, 2).await, vec![(StatusCode::NOT_FOUND, json!("stale_upstream")); 2]);

    // Taking one of the two out of service ends the kept answer for the pair.
    let (status, _) =
        app.post(&format!("/v1/partitions/ods.a/{}/invalidate", enc(P2)), &json!({"reason": "duplicates"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ask(&app, &both, 2).await, vec![(StatusCode::NOT_FOUND, json!("invalidated")); 2]);
    let first_alone = format!("dataset=ods.a&partition={}", enc(P1));
    assert_eq!(ask(&app, &first_alone, 2).await, vec![(StatusCode::OK, v(&[2])); 2]);
}
