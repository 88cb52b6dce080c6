//! SIGKILL in the middle of a stream of commits loses no published version
//! and leaves no half-written batch. The real binary is started, killed with
//! SIGKILL while four clients start and commit batches, and restarted on the
//! same database; then every acknowledged commit must still be published and
//! every batch must be whole.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{clean, enc, Backend, TestDb};

struct Server {
    child: Child,
    base: String,
}

impl Server {
    async fn start(db: &TestDb) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(env!("CARGO_BIN_EXE_batchgate"))
            .args(["serve", "--db", &db.url, "--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn batchgate");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while reqwest::get(format!("{base}/healthz")).await.map(|r| r.status() != StatusCode::OK).unwrap_or(true) {
            assert!(Instant::now() < deadline, "batchgate did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self { child, base }
    }

    /// SIGKILL: no shutdown hook runs.
    fn kill(self) {}
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn post(client: &reqwest::Client, url: String, body: Value) -> Option<(StatusCode, Value)> {
    let resp = client.post(url).json(&body).send().await.ok()?;
    let status = resp.status();
    Some((status, resp.json().await.ok()?))
}

async fn killed_mid_stream_loses_nothing(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let server = Server::start(&db).await;
    let client = reqwest::Client::new();
    // batch id → the version its commit was acknowledged with
    let acknowledged: Arc<Mutex<BTreeMap<String, i64>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..4 {
        let (client, base, acked) = (client.clone(), server.base.clone(), acknowledged.clone());
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let p = format!("dt=2026-08-24/w={w}/n={i}");
                let start = serde_json::json!({"task": format!("crash_w{w}"), "dataset": "d.crash", "dt": "2026-08-24", "partitions": [p]});
                let Some((StatusCode::CREATED, started)) = post(&client, format!("{base}/v1/batches"), start).await else { return };
                let id = started["batch_id"].as_str().unwrap().to_owned();
                match post(&client, format!("{base}/v1/batches/{id}/commit"), clean(&p, 10)).await {
                    Some((StatusCode::OK, rec)) => {
                        acked.lock().unwrap().insert(id, rec["partitions"][0]["version"].as_i64().unwrap());
                    }
                    _ => return,
                }
            }
        }));
    }
    // Let a stream build up, then kill without warning.
    let deadline = Instant::now() + Duration::from_secs(20);
    while acknowledged.lock().unwrap().len() < 40 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill();
    for w in writers {
        w.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() >= 40, "the stream was running when the process died");

    let server = Server::start(&db).await;
    for (id, version) in &acknowledged {
        let rec: Value =
            client.get(format!("{}/v1/batches/{id}", server.base)).send().await.unwrap().json().await.unwrap();
        assert_eq!(rec["state"], "published", "acknowledged commit {id} lost: {rec}");
        assert_eq!(rec["partitions"][0]["version"], *version);
        let p = rec["partitions"][0]["partition"].as_str().unwrap();
        let ready =
            client.get(format!("{}/ready?dataset=d.crash&partition={}", server.base, enc(p))).send().await.unwrap();
        assert_eq!(ready.status(), StatusCode::OK, "{id} is not ready after the restart");
    }
    // No batch is half-written: each batch's partitions agree with the batch,
    // and each partition's standing agrees with its batch.
    let mut cursor = String::new();
    let mut seen = 0;
    loop {
        let page: Value = client
            .get(format!("{}/v1/batches?dataset=d.crash&limit=500{cursor}", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for b in page["items"].as_array().unwrap() {
            seen += 1;
            let state = b["state"].as_str().unwrap();
            assert!(state == "published" || state == "running", "{b}");
            for p in b["partitions"].as_array().unwrap() {
                assert_eq!(p["status"], state, "batch and task_produce_log disagree: {b}");
                assert_eq!(p["version"].is_i64(), state == "published", "{b}");
                assert_eq!(p["row_count"].is_i64(), state == "published", "counts without a decision: {b}");
            }
            let p = b["partitions"][0]["partition"].as_str().unwrap();
            let (status, want) =
                if state == "published" { (StatusCode::OK, true) } else { (StatusCode::NOT_FOUND, false) };
            let r =
                client.get(format!("{}/ready?dataset=d.crash&partition={}", server.base, enc(p))).send().await.unwrap();
            assert_eq!(r.status(), status, "partition of {} answers {} (ready {want})", b["batch_id"], r.status());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={}", enc(c)),
            None => break,
        }
    }
    assert!(seen >= acknowledged.len());
    server.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigkill_mid_stream_loses_no_published_version() {
    killed_mid_stream_loses_nothing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sigkill_mid_stream_loses_no_published_version() {
    killed_mid_stream_loses_nothing(Backend::Postgres).await;
}
