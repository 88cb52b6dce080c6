//! `batchgate batch start|commit|fail|heartbeat`.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{args, batchgate, run, run_with_stdin, sqlite_app, start, write_json, Run, DT, PART};
use crate::helpers::check;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_batch_commits_and_publishes() {
    let app = sqlite_app().await;
    let dir = tempfile::tempdir().unwrap();

    let id = start(&app, "d.cli").await;
    assert_eq!(id, "t-20260824-001");
    let stats = json!([{"partition": PART, "rows_written": 10, "row_count": 10}]);
    let stats = write_json(dir.path(), "stats.json", &stats);
    let commit = run(&app.base, ["batch", "commit", &id, "--marker", "m", "--partition-stats", &stats]).await.expect(0);

    assert_eq!(commit.stdout.trim(), "batch t-20260824-001 published: dt=2026-08-24 version 1 (10 rows)");
    let (status, body) = app.ready("d.cli", &[PART]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["partitions"][0]["batch_id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_start_option_reaches_the_batch_and_stats_may_come_on_stdin() {
    let app = sqlite_app().await;
    let line = format!(
        "batch start --task t --dataset d.cli --dt {DT} --partition {PART} --trigger backfill \
         --run-ref run-7 --lease-seconds 60 --idempotency-key k1 --json"
    );
    let mut start = args(&line);
    start.extend(["--scope-json", r#"{"timezone": "Asia/Shanghai"}"#]);
    let started = run(&app.base, &start).await.expect(0);
    let body: Value = serde_json::from_str(&started.stdout).expect("--json prints JSON");
    let id = body["batch_id"].as_str().unwrap().to_owned();
    assert_eq!(body["state"], "running");
    let replay = run(&app.base, &start).await.expect(0);
    assert_eq!(serde_json::from_str::<Value>(&replay.stdout).unwrap()["batch_id"], id.as_str());

    let stats = json!({
        "partitions": [{"partition": PART, "rows_written": 10, "row_count": 10, "metrics": {"amount": 2.5}}],
        "source": {"row_count": 10, "metrics": {"amount": 2.5}},
    });
    let line = format!("batch commit {id} --marker m --partition-stats - --json");
    let commit = run_with_stdin(&app.base, &args(&line), &stats.to_string()).await.expect(0);

    let record: Value = serde_json::from_str(&commit.stdout).expect("--json prints JSON");
    assert_eq!(record["state"], "published");
    assert_eq!(record["trigger"], "backfill");
    assert_eq!(record["run_ref"], "run-7");
    assert_eq!(record["lease_seconds"], 60);
    assert_eq!(record["idempotency_key"], "k1");
    assert_eq!(record["scope"]["timezone"], "Asia/Shanghai");
    assert_eq!(check(&record, "source_reconciliation")["status"], "pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_commit_exits_3_and_prints_the_failed_check() {
    let app = sqlite_app().await;
    let dir = tempfile::tempdir().unwrap();
    let id = start(&app, "d.cli").await;
    let stats = json!([{"partition": PART, "rows_written": 100, "row_count": 100, "distinct_keys": 97}]);
    let stats = write_json(dir.path(), "stats.json", &stats);

    let commit = run(&app.base, ["batch", "commit", &id, "--marker", "m", "--partition-stats", &stats]).await.expect(3);

    assert_eq!(commit.stdout, "");
    commit
        .says("batch t-20260824-001 rejected: 1 check failed")
        .says("\n  unique_keys dt=2026-08-24: observed 97, expected 100: ");
    let (status, body) = app.ready("d.cli", &[PART]).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("rejected")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_over_a_batch_in_progress_exits_3() {
    let app = sqlite_app().await;
    let running = start(&app, "d.cli").await;

    let line = format!("batch start --task t --dataset d.cli --dt {DT} --partition {PART}");
    let again = run(&app.base, args(&line)).await.expect(3);

    assert_eq!(again.stdout, "");
    again.says("batch_in_progress").says(&format!("batch {running} is running on dt=2026-08-24"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_and_fail_report_on_a_running_batch() {
    let app = sqlite_app().await;
    let id = start(&app, "d.cli").await;

    let beat = run(&app.base, ["batch", "heartbeat", &id]).await.expect(0);
    assert!(beat.stdout.starts_with(&format!("batch {id} leased until ")), "{}", beat.stdout);
    let line = format!("batch fail {id} --stage compute --category resource");
    let mut fail = args(&line);
    fail.extend(["--message", "executor lost"]);
    let fail = run(&app.base, fail).await.expect(0);
    assert_eq!(fail.stdout.trim(), format!("batch {id} failed at compute (resource)"));

    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(record["failure"]["message"], "executor lost");
    run(&app.base, ["batch", "heartbeat", &id]).await.expect(3).says("batch_not_running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_input_exits_2_naming_what_is_wrong() {
    let app = sqlite_app().await;
    let dir = tempfile::tempdir().unwrap();
    let id = start(&app, "d.cli").await;
    let stats = write_json(dir.path(), "ok.json", &json!([{"partition": PART, "rows_written": 1, "row_count": 1}]));
    let typo = write_json(dir.path(), "typo.json", &json!([{"partiton": PART, "rows_written": 1, "row_count": 1}]));
    let missing = dir.path().join("missing.json");
    let missing = missing.to_str().unwrap();
    let cases = [
        // refused by the service
        (
            format!("batch start --task t --dataset d.cli --dt 2026-13-01 --partition {PART}"),
            "\"2026-13-01\" is not a valid calendar date",
        ),
        (format!("batch commit t-20260824-099 --marker m --partition-stats {stats}"), "batch_not_found"),
        ("wait --dataset d.cli --partition dt --timeout 1m".into(), "invalid_partition"),
        // refused before any request
        (format!("batch commit {id} --marker m --partition-stats {typo}"), "[0].partiton: unknown field `partiton`"),
        (format!("batch commit {id} --marker m --partition-stats {missing}"), "cannot read partition stats from"),
        (format!("batch start --task t --dataset d.cli --dt {DT}"), "--partition"),
        (format!("batch fail {id} --stage writing"), "\"writing\" is not one of read, compute, write, verify"),
        (format!("batch start --task t --dataset d --dt {DT} --partition {PART} --scope-json {{"), "not valid JSON"),
        (format!("wait --dataset d.cli --partition {PART} --timeout soon"), "--timeout"),
        (format!("batch --url localhost:8080 heartbeat {id}"), "invalid service URL \"localhost:8080\""),
    ];
    for (line, says) in cases {
        let r = run(&app.base, args(&line)).await;
        assert_eq!(r.code, 2, "{line}\nstderr: {}", r.stderr);
        r.says(says);
    }
    // Nothing above touched the batch.
    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(record["state"], "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_service_exits_4() {
    let url = super::closed_port_url();

    let line = format!("batch start --task t --dataset d.cli --dt {DT} --partition {PART}");
    run(&url, args(&line)).await.expect(4).says(&format!("cannot reach batchgate at {url}/v1/batches"));
}

/// A stand-in for a proxy in front of a failing service: answers one request
/// with a 503 and hands back the request's head.
async fn failing_proxy() -> (String, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "connection closed mid-request");
            head.extend_from_slice(&buf[..n]);
        }
        let body = r#"{"error": {"code": "storage_unavailable", "message": "the database is unavailable; nothing was changed", "details": {}}}"#;
        let reply = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(reply.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&head).into_owned()
    });
    (url, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_sent_as_a_bearer_and_a_5xx_exits_4() {
    let (url, proxy) = failing_proxy().await;

    let output = batchgate(&url, ["batch", "heartbeat", "t-20260824-001"])
        .env("BATCHGATE_TOKEN", "s3cret")
        .output()
        .await
        .expect("run batchgate");
    let r = Run::from(output).expect(4);

    let head = proxy.await.unwrap().to_ascii_lowercase();
    assert!(head.starts_with("post /v1/batches/t-20260824-001/heartbeat "), "{head}");
    assert!(head.contains("\r\nauthorization: bearer s3cret\r\n"), "{head}");
    r.says("batchgate answered 503 Service Unavailable (storage_unavailable): ");
    assert!(!r.stderr.contains("s3cret"));
}
