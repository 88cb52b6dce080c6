//! Story 6: concurrent starts get distinct, gap-free sequence numbers, and
//! overlapping partitions admit exactly one running batch — also across two
//! service instances sharing one PostgreSQL database.

use std::collections::BTreeSet;

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{clean, Backend, TestApp};
use crate::on_both_backends;

on_both_backends!(
    fifty_concurrent_starts_get_gap_free_sequence_numbers,
    one_task_starting_on_two_datasets_at_once_numbers_its_batches_gap_free,
    overlapping_concurrent_starts_admit_exactly_one,
    concurrent_cycles_number_batches_and_the_feed_gap_free,
    downstream_commits_racing_an_upstream_restatement_end_stale
);

/// Fires `n` starts at once, alternating between the given instances.
async fn fire(
    apps: &[&TestApp],
    n: usize,
    partition: impl Fn(usize) -> String,
) -> Vec<(StatusCode, serde_json::Value)> {
    join_all((0..n).map(|i| {
        let app = apps[i % apps.len()];
        let p = partition(i);
        async move { app.start("load_orders", "ods.orders", "2026-08-24", &[&p]).await }
    }))
    .await
}

fn assert_gap_free(results: &[(StatusCode, serde_json::Value)]) {
    assert_numbered_from(results, 1);
}

/// Every start was created, with distinct numbers `first..` and no gap.
fn assert_numbered_from(results: &[(StatusCode, serde_json::Value)], first: i64) {
    let seqs: BTreeSet<i64> = results
        .iter()
        .map(|(s, b)| {
            assert_eq!(*s, StatusCode::CREATED, "{b}");
            b["seq"].as_i64().unwrap()
        })
        .collect();
    let last = first + results.len() as i64 - 1;
    assert_eq!(seqs, (first..=last).collect::<BTreeSet<_>>(), "distinct and gap-free");
    let ids: BTreeSet<&str> = results.iter().map(|(_, b)| b["batch_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), results.len());
}

fn assert_exactly_one(results: &[(StatusCode, serde_json::Value)]) {
    let created = results.iter().filter(|(s, _)| *s == StatusCode::CREATED).count();
    assert_eq!(created, 1, "exactly one start wins");
    for (s, b) in results.iter().filter(|(s, _)| *s != StatusCode::CREATED) {
        assert_eq!(*s, StatusCode::CONFLICT, "{b}");
        assert_eq!(b["error"]["code"], "batch_in_progress");
    }
}

async fn fifty_concurrent_starts_get_gap_free_sequence_numbers(app: TestApp) {
    let results = fire(&[&app], 50, |i| format!("dt=2026-08-24/shard={i}")).await;
    assert_gap_free(&results);
}

/// Starts of one task and date, alternating between two datasets: the
/// writers of different datasets do not wait for each other, but the
/// task's batches of the date are still numbered one at a time.
async fn two_datasets_at_once(apps: &[&TestApp], n: usize) -> Vec<(StatusCode, serde_json::Value)> {
    join_all((0..n).map(|i| {
        let app = apps[i % apps.len()];
        let dataset = if i % 4 < 2 { "ods.orders" } else { "ods.refunds" };
        let p = format!("dt=2026-08-24/part={i}");
        async move { app.start("load_orders", dataset, "2026-08-24", &[&p]).await }
    }))
    .await
}

async fn one_task_starting_on_two_datasets_at_once_numbers_its_batches_gap_free(app: TestApp) {
    assert_gap_free(&two_datasets_at_once(&[&app], 50).await);
}

async fn overlapping_concurrent_starts_admit_exactly_one(app: TestApp) {
    let results = fire(&[&app], 50, |_| "dt=2026-08-24".into()).await;
    assert_exactly_one(&results);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_instances_share_one_sequence_and_one_lock() {
    let Some(a) = TestApp::spawn(Backend::Postgres).await else {
        return;
    };
    let b = a.replica().await;
    let results = fire(&[&a, &b], 50, |i| format!("dt=2026-08-24/shard={i}")).await;
    assert_gap_free(&results);
    // Numbered after the first 50.
    assert_numbered_from(&two_datasets_at_once(&[&a, &b], 50).await, 51);

    let results = join_all((0..50).map(|i| {
        let app = if i % 2 == 0 { &a } else { &b };
        async move { app.start("other_task", "ods.orders", "2026-08-25", &["dt=2026-08-25"]).await }
    }))
    .await;
    assert_exactly_one(&results);
}

/// Every change in the feed after `cursor` (`None`: from the start), in the
/// order a reader paging through it gets them.
async fn read_feed(app: &TestApp, mut cursor: Option<String>) -> (Vec<Value>, Option<String>) {
    let mut items = Vec::new();
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/changes?limit=1000&after={}", crate::helpers::enc(c)),
            None => "/v1/changes?limit=1000".to_owned(),
        };
        let (status, page) = app.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let got = page["items"].as_array().unwrap().clone();
        cursor = page["next_cursor"].as_str().map(str::to_owned).or(cursor);
        if got.is_empty() {
            return (items, cursor);
        }
        items.extend(got);
    }
}

/// Start+commit cycles from many clients at once, on distinct datasets and
/// on one dataset: batch numbers stay unique and gap-free per task and date,
/// every publish is in the feed once, and a reader polling the feed while
/// they commit sees exactly what a reader after them sees, in the same
/// order (it never skipped a change that committed behind a later one).
async fn concurrent_cycles_number_batches_and_the_feed_gap_free(app: TestApp) {
    const CLIENTS: usize = 8;
    const CYCLES: usize = 6;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let done = done.clone();
        let app = &app;
        async move {
            let (mut seen, mut cursor) = (Vec::new(), None);
            loop {
                let last = done.load(std::sync::atomic::Ordering::SeqCst);
                let (items, next) = read_feed(app, cursor).await;
                seen.extend(items);
                cursor = next;
                if last {
                    return seen;
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        }
    };
    let writers = join_all((0..CLIENTS).map(|c| {
        let app = &app;
        async move {
            let mut ids = Vec::new();
            for n in 0..CYCLES {
                // Even clients each on a dataset of their own; odd ones share
                // one dataset, each on partitions of its own.
                let (dataset, partition) = if c % 2 == 0 {
                    (format!("ods.c{c}"), format!("dt=2026-08-{:02}", n + 1))
                } else {
                    ("ods.shared".to_owned(), format!("dt=2026-08-{:02}/shard={c}", n + 1))
                };
                let (status, started) = app.start("load_all", &dataset, "2026-08-24", &[&partition]).await;
                assert_eq!(status, StatusCode::CREATED, "{started}");
                let id = started["batch_id"].as_str().unwrap().to_owned();
                let (status, body) = app.commit(&id, &clean(&partition, 10)).await;
                assert_eq!(status, StatusCode::OK, "{body}");
                assert_eq!(body["state"], "published", "{body}");
                ids.push((started["seq"].as_i64().unwrap(), id));
            }
            ids
        }
    }));
    let (seen, written) = futures::join!(poller, async {
        let written = writers.await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        written
    });
    // One task, one date: CLIENTS × CYCLES distinct numbers from 1, no gap.
    let seqs: BTreeSet<i64> = written.iter().flatten().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=(CLIENTS * CYCLES) as i64).collect::<BTreeSet<_>>(), "distinct and gap-free");
    let ids: BTreeSet<&str> = written.iter().flatten().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids.len(), CLIENTS * CYCLES);

    let (all, _) = read_feed(&app, None).await;
    let cursors = |items: &[Value]| items.iter().map(|i| i["cursor"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    assert_eq!(cursors(&seen), cursors(&all), "the polling reader saw the feed as it ends, in order");
    let published: Vec<&str> =
        all.iter().filter(|i| i["kind"] == "published").map(|i| i["batch_id"].as_str().unwrap()).collect();
    assert_eq!(published.len(), CLIENTS * CYCLES, "every publish once");
    assert_eq!(published.iter().copied().collect::<BTreeSet<_>>(), ids);
}

/// Downstream batches commit while their upstream partition is restated:
/// whichever commits first, every downstream version that read an older
/// upstream version ends stale (the restatement marks the ones published
/// before it; a commit after it finds its input moved on).
async fn downstream_commits_racing_an_upstream_restatement_end_stale(app: TestApp) {
    const P: &str = "dt=2026-08-24";
    const DOWNSTREAM: usize = 8;
    let app = &app;
    app.publish("load_up", "ods.up", "2026-08-24", P, 10).await;
    for round in 0..3 {
        // Every downstream batch starts reading the current upstream version.
        let mut started = Vec::new();
        for d in 0..DOWNSTREAM {
            let body = json!({"task": format!("build_d{d}"), "dataset": format!("dm.d{d}"), "dt": "2026-08-24",
                "partitions": [P], "inputs": [{"dataset": "ods.up", "partition": P}]});
            let (status, b) = app.post("/v1/batches", &body).await;
            assert_eq!(status, StatusCode::CREATED, "{b}");
            started.push(b["batch_id"].as_str().unwrap().to_owned());
        }
        let restate = async {
            app.publish("load_up", "ods.up", "2026-08-24", P, 10 + round).await;
        };
        let commits = join_all(started.iter().map(|id| async move {
            let (status, b) = app.commit(id, &clean(P, 5)).await;
            assert_eq!(status, StatusCode::OK, "{b}");
        }));
        futures::join!(restate, commits);

        let up: i64 = app.sql_count("SELECT version FROM partitions WHERE dataset = 'ods.up'").await;
        let rows = app
            .sql_rows(
                "SELECT d.dataset, CAST(i.input_version AS TEXT), CASE WHEN d.stale_upstream IS NULL THEN 'fresh' ELSE 'stale' END \
                 FROM partitions d JOIN batch_inputs i ON i.batch_id = d.published_batch_id \
                 WHERE d.dataset LIKE 'dm.%' ORDER BY d.dataset",
            )
            .await;
        assert_eq!(rows.len(), DOWNSTREAM);
        for r in rows {
            let read: i64 = r[1].as_deref().unwrap().parse().unwrap();
            let want = if read < up { "stale" } else { "fresh" };
            assert_eq!(r[2].as_deref(), Some(want), "{:?} read version {read} of ods.up, now at {up}", r[0]);
        }
    }
}
