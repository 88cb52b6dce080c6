//! `batchgate wait`: 0 ready, 5 timed out, 6 rejected, 4 unreachable.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::{args, batchgate, closed_port_url, finish, run, sqlite_app, DT, PART};
use crate::helpers::clean;

fn wait_args(extra: &str) -> Vec<String> {
    format!("wait --dataset d.wait --partition {PART} {extra}").split_whitespace().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_0_soon_after_a_publish_made_while_it_waits() {
    let app = sqlite_app().await;
    let id = app.start_ok("t", "d.wait", DT, &[PART]).await;
    let waiter = batchgate(&app.base, wait_args("--timeout 1m")).spawn().expect("spawn wait");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, body) = app.commit(&id, &clean(PART, 10)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let committed = Instant::now();
    let (r, exited) = finish(waiter, Duration::from_secs(10)).await;

    let r = r.expect(0);
    let lag = exited - committed;
    assert!(lag < Duration::from_secs(2), "exited {lag:?} after the publish");
    r.says("waiting up to 1m for d.wait dt=2026-08-24 to be ready\n")
        .says(&format!(
            "still waiting after 0s: d.wait dt=2026-08-24 is not ready (running) on dt=2026-08-24, batch {id}\n"
        ))
        .says("d.wait dt=2026-08-24 is ready after ")
        .says(": dt=2026-08-24 version 1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_5_on_timeout_naming_the_reason() {
    let app = sqlite_app().await;
    let id = app.start_ok("t", "d.wait", DT, &[PART]).await;

    let t0 = Instant::now();
    let r = run(&app.base, wait_args("--timeout 2s")).await.expect(5);

    assert!(t0.elapsed() >= Duration::from_secs(2), "gave up after {:?}", t0.elapsed());
    r.says(&format!("timed out after 2s: d.wait dt=2026-08-24 is not ready (running) on dt=2026-08-24, batch {id}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_6_soon_after_a_rejection_with_fail_on_rejected() {
    let app = sqlite_app().await;
    let id = app.start_ok("t", "d.wait", DT, &[PART]).await;
    let waiter = batchgate(&app.base, wait_args("--timeout 1m --fail-on-rejected")).spawn().expect("spawn wait");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let bad = json!({"marker": "m", "partitions": [{"partition": PART, "rows_written": 10, "row_count": 9}]});
    let (status, body) = app.commit(&id, &bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let rejected = Instant::now();
    let (r, exited) = finish(waiter, Duration::from_secs(10)).await;

    let r = r.expect(6);
    let lag = exited - rejected;
    assert!(lag < Duration::from_secs(3), "exited {lag:?} after the rejection");
    r.says(&format!("is not ready (rejected) on dt=2026-08-24, batch {id}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fail_on_rejected_a_rejection_is_waited_out() {
    let app = sqlite_app().await;
    let id = app.start_ok("t", "d.wait", DT, &[PART]).await;
    let bad = json!({"marker": "m", "partitions": [{"partition": PART, "rows_written": 10, "row_count": 9}]});
    app.commit(&id, &bad).await;

    run(&app.base, wait_args("--timeout 1s")).await.expect(5).says("is not ready (rejected)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_by_task_and_dt_follows_the_tasks_latest_batch() {
    let app = sqlite_app().await;
    app.publish("t", "d.wait", DT, PART, 10).await;

    let line = format!("wait --task t --dt {DT} --timeout 5s");
    run(&app.base, args(&line)).await.expect(0).says("task t dt 2026-08-24 is ready after ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_retries_an_unreachable_service_then_exits_4_after_the_grace() {
    let url = closed_port_url();

    let t0 = Instant::now();
    let r = run(&url, wait_args("--timeout 1m --grace 2s")).await.expect(4);

    let took = t0.elapsed();
    assert!((Duration::from_secs(2)..Duration::from_secs(10)).contains(&took), "gave up after {took:?}");
    r.says(&format!("cannot reach batchgate at {url}/ready")).says("; retrying in 1s\n").says("giving up after ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_by_dataset_and_dt_waits_for_the_partition_dt() {
    let app = sqlite_app().await;
    app.publish("t", "d.wait", DT, PART, 10).await;

    let line = format!("wait --dataset d.wait --dt {DT} --timeout 5s");
    run(&app.base, args(&line)).await.expect(0).says("d.wait dt=2026-08-24 is ready after ");
}
