//! History for dashboards: batch and partition listings, filtered and paged.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, enc, TestApp};
use crate::on_both_backends;

on_both_backends!(
    batch_history_pages_newest_first_without_gaps,
    partitions_list_their_standing_by_date,
    a_listed_batch_is_its_record_without_events_byte_for_byte,
);

async fn batch_history_pages_newest_first_without_gaps(app: TestApp) {
    for day in 10..=21 {
        let dt = format!("2026-08-{day}");
        app.publish("hist", "d.hist", &dt, &format!("dt={dt}"), 100).await;
    }
    let failing = app.start_ok("other", "d.other", "2026-08-21", &["dt=2026-08-21"]).await;
    app.post(&format!("/v1/batches/{failing}/fail"), &serde_json::json!({"stage": "compute", "category": "logic"}))
        .await;

    let items = app.all_pages("/v1/batches?task=hist&limit=5").await;
    assert_eq!(items.len(), 12);
    let dts: Vec<&str> = items.iter().map(|b| b["dt"].as_str().unwrap()).collect();
    let mut sorted = dts.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(dts, sorted, "newest first");
    assert_eq!(items.iter().map(|b| b["batch_id"].as_str().unwrap()).collect::<BTreeSet<_>>().len(), 12, "no repeats");
    assert!(items[0].get("events").is_none(), "listings leave out the event log");

    let (_, failed) = app.get("/v1/batches?state=failed").await;
    assert_eq!(failed["items"].as_array().unwrap().len(), 1);
    assert_eq!(failed["items"][0]["batch_id"], failing.as_str());
    // Published batches are not in the state index (migration 0015): the
    // same pages, by the primary key.
    let published = app.all_pages("/v1/batches?state=published&limit=5").await;
    let ids: Vec<&str> = published.iter().map(|b| b["batch_id"].as_str().unwrap()).collect();
    let hist: Vec<&str> = items.iter().map(|b| b["batch_id"].as_str().unwrap()).collect();
    assert_eq!(ids, hist, "every published batch once, newest first");
    let (_, by_dt) = app.get("/v1/batches?dataset=d.hist&dt=2026-08-15").await;
    assert_eq!(by_dt["items"].as_array().unwrap().len(), 1);
    app.clock.advance(chrono::Duration::seconds(1));
    let now = app.clock_now();
    let (_, none) = app.get(&format!("/v1/batches?since={}", enc(&now))).await;
    assert_eq!(none["items"].as_array().unwrap().len(), 0);
    let (_, all) = app.get(&format!("/v1/batches?until={}", enc(&now))).await;
    assert_eq!(all["items"].as_array().unwrap().len(), 13);
}

async fn partitions_list_their_standing_by_date(app: TestApp) {
    for day in 10..=19 {
        let dt = format!("2026-08-{day}");
        for region in ["cn", "us"] {
            app.publish("p", "d.parts", &dt, &format!("dt={dt}/region={region}"), 7).await;
        }
    }
    app.start_ok("p", "d.parts", "2026-08-20", &["dt=2026-08-20/region=cn"]).await;
    let items = app.all_pages("/v1/partitions?dataset=d.parts&limit=3").await;
    assert_eq!(items.len(), 21);
    assert_eq!(items[0]["partition"], "dt=2026-08-20/region=cn");
    assert_eq!(items[0]["state"], "running");
    assert_eq!(items[0]["version"], 0);
    assert_eq!(items[1]["state"], "ready");
    assert_eq!(items[1]["row_count"], 7);
    assert!(items[1]["published_at"].is_string());
    let window = app.all_pages("/v1/partitions?dataset=d.parts&from=2026-08-12&to=2026-08-13").await;
    assert_eq!(window.len(), 4);
    assert!(window.iter().all(|p| p["dt"] == "2026-08-12" || p["dt"] == "2026-08-13"));
}

/// The text of each item of a `/v1/batches` page, by batch id, cut from the
/// answer's bytes: every item starts with its `batch_id`.
fn item_texts(body: &str) -> Vec<(String, &str)> {
    let page: Value = serde_json::from_str(body).expect("JSON");
    let ids: Vec<String> =
        page["items"].as_array().expect("items").iter().map(|b| b["batch_id"].as_str().unwrap().to_owned()).collect();
    let starts: Vec<usize> = ids
        .iter()
        .map(|id| body.find(&format!("{{\"batch_id\":\"{id}\",")).unwrap_or_else(|| panic!("{id} in {body}")))
        .collect();
    let end = body.rfind("],\"next_cursor\":").expect("the end of items");
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| {
            let stop = starts.get(i + 1).map_or(end, |next| next - 1);
            (id, &body[starts[i]..stop])
        })
        .collect()
}

/// A listing shows each batch as `GET /v1/batches/{id}` does, byte for
/// byte, less the events: partitions in name order with their metrics and
/// times, inputs by dataset and partition, a failure, a batch still running.
async fn a_listed_batch_is_its_record_without_events_byte_for_byte(app: TestApp) {
    const DT: &str = "2026-08-24";
    const P: &str = "dt=2026-08-24";
    app.publish("load_b", "ods.b", DT, P, 10).await;
    app.publish("load_a", "ods.a", DT, P, 10).await;
    let inputs = json!([{"dataset": "ods.b", "partition": P}, {"dataset": "ods.a", "partition": P}]);
    let parts = ["dt=2026-08-24/h=10", "dt=2026-08-24/h=01", "dt=2026-08-24/h=02"];
    let (status, started) = app
        .post(
            "/v1/batches",
            &json!({"task": "build", "dataset": "dws.x", "dt": DT, "partitions": parts, "inputs": inputs}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let id = started["batch_id"].as_str().unwrap();
    let evidence: Vec<Value> = parts
        .iter()
        .map(|p| json!({"partition": p, "rows_written": 5, "row_count": 5, "metrics": {"amount": 98765432.10, "n": 3}}))
        .collect();
    let (status, body) = app.commit(id, &json!({"marker": "m", "partitions": evidence})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let failing = app.start_ok("build", "dws.x", "2026-08-25", &["dt=2026-08-25"]).await;
    let (status, body) = app
        .post(&format!("/v1/batches/{failing}/fail"), &json!({"stage": "compute", "category": "logic", "message": "x"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    app.start_ok("build", "dws.x", "2026-08-26", &["dt=2026-08-26"]).await;
    let (status, _) = app.commit(&app.start_ok("load_c", "ods.c", DT, &[P]).await, &clean(P, 0)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "an empty partition is rejected");

    let (status, page) = app.get_bytes("/v1/batches?limit=100").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let items = item_texts(&page);
    assert_eq!(items.len(), 6);
    for (id, item) in &items {
        let (status, record) = app.get_bytes(&format!("/v1/batches/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{record}");
        let head = &item[..item.len() - 1];
        assert!(record.starts_with(head), "{id} listed as\n{item}\nread as\n{record}");
        assert!(record[head.len()..].starts_with(",\"events\":[{"), "{id}: only the events follow in {record}");
    }
    let (_, built) = items.iter().find(|(b, _)| b == id).expect("the built batch");
    let shown: Value = serde_json::from_str(built).expect("JSON");
    let names: Vec<&str> =
        shown["partitions"].as_array().unwrap().iter().map(|p| p["partition"].as_str().unwrap()).collect();
    assert_eq!(names, ["dt=2026-08-24/h=01", "dt=2026-08-24/h=02", "dt=2026-08-24/h=10"], "in name order");
    assert!(built.contains(r#""metrics":{"amount":98765432.1,"n":3.0},"version":1,"finish_time":""#), "{built}");
    let read: Vec<&str> = shown["inputs"].as_array().unwrap().iter().map(|i| i["dataset"].as_str().unwrap()).collect();
    assert_eq!(read, ["ods.a", "ods.b"], "inputs by dataset");
    assert_eq!(shown["inputs"][0]["version"], 1);
    assert!(shown["inputs"][0]["batch_id"].is_string());
}
