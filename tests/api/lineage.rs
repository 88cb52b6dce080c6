//! Lineage: downstream partitions know when the data they were built on was
//! restated or invalidated, and the change feed tells consumers in order.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, enc, TestApp};
use crate::on_both_backends;

on_both_backends!(
    repairing_the_root_of_a_chain_makes_it_stale_until_recomputed_in_order,
    an_unready_input_refuses_the_start_unless_allowed,
    an_invalidated_partition_is_out_of_service_and_downstream_goes_stale,
    two_consumers_read_the_change_feed_across_a_restart,
    the_lineage_graph_follows_what_batches_read,
    a_batch_that_reads_the_partition_it_rewrites_is_stale_by_what_it_read,
);

const DT: &str = "2026-08-24";
const P: &str = "dt=2026-08-24";

/// Starts a batch on `dataset` reading `inputs`, commits clean evidence.
async fn build(app: &TestApp, dataset: &str, inputs: &[&str], rows: u64) -> Value {
    let inputs: Vec<Value> = inputs.iter().map(|d| json!({"dataset": d, "partition": P})).collect();
    let (status, started) =
        app.post("/v1/batches", &json!({"task": format!("build_{}", dataset.replace('.', "_")), "dataset": dataset, "dt": DT, "partitions": [P], "inputs": inputs})).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let (status, record) = app.commit(started["batch_id"].as_str().unwrap(), &clean(P, rows)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    record
}

async fn reason(app: &TestApp, dataset: &str) -> (StatusCode, Value) {
    app.ready(dataset, &[P]).await
}

async fn feed(app: &TestApp, after: Option<&str>, limit: u32) -> (Vec<Value>, String) {
    let q = match after {
        Some(c) => format!("/v1/changes?after={}&limit={limit}", enc(c)),
        None => format!("/v1/changes?limit={limit}"),
    };
    let (status, page) = app.get(&q).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    (page["items"].as_array().unwrap().clone(), page["next_cursor"].as_str().unwrap().to_owned())
}

async fn repairing_the_root_of_a_chain_makes_it_stale_until_recomputed_in_order(app: TestApp) {
    let a1 = build(&app, "ods.a", &[], 100).await;
    let b1 = build(&app, "dwd.b", &["ods.a"], 100).await;
    assert_eq!(b1["inputs"], json!([{"dataset": "ods.a", "partition": P, "version": 1, "batch_id": a1["batch_id"]}]));
    build(&app, "ads.c", &["dwd.b"], 100).await;
    for ds in ["ods.a", "dwd.b", "ads.c"] {
        assert_eq!(reason(&app, ds).await.0, StatusCode::OK, "{ds}");
    }

    // Repair the root: A becomes version 2.
    let a2 = build(&app, "ods.a", &[], 101).await;
    let (status, ready_a) = reason(&app, "ods.a").await;
    assert_eq!(status, StatusCode::OK);
    let part = &ready_a["partitions"][0];
    assert_eq!(part["restatement"], true);
    assert_eq!(part["supersedes"], json!({"version": 1, "batch_id": a1["batch_id"], "row_count": 100}));
    assert_eq!(part["batch_id"], a2["batch_id"]);

    let (status, b) = reason(&app, "dwd.b").await;
    assert_eq!((status, b["reason"].as_str()), (StatusCode::NOT_FOUND, Some("stale_upstream")));
    assert_eq!(b["upstream"]["dataset"], "ods.a");
    assert_eq!(
        (b["upstream"]["built_on_version"].clone(), b["upstream"]["current_version"].clone()),
        (json!(1), json!(2))
    );
    let (status, c) = reason(&app, "ads.c").await;
    assert_eq!((status, c["reason"].as_str()), (StatusCode::NOT_FOUND, Some("stale_upstream")));
    assert_eq!(c["upstream"]["dataset"], "dwd.b", "transitively stale through B");

    // Recompute B: fresh again; C is still built on the old B.
    let b2 = build(&app, "dwd.b", &["ods.a"], 100).await;
    assert_eq!(b2["inputs"][0]["version"], 2);
    assert_eq!(reason(&app, "dwd.b").await.0, StatusCode::OK);
    let (status, c) = reason(&app, "ads.c").await;
    assert_eq!((status, c["upstream"]["dataset"].as_str()), (StatusCode::NOT_FOUND, Some("dwd.b")));
    build(&app, "ads.c", &["dwd.b"], 100).await;
    assert_eq!(reason(&app, "ads.c").await.0, StatusCode::OK);

    let (items, _) = feed(&app, None, 100).await;
    let seq: Vec<String> =
        items.iter().map(|i| format!("{} {}", i["kind"].as_str().unwrap(), i["dataset"].as_str().unwrap())).collect();
    assert_eq!(
        seq,
        [
            "published ods.a",
            "published dwd.b",
            "published ads.c",
            "restated ods.a",
            "stale dwd.b",
            "stale ads.c",
            "restated dwd.b",
            "fresh_again dwd.b",
            "restated ads.c",
            "fresh_again ads.c",
        ]
    );
}

async fn an_unready_input_refuses_the_start_unless_allowed(app: TestApp) {
    app.start_ok("load_a", "ods.a", DT, &[P]).await;
    let body = json!({"task": "build_b", "dataset": "dwd.b", "dt": DT, "partitions": [P],
        "inputs": [{"dataset": "ods.a", "partition": P}, {"dataset": "ods.never", "partition": P}]});
    let (status, err) = app.post("/v1/batches", &body).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"]["code"], "upstream_not_ready");
    let unready = err["error"]["details"]["inputs"].as_array().unwrap();
    assert_eq!(unready.len(), 2);
    assert_eq!((unready[0]["dataset"].as_str(), unready[0]["reason"].as_str()), (Some("ods.a"), Some("running")));
    assert_eq!((unready[1]["dataset"].as_str(), unready[1]["reason"].as_str()), (Some("ods.never"), Some("no_batch")));

    let mut allowed = body.clone();
    allowed["allow_unready_inputs"] = json!(true);
    let (status, started) = app.post("/v1/batches", &allowed).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(started["inputs"][0]["version"], 0);
    let (_, record) = app.get(&format!("/v1/batches/{}", started["batch_id"].as_str().unwrap())).await;
    assert_eq!(record["allow_unready_inputs"], true);
    assert_eq!(record["inputs"].as_array().unwrap().len(), 2);
}

async fn an_invalidated_partition_is_out_of_service_and_downstream_goes_stale(app: TestApp) {
    build(&app, "ods.a", &[], 10).await;
    build(&app, "dwd.b", &["ods.a"], 10).await;
    let url = format!("/v1/partitions/ods.a/{}/invalidate", enc(P));
    let (status, body) = app.post(&url, &json!({"reason": "source sent duplicates for 08-24"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, a) = reason(&app, "ods.a").await;
    assert_eq!((status, a["reason"].as_str()), (StatusCode::NOT_FOUND, Some("invalidated")));
    assert_eq!(a["invalidated_reason"], "source sent duplicates for 08-24");
    let (status, b) = reason(&app, "dwd.b").await;
    assert_eq!((status, b["upstream"]["cause"].as_str()), (StatusCode::NOT_FOUND, Some("invalidated")));

    let (status, err) =
        app.post(&format!("/v1/partitions/ods.a/{}/invalidate", enc("dt=2026-01-01")), &json!({"reason": "x"})).await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("partition_not_found")));
    let (status, _) = app.post(&url, &json!({"reason": "  "})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    build(&app, "ods.a", &[], 10).await;
    assert_eq!(reason(&app, "ods.a").await.0, StatusCode::OK, "a new publish puts it back in service");
    assert_eq!(reason(&app, "dwd.b").await.0, StatusCode::NOT_FOUND, "B still holds the invalidated data");
    let (items, _) = feed(&app, None, 100).await;
    let invalidated: Vec<&Value> = items.iter().filter(|i| i["kind"] == "invalidated").collect();
    assert_eq!(invalidated.len(), 1);
    assert_eq!(invalidated[0]["detail"]["reason"], "source sent duplicates for 08-24");
}

async fn two_consumers_read_the_change_feed_across_a_restart(app: TestApp) {
    for (i, ds) in ["ods.a", "ods.b", "ods.c"].iter().enumerate() {
        app.publish("t", ds, DT, P, 10 + i as u64).await;
    }
    // Consumer 1 reads two at a time and keeps its cursor; consumer 2 reads everything.
    let (page1, cursor1) = feed(&app, None, 2).await;
    assert_eq!(page1.len(), 2);
    let (all_before, cursor2) = feed(&app, None, 100).await;
    assert_eq!(all_before.len(), 3);

    let app = app.restart().await;
    app.publish("t", "ods.a", DT, P, 11).await;
    app.publish("t", "ods.d", DT, P, 12).await;

    let mut seen1: Vec<Value> = page1;
    let mut cursor = cursor1;
    loop {
        let (page, next) = feed(&app, Some(&cursor), 2).await;
        if page.is_empty() {
            assert_eq!(next, cursor, "an empty page hands back the cursor it was given");
            break;
        }
        seen1.extend(page);
        cursor = next;
    }
    let (rest2, _) = feed(&app, Some(&cursor2), 100).await;
    let seen2: Vec<Value> = all_before.into_iter().chain(rest2).collect();

    let key = |v: &Value| v["cursor"].as_str().unwrap().to_owned();
    assert_eq!(
        seen1.iter().map(key).collect::<Vec<_>>(),
        seen2.iter().map(key).collect::<Vec<_>>(),
        "same changes, same order"
    );
    assert_eq!(seen1.iter().map(key).collect::<BTreeSet<_>>().len(), 5, "none missed, none twice");
    assert_eq!(seen1[3]["kind"], "restated");
    assert_eq!(seen1[4]["kind"], "published");
    let (scoped, _) =
        app.get("/v1/changes?dataset=ods.a").await.1["items"].as_array().map(|v| (v.clone(), ())).unwrap();
    assert_eq!(scoped.len(), 2);
}

async fn the_lineage_graph_follows_what_batches_read(app: TestApp) {
    build(&app, "ods.a", &[], 10).await;
    build(&app, "ods.x", &[], 10).await;
    build(&app, "dwd.b", &["ods.a", "ods.x"], 10).await;
    build(&app, "ads.c", &["dwd.b"], 10).await;
    build(&app, "ods.a", &[], 11).await;

    let (status, down) =
        app.get(&format!("/v1/lineage?dataset=ods.a&partition={}&direction=downstream&depth=3", enc(P))).await;
    assert_eq!(status, StatusCode::OK, "{down}");
    let names: Vec<&str> = down["nodes"].as_array().unwrap().iter().map(|n| n["dataset"].as_str().unwrap()).collect();
    assert_eq!(names, ["ods.a", "dwd.b", "ads.c"]);
    assert_eq!(down["nodes"][1]["state"], "stale_upstream");
    let first = &down["edges"][0];
    assert_eq!((first["from"]["dataset"].as_str(), first["to"]["dataset"].as_str()), (Some("ods.a"), Some("dwd.b")));
    assert_eq!((first["input_version"].clone(), first["current_version"].clone()), (json!(1), json!(2)));

    let (_, up) = app.get(&format!("/v1/lineage?dataset=ads.c&partition={}&direction=upstream", enc(P))).await;
    let names: BTreeSet<&str> =
        up["nodes"].as_array().unwrap().iter().map(|n| n["dataset"].as_str().unwrap()).collect();
    assert_eq!(names, BTreeSet::from(["ads.c", "dwd.b", "ods.a", "ods.x"]));
    let (_, one) = app.get(&format!("/v1/lineage?dataset=ads.c&partition={}&direction=upstream&depth=1", enc(P))).await;
    assert_eq!(one["nodes"].as_array().unwrap().len(), 2);
    let (status, err) = app.get(&format!("/v1/lineage?dataset=ads.c&partition={}&direction=sideways", enc(P))).await;
    assert_eq!(
        (status, err["error"]["details"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("direction"))
    );
}

/// A batch that reads the very partition it rewrites, taken out of service:
/// its new version is judged against that partition as the publish found it
/// (still invalidated), so it is stale with cause `invalidated`, not
/// `restated`; the publish clears the invalidation only after.
async fn a_batch_that_reads_the_partition_it_rewrites_is_stale_by_what_it_read(app: TestApp) {
    build(&app, "ods.a", &[], 10).await;
    let url = format!("/v1/partitions/ods.a/{}/invalidate", enc(P));
    let (status, body) = app.post(&url, &json!({"reason": "duplicates"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let body = json!({"task": "fix_a", "dataset": "ods.a", "dt": DT, "partitions": [P],
        "inputs": [{"dataset": "ods.a", "partition": P}], "allow_unready_inputs": true});
    let (status, started) = app.post("/v1/batches", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let (status, record) = app.commit(started["batch_id"].as_str().unwrap(), &clean(P, 10)).await;
    assert_eq!(status, StatusCode::OK, "{record}");

    let (status, a) = reason(&app, "ods.a").await;
    assert_eq!((status, a["reason"].as_str()), (StatusCode::NOT_FOUND, Some("stale_upstream")), "{a}");
    assert_eq!(a["invalidated_reason"], Value::Null, "{a}");
    assert_eq!(
        a["upstream"],
        json!({"dataset": "ods.a", "partition": P, "built_on_version": 1, "current_version": 2, "cause": "invalidated"})
    );
    let (items, _) = feed(&app, None, 100).await;
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["published", "invalidated", "restated", "stale"]);
    assert_eq!(items[3]["detail"]["upstream"]["cause"], "invalidated");
}
