//! Story 6: concurrent starts get distinct, gap-free sequence numbers, and
//! overlapping partitions admit exactly one running batch — also across two
//! service instances sharing one PostgreSQL database.

use std::collections::BTreeSet;

use futures::future::join_all;
use reqwest::StatusCode;

use crate::helpers::{Backend, TestApp};
use crate::on_both_backends;

on_both_backends!(
    fifty_concurrent_starts_get_gap_free_sequence_numbers,
    overlapping_concurrent_starts_admit_exactly_one
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
    let seqs: BTreeSet<i64> = results
        .iter()
        .map(|(s, b)| {
            assert_eq!(*s, StatusCode::CREATED, "{b}");
            b["seq"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(seqs, (1..=results.len() as i64).collect::<BTreeSet<_>>(), "distinct and gap-free");
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

    let results = join_all((0..50).map(|i| {
        let app = if i % 2 == 0 { &a } else { &b };
        async move { app.start("other_task", "ods.orders", "2026-08-25", &["dt=2026-08-25"]).await }
    }))
    .await;
    assert_exactly_one(&results);
}
