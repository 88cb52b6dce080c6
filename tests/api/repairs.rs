//! Repair plans: the four questions before the button, and the numbers after.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, TestApp};
use crate::on_both_backends;

on_both_backends!(
    a_plan_classifies_each_retry_boundary,
    a_repair_from_plan_to_complete,
    repair_progress_takes_its_baseline_over_the_datasets_baseline_periods
);

const DT: &str = "2026-08-24";
const P: &str = "dt=2026-08-24";

async fn plan(app: &TestApp, dataset: &str, action: &str) -> Value {
    let (status, plan) = app
        .post(
            "/v1/repairs",
            &json!({"dataset": dataset, "partitions": [P], "action": action, "reason": "source fixed"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{plan}");
    plan
}

fn boundary(plan: &Value) -> (String, String) {
    let b = &plan["partitions"][0]["retry_boundary"];
    (b["state"].as_str().unwrap().to_owned(), b["recommended_action"].as_str().unwrap().to_owned())
}

async fn build(app: &TestApp, dataset: &str, inputs: &[&str], rows: u64, repair: Option<i64>) -> Value {
    let inputs: Vec<Value> = inputs.iter().map(|d| json!({"dataset": d, "partition": P})).collect();
    let mut body = json!({"task": format!("t_{}", dataset.replace('.', "_")), "dataset": dataset, "dt": DT, "partitions": [P], "inputs": inputs});
    if let Some(id) = repair {
        body["repair_id"] = json!(id);
        body["trigger"] = json!("repair");
    }
    let (status, started) = app.post("/v1/batches", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let mut ev = clean(P, rows);
    ev["partitions"][0]["metrics"] = json!({"amount": 10.5});
    ev["source"] = json!({"row_count": rows, "metrics": {"amount": 10.5}});
    let (status, record) = app.commit(started["batch_id"].as_str().unwrap(), &ev).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    record
}

async fn a_plan_classifies_each_retry_boundary(app: TestApp) {
    // never written: only a failure before any write.
    let id = app.start_ok("t", "d.never", DT, &[P]).await;
    app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "read", "category": "resource"})).await;
    assert_eq!(boundary(&plan(&app, "d.never", "rebuild").await), ("never_written".into(), "rebuild".into()));

    // partially written: the latest batch was rejected.
    let id = app.start_ok("t", "d.partial", DT, &[P]).await;
    app.commit(&id, &json!({"marker": "m", "partitions": [{"partition": P, "rows_written": 5, "row_count": 10}]}))
        .await;
    let p = plan(&app, "d.partial", "rebuild").await;
    assert_eq!(boundary(&p), ("partially_written".into(), "rebuild".into()));
    assert_eq!(p["partitions"][0]["retry_boundary"]["latest_batch_id"], id.as_str());

    // committed, unacknowledged: it published, then its task reported a failure.
    let published = app.publish("t", "d.unacked", DT, P, 7).await;
    let bid = published["batch_id"].as_str().unwrap();
    let (status, err) =
        app.post(&format!("/v1/batches/{bid}/fail"), &json!({"stage": "write", "category": "unknown"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "the service told the task its commit is in");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.contains("its commit went through, so its data stays ready"), "{message}");
    assert!(!message.contains("another body"), "{message}");
    let p = plan(&app, "d.unacked", "resume").await;
    assert_eq!(boundary(&p), ("committed_unacknowledged".into(), "resume".into()));
    assert_eq!(p["partitions"][0]["identity"]["published"]["row_count"], 7);

    // published, downstream pending: a consumer is stale.
    build(&app, "ods.up", &[], 10, None).await;
    build(&app, "dwd.down", &["ods.up"], 10, None).await;
    build(&app, "ods.up", &[], 11, None).await;
    let p = plan(&app, "ods.up", "resume").await;
    assert_eq!(boundary(&p), ("published_downstream_pending".into(), "resume".into()));
    assert_eq!(p["downstream"][0]["dataset"], "dwd.down");
    assert_eq!(p["downstream"][0]["needs_recompute"], true);

    // published, clean: nothing to resume; but a partition in a rebuild plan
    // is rebuilt (or, where the rows cannot be overwritten, compensated).
    app.publish("t", "d.clean", DT, P, 3).await;
    assert_eq!(boundary(&plan(&app, "d.clean", "resume").await), ("published_clean".into(), "nothing_to_do".into()));
    assert_eq!(boundary(&plan(&app, "d.clean", "rebuild").await), ("published_clean".into(), "rebuild".into()));
    app.put_dataset("d.appended", &json!({"write_mode": "append"})).await;
    app.publish("t", "d.appended", DT, P, 3).await;
    assert_eq!(boundary(&plan(&app, "d.appended", "rebuild").await), ("published_clean".into(), "compensate".into()));

    let (status, err) = app
        .post("/v1/repairs", &json!({"dataset": "d.clean", "partitions": [P], "action": "pray", "reason": "x"}))
        .await;
    assert_eq!((status, err["error"]["details"]["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("action")));
    let (status, err) = app.get("/v1/repairs/999").await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("repair_not_found")));
}

async fn a_repair_from_plan_to_complete(app: TestApp) {
    app.put_dataset("ods.orders", &json!({"unique_key": ["order_id"], "owner": "ingest"})).await;
    app.put_dataset("dws.daily", &json!({"owner": "finance"})).await;
    build(&app, "ods.orders", &[], 100, None).await;
    build(&app, "dws.daily", &["ods.orders"], 100, None).await;

    let p = plan(&app, "ods.orders", "rebuild").await;
    let id = p["id"].as_i64().unwrap();
    assert_eq!(p["state"], "planned");
    assert_eq!(p["partitions"][0]["scope"]["dt"], DT);
    assert_eq!(p["partitions"][0]["identity"]["unique_key"], json!(["order_id"]));
    assert_eq!(
        p["downstream"],
        json!([{"dataset": "dws.daily", "partition": P, "owner": "finance", "write_mode": "overwrite_partition",
        "state": "ready", "needs_recompute": true}])
    );

    // Rebuild the root twice from the same (no) inputs: the numbers do not move.
    build(&app, "ods.orders", &[], 98, Some(id)).await;
    build(&app, "ods.orders", &[], 98, Some(id)).await;
    let (_, mid) = app.get(&format!("/v1/repairs/{id}")).await;
    assert_eq!(mid["state"], "in_progress", "dws.daily is stale: {mid}");
    let part = &mid["progress"]["partitions"][0];
    assert_eq!(part["row_count"], json!({"before": 100, "after": 98, "baseline": null}));
    assert_eq!(part["unique_keys"], json!({"distinct_keys": 98, "null_keys": 0, "row_count": 98}));
    assert_eq!(part["metric_vs_source"]["status"], "pass");
    assert_eq!((part["rebuilds"].clone(), part["rebuilt_identically"].clone()), (json!(2), json!(true)));
    assert_eq!(mid["progress"]["downstream"][0]["stale"], true);
    // The plan and /ready agree on every partition's fitness.
    let (status, ready) = app.ready("dws.daily", &[P]).await;
    assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("stale_upstream")));
    assert_eq!(mid["progress"]["downstream"][0]["state"], "stale_upstream", "{mid}");
    assert_eq!(part["state"], "ready");
    let (status, _) = app.ready("ods.orders", &[P]).await;
    assert_eq!(status, StatusCode::OK);

    build(&app, "dws.daily", &["ods.orders"], 98, None).await;
    let (_, done) = app.get(&format!("/v1/repairs/{id}")).await;
    assert_eq!(done["state"], "complete", "{done}");
    assert_eq!(done["progress"]["downstream"][0]["recomputed"], true);
    assert_eq!(done["progress"]["downstream"][0]["state"], "ready");
}

async fn repair_progress_takes_its_baseline_over_the_datasets_baseline_periods(app: TestApp) {
    // Four earlier data dates; the commit's volume check, and the repair's
    // baseline with it, look at the newest three of them only.
    app.put_dataset("ods.weekly", &json!({"baseline_periods": 3, "max_volume_change": 10.0})).await;
    for (dt, rows) in [("2026-08-20", 100), ("2026-08-21", 200), ("2026-08-22", 300), ("2026-08-23", 400)] {
        app.publish("t", "ods.weekly", dt, &format!("dt={dt}"), rows).await;
    }
    build(&app, "ods.weekly", &[], 350, None).await;
    let id = plan(&app, "ods.weekly", "rebuild").await["id"].as_i64().unwrap();
    let record = build(&app, "ods.weekly", &[], 320, Some(id)).await;
    let volume = crate::helpers::check(&record, "volume_vs_baseline");
    assert_eq!(volume["status"], "pass", "{record}");
    assert_eq!(volume["expected"]["periods"], 3, "{record}");

    let (status, repair) = app.get(&format!("/v1/repairs/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{repair}");
    // median(200, 300, 400), not median of all four (250): the same
    // baseline as the repair batch's own volume check.
    assert_eq!(volume["expected"]["baseline"], 300.0, "{record}");
    assert_eq!(
        repair["progress"]["partitions"][0]["row_count"],
        json!({"before": 350, "after": 320, "baseline": 300.0}),
        "{repair}"
    );
    assert_eq!(repair["state"], "complete", "{repair}");
}
