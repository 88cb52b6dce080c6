//! Story 7: a long-poll answers within 200 ms of the publish, on the same
//! instance and across instances sharing PostgreSQL.

use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::helpers::{clean, Backend, TestApp};
use crate::metrics::scrape;
use crate::on_both_backends;

on_both_backends!(
    a_long_poll_answers_soon_after_the_publish,
    a_long_poll_times_out_with_not_ready,
    a_long_poll_over_several_partitions_waits_for_all,
    a_long_poll_until_ready_or_rejected_returns_on_a_rejection,
    a_long_poll_that_times_out_after_a_start_says_running,
    long_polls_do_not_go_to_the_database_while_they_wait,
);

/// Readiness lookups so far (cache hits and misses): each time a long-poll
/// looks at its partitions adds one per partition.
async fn lookups(app: &TestApp) -> f64 {
    let s = scrape(app).await;
    s.value("batchgate_ready_cache_hits_total", &[]) + s.value("batchgate_ready_cache_misses_total", &[])
}

/// Times the service went to the database so far, reads and writes.
async fn db_operations(app: &TestApp) -> f64 {
    const OPERATIONS: &str = "batchgate_db_operations_total";
    let s = scrape(app).await;
    let mut kinds = s.label_values(OPERATIONS, "kind");
    kinds.sort();
    assert_eq!(kinds, ["read", "write"], "both series are exported");
    s.value(OPERATIONS, &[("kind", "read")]) + s.value(OPERATIONS, &[("kind", "write")])
}

/// `GET path` (a long-poll) from a task of its own: its status and body.
fn wait_in_background(app: &TestApp, path: &str) -> tokio::task::JoinHandle<(StatusCode, serde_json::Value)> {
    let (client, url) = (app.client.clone(), format!("{}{path}", app.base));
    tokio::spawn(async move {
        let r = client.get(url).send().await.unwrap();
        (r.status(), r.json::<serde_json::Value>().await.unwrap())
    })
}

/// Starts a waiter on `waiter`, publishes through `writer`, and returns how
/// long after the commit's response the waiter answered.
async fn publish_while_waiting(waiter: &TestApp, writer: &TestApp) -> Duration {
    let id = writer.start_ok("t", "d.wait", "2026-08-24", &["dt=2026-08-24"]).await;
    let url = format!("{}/ready?dataset=d.wait&partition=dt%3D2026-08-24&wait=20", waiter.base);
    let client = waiter.client.clone();
    let poll = tokio::spawn(async move {
        let resp = client.get(url).send().await.unwrap();
        let answered = Instant::now();
        (resp.status(), resp.json::<serde_json::Value>().await.unwrap(), answered)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "the waiter must still be waiting before the publish");
    let (status, _) = writer.commit(&id, &clean("dt=2026-08-24", 10)).await;
    let committed = Instant::now();
    assert_eq!(status, StatusCode::OK);
    let (status, body, answered) =
        tokio::time::timeout(Duration::from_secs(5), poll).await.expect("waiter answered").unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["partitions"][0]["version"], 1);
    answered.saturating_duration_since(committed)
}

async fn a_long_poll_answers_soon_after_the_publish(app: TestApp) {
    let lag = publish_while_waiting(&app, &app).await;
    assert!(lag < Duration::from_millis(200), "answered {lag:?} after the publish");
}

async fn a_long_poll_times_out_with_not_ready(app: TestApp) {
    app.start_ok("t", "d.wait", "2026-08-24", &["dt=2026-08-24"]).await;
    let t0 = Instant::now();
    let (status, body) = app.get("/ready?dataset=d.wait&partition=dt%3D2026-08-24&wait=1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["reason"], "running");
    assert!(t0.elapsed() >= Duration::from_millis(950), "returned after {:?}", t0.elapsed());
}

async fn a_long_poll_over_several_partitions_waits_for_all(app: TestApp) {
    app.publish("t", "d.multi", "2026-08-24", "dt=2026-08-24/r=a", 5).await;
    let id = app.start_ok("t", "d.multi", "2026-08-24", &["dt=2026-08-24/r=b"]).await;
    let url = format!(
        "{}/ready?dataset=d.multi&partition=dt%3D2026-08-24%2Fr%3Da&partition=dt%3D2026-08-24%2Fr%3Db&wait=20",
        app.base
    );
    let client = app.client.clone();
    let poll = tokio::spawn(async move { client.get(url).send().await.unwrap().status() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "one of two partitions is not ready yet");
    app.commit(&id, &clean("dt=2026-08-24/r=b", 5)).await;
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), poll).await.unwrap().unwrap(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_one_instance_hears_a_publish_through_another() {
    let Some(writer) = TestApp::spawn(Backend::Postgres).await else {
        return;
    };
    let waiter = writer.replica().await;
    // Warm the waiter's cache with the not-ready answer first: the publish
    // must invalidate it across instances.
    let (status, _) = waiter.ready("d.wait", &["dt=2026-08-24"]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let lag = publish_while_waiting(&waiter, &writer).await;
    assert!(lag < Duration::from_millis(200), "answered {lag:?} after the publish");
    let (status, _) = waiter.ready("d.wait", &["dt=2026-08-24"]).await;
    assert_eq!(status, StatusCode::OK, "the other instance's cache was invalidated");
}

async fn a_long_poll_until_ready_or_rejected_returns_on_a_rejection(app: TestApp) {
    let id = app.start_ok("t", "d.rej", "2026-08-24", &["dt=2026-08-24"]).await;
    let poll =
        wait_in_background(&app, "/ready?dataset=d.rej&partition=dt%3D2026-08-24&wait=20&until=ready_or_rejected");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished());
    let bad = serde_json::json!({"marker": "m", "partitions": [{"partition": "dt=2026-08-24", "rows_written": 1, "row_count": 2}]});
    assert_eq!(app.commit(&id, &bad).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), poll).await.expect("answered early").unwrap();
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("rejected")));
}

/// Read-your-writes across replicas: once one instance has answered a
/// change, another instance's (cached) `/ready` never answers from before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_through_one_instance_is_seen_at_once_on_another() {
    let Some(writer) = TestApp::spawn(Backend::Postgres).await else { return };
    let reader = writer.replica().await;
    for round in 0..30 {
        let dt = format!("2026-07-{:02}", round + 1);
        let p = format!("dt={dt}");
        assert_eq!(reader.ready("d.ryw", &[&p]).await.0, StatusCode::NOT_FOUND, "warms the reader's cache");
        let id = writer.start_ok("t", "d.ryw", &dt, &[&p]).await;
        let (_, body) = reader.ready("d.ryw", &[&p]).await;
        assert_eq!(body["reason"], "running", "round {round}: the reader answered from before the start");
        assert_eq!(writer.commit(&id, &clean(&p, 10)).await.0, StatusCode::OK);
        let (status, body) = reader.ready("d.ryw", &[&p]).await;
        assert_eq!(status, StatusCode::OK, "round {round}: the reader answered from before the commit: {body}");
    }
}

/// A start makes its partitions `running`, which answers no long-poll: the
/// waiters of a partition being produced are woken once, by the publish,
/// not also by the start to find it still not ready. On PostgreSQL every
/// replica, the writing one included, hears the start through `NOTIFY`,
/// which says that it wakes nobody.
async fn a_start_wakes_no_long_poll_on_any_instance(instances: &[&TestApp]) {
    let writer = instances[0];
    let polls: Vec<_> = instances
        .iter()
        .map(|app| {
            let url = format!("{}/ready?dataset=d.quiet&partition=dt%3D2026-08-24&wait=20", app.base);
            let client = app.client.clone();
            tokio::spawn(async move { client.get(url).send().await.unwrap().status() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(polls.iter().all(|p| !p.is_finished()), "no batch yet: the long-polls wait");
    let mut looked = Vec::new();
    for app in instances {
        looked.push(lookups(app).await);
    }
    let id = writer.start_ok("t", "d.quiet", "2026-08-24", &["dt=2026-08-24"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (i, app) in instances.iter().enumerate() {
        assert_eq!(lookups(app).await, looked[i], "the start did not make instance {i}'s waiter look again");
    }
    assert!(polls.iter().all(|p| !p.is_finished()));
    writer.commit(&id, &clean("dt=2026-08-24", 10)).await;
    for poll in polls {
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), poll).await.unwrap().unwrap(), StatusCode::OK);
    }
    for (i, app) in instances.iter().enumerate() {
        assert_eq!(lookups(app).await, looked[i] + 1.0, "the publish woke instance {i}'s waiter to one look");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_wakes_no_long_poll() {
    let app = TestApp::spawn(Backend::Sqlite).await.expect("SQLite always runs");
    a_start_wakes_no_long_poll_on_any_instance(&[&app]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_wakes_no_long_poll_on_any_postgres_replica() {
    let Some(writer) = TestApp::spawn(Backend::Postgres).await else { return };
    let reader = writer.replica().await;
    a_start_wakes_no_long_poll_on_any_instance(&[&writer, &reader]).await;
}

/// Not woken by a start, a long-poll still answers its deadline with the
/// partition's standing then, not the one it found when it began.
async fn a_long_poll_that_times_out_after_a_start_says_running(app: TestApp) {
    // Long enough that the start lands before the deadline on a loaded
    // machine (with wait=1, a start slower than 0.7 s would leave it `no_batch`).
    let poll = wait_in_background(&app, "/ready?dataset=d.late&partition=dt%3D2026-08-24&wait=4");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished());
    app.start_ok("t", "d.late", "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, body) = tokio::time::timeout(Duration::from_secs(15), poll).await.expect("answered").unwrap();
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("running")), "{body}");
}

/// Waiting costs no query: the waiters are woken by the publish, not by
/// looking again (issue 14). The test service runs no background scan.
async fn long_polls_do_not_go_to_the_database_while_they_wait(app: TestApp) {
    let id = app.start_ok("t", "d.idle", "2026-08-24", &["dt=2026-08-24"]).await;
    let polls: Vec<_> =
        (0..5).map(|_| wait_in_background(&app, "/ready?dataset=d.idle&partition=dt%3D2026-08-24&wait=30")).collect();
    let waiting = || async { scrape(&app).await.value("batchgate_longpoll_waiters", &[]) };
    let began = Instant::now();
    while waiting().await < 5.0 {
        assert!(began.elapsed() < Duration::from_secs(10), "the five long-polls did not all start waiting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A scrape reads the database gauges: what one costs is measured first.
    let (a, b) = (db_operations(&app).await, db_operations(&app).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let c = db_operations(&app).await;
    assert!(b - a >= 1.0, "a scrape reads the gauges, and is counted");
    assert_eq!(c - b, b - a, "while five long-polls waited, the service went to the database only for the scrape");

    let (status, _) = app.commit(&id, &clean("dt=2026-08-24", 10)).await;
    assert_eq!(status, StatusCode::OK);
    for poll in polls {
        let (status, body) = tokio::time::timeout(Duration::from_secs(10), poll).await.expect("answered").unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}
