//! History for dashboards: batch and partition listings, filtered and paged.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{enc, TestApp};
use crate::on_both_backends;

on_both_backends!(batch_history_pages_newest_first_without_gaps, partitions_list_their_standing_by_date);

/// Follows `next_cursor` to the end; returns every item.
async fn all_pages(app: &TestApp, path: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut url = path.to_owned();
    loop {
        let (status, page) = app.get(&url).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => url = format!("{path}&cursor={}", enc(c)),
            None => return items,
        }
    }
}

async fn batch_history_pages_newest_first_without_gaps(app: TestApp) {
    for day in 10..=21 {
        let dt = format!("2026-08-{day}");
        app.publish("hist", "d.hist", &dt, &format!("dt={dt}"), 100).await;
    }
    let failing = app.start_ok("other", "d.other", "2026-08-21", &["dt=2026-08-21"]).await;
    app.post(&format!("/v1/batches/{failing}/fail"), &serde_json::json!({"stage": "compute", "category": "logic"}))
        .await;

    let items = all_pages(&app, "/v1/batches?task=hist&limit=5").await;
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
    let items = all_pages(&app, "/v1/partitions?dataset=d.parts&limit=3").await;
    assert_eq!(items.len(), 21);
    assert_eq!(items[0]["partition"], "dt=2026-08-20/region=cn");
    assert_eq!(items[0]["state"], "running");
    assert_eq!(items[0]["version"], 0);
    assert_eq!(items[1]["state"], "ready");
    assert_eq!(items[1]["row_count"], 7);
    assert!(items[1]["published_at"].is_string());
    let window = all_pages(&app, "/v1/partitions?dataset=d.parts&from=2026-08-12&to=2026-08-13").await;
    assert_eq!(window.len(), 4);
    assert!(window.iter().all(|p| p["dt"] == "2026-08-12" || p["dt"] == "2026-08-13"));
}
