//! The log of the real binary: with `--log-format json`, a rejection (and a
//! failure) leaves one decision line with the batch id, dataset, partitions, actor, request
//! id and the failed checks (observed against expected); requests are logged
//! at info with their route template, `/ready` only at debug; and no colour
//! codes go into a pipe, in either format.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{Backend, TestDb};

struct Server {
    child: Option<Child>,
    base: String,
}

impl Server {
    async fn start(db: &TestDb, extra: &[&str]) -> Self {
        Self::start_with_env(db, extra, &[]).await
    }

    async fn start_with_env(db: &TestDb, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(env!("CARGO_BIN_EXE_batchgate"))
            .args(["serve", "--db", &db.url, "--listen", &format!("127.0.0.1:{port}"), "--scan-interval", "0s"])
            .args(extra)
            .env_remove("RUST_LOG")
            .env_remove("BATCHGATE_LOG_FORMAT")
            .env_remove("BATCHGATE_BOOTSTRAP_TOKEN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn batchgate");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while reqwest::get(format!("{base}/healthz")).await.map(|r| r.status() != StatusCode::OK).unwrap_or(true) {
            assert!(Instant::now() < deadline, "batchgate did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self { child: Some(child), base }
    }

    /// Stops the server and returns what it wrote to stdout and stderr.
    fn output(mut self) -> String {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts a batch and commits evidence that fails `rows_match_written`,
/// sending `request_id` with the commit; returns the batch id.
async fn reject(base: &str, request_id: &str) -> String {
    reject_as(base, request_id, None).await
}

/// [`reject`], sending `token` as a bearer token.
async fn reject_as(base: &str, request_id: &str, token: Option<&str>) -> String {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(t) = token {
        headers.insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    let client = reqwest::Client::builder().default_headers(headers).build().unwrap();
    let start = json!({"task": "t", "dataset": "d.logged", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]});
    let resp = client.post(format!("{base}/v1/batches")).json(&start).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let id = resp.json::<Value>().await.unwrap()["batch_id"].as_str().unwrap().to_owned();
    let evidence =
        json!({"marker": "m", "partitions": [{"partition": "dt=2026-08-24", "rows_written": 100, "row_count": 90}]});
    let resp = client
        .post(format!("{base}/v1/batches/{id}/commit"))
        .header("x-request-id", request_id)
        .json(&evidence)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let ready = client.get(format!("{base}/ready?dataset=d.logged&partition=dt%3D2026-08-24")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::NOT_FOUND, "{:?}", ready.text().await);
    id
}

/// Starts a batch and reports it failed at the write stage; returns its id.
async fn fail(base: &str) -> String {
    let client = reqwest::Client::new();
    let start = json!({"task": "t", "dataset": "d.logged", "dt": "2026-08-25", "partitions": ["dt=2026-08-25"]});
    let resp = client.post(format!("{base}/v1/batches")).json(&start).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let id = resp.json::<Value>().await.unwrap()["batch_id"].as_str().unwrap().to_owned();
    let report = json!({"stage": "write", "category": "data", "message": "disk full"});
    let resp = client.post(format!("{base}/v1/batches/{id}/fail")).json(&report).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_leaves_a_json_decision_line_with_its_fields() {
    let db = TestDb::create(Backend::Sqlite).await.expect("SQLite is always available");
    let server = Server::start(&db, &["--log-format", "json"]).await;
    let id = reject(&server.base, "req-rejection-1").await;
    let failed_id = fail(&server.base).await;
    let log = server.output();

    assert!(!log.contains('\u{1b}'), "no colour codes into a pipe:\n{log}");
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect();
    let decision = lines
        .iter()
        .find(|l| l["message"] == "batch rejected")
        .unwrap_or_else(|| panic!("no decision line in:\n{log}"));
    assert_eq!(decision["level"], "INFO");
    assert_eq!(decision["batch_id"], id.as_str());
    assert_eq!(decision["dataset"], "d.logged");
    assert_eq!(decision["partitions"], "dt=2026-08-24");
    assert_eq!(decision["state"], "rejected");
    assert_eq!(decision["tier"], "standard");
    assert_eq!(decision["actor"], "anonymous");
    assert_eq!(decision["request_id"], "req-rejection-1");
    let failed: Value = serde_json::from_str(decision["failed_checks"].as_str().expect("failed_checks")).unwrap();
    let rows = failed
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "rows_match_written")
        .unwrap_or_else(|| panic!("rows_match_written in {failed}"));
    assert_eq!(rows["observed"], 90, "{rows}");
    assert_eq!(rows["expected"], 100, "{rows}");

    let failure =
        lines.iter().find(|l| l["message"] == "batch failed").unwrap_or_else(|| panic!("no failure line in:\n{log}"));
    assert_eq!(failure["batch_id"], failed_id.as_str());
    assert_eq!((&failure["stage"], &failure["category"]), (&json!("write"), &json!("data")));
    assert_eq!(failure["partitions"], "dt=2026-08-25");
    assert!(failure["request_id"].as_str().is_some_and(|r| !r.is_empty()), "a generated request id: {failure}");

    let commit = lines
        .iter()
        .find(|l| l["message"] == "request" && l["route"] == "/v1/batches/{batch_id}/commit")
        .unwrap_or_else(|| panic!("no request line for the commit in:\n{log}"));
    assert_eq!(commit["level"], "INFO");
    assert_eq!(commit["status"], 422);
    assert!(commit["duration_ms"].as_f64().is_some(), "{commit}");
    assert!(
        !lines.iter().any(|l| l["message"] == "request" && l["route"] == "/ready"),
        "/ready is logged at debug only, not at the default info:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_into_a_pipe_carry_no_colour_codes() {
    let db = TestDb::create(Backend::Sqlite).await.expect("SQLite is always available");
    let server = Server::start(&db, &[]).await;
    let id = reject(&server.base, "req-text-1").await;
    let log = server.output();
    assert!(!log.contains('\u{1b}'), "no colour codes into a pipe:\n{log}");
    let line = log.lines().find(|l| l.contains("batch rejected")).unwrap_or_else(|| panic!("no decision in:\n{log}"));
    for field in [
        format!("batch_id={id}"),
        "dataset=d.logged".into(),
        "request_id=\"req-text-1\"".into(),
        "actor=anonymous".into(),
    ] {
        assert!(line.contains(&field), "{field} in {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_the_decision_names_the_authenticated_actor() {
    let db = TestDb::create(Backend::Sqlite).await.expect("SQLite is always available");
    let token = "bootstrap-secret-for-the-log-test";
    let env = [("BATCHGATE_BOOTSTRAP_TOKEN", token)];
    let server = Server::start_with_env(&db, &["--log-format", "json", "--auth", "required"], &env).await;
    let id = reject_as(&server.base, "req-auth-1", Some(token)).await;
    let log = server.output();
    let decision = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"] == "batch rejected")
        .unwrap_or_else(|| panic!("no decision line in:\n{log}"));
    assert_eq!(decision["batch_id"], id.as_str());
    assert_eq!(decision["actor"], "bootstrap", "{decision}");
    assert_eq!(decision["request_id"], "req-auth-1");
    assert!(!log.contains(token), "the token never reaches the log");
}

/// Published, rejected, failed and abandoned: each decision leaves exactly
/// one info line naming its batch, inside the span of the store operation
/// that took it (`#[instrument]`: the operation and the batch id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_leaves_one_info_line_inside_its_store_span() {
    let db = TestDb::create(Backend::Sqlite).await.expect("SQLite is always available");
    let server = Server::start(&db, &["--log-format", "json"]).await;
    let base = &server.base;
    let client = reqwest::Client::new();
    let start = |dt: &str, lease: u64| json!({"task": "t", "dataset": "d.decided", "dt": dt, "partitions": [format!("dt={dt}")], "lease_seconds": lease});
    let started = |resp: reqwest::Response| async move {
        assert_eq!(resp.status(), StatusCode::CREATED);
        resp.json::<Value>().await.unwrap()["batch_id"].as_str().unwrap().to_owned()
    };

    let published =
        started(client.post(format!("{base}/v1/batches")).json(&start("2026-08-20", 3600)).send().await.unwrap()).await;
    let clean =
        json!({"marker": "m", "partitions": [{"partition": "dt=2026-08-20", "rows_written": 5, "row_count": 5}]});
    let resp = client.post(format!("{base}/v1/batches/{published}/commit")).json(&clean).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let rejected = reject(base, "req-every-1").await;
    let failed = fail(base).await;
    // A lease of one second, not renewed: the next start on the partition abandons it.
    let abandoned =
        started(client.post(format!("{base}/v1/batches")).json(&start("2026-08-21", 1)).send().await.unwrap()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let newer =
        started(client.post(format!("{base}/v1/batches")).json(&start("2026-08-21", 3600)).send().await.unwrap()).await;
    let log = server.output();

    let lines: Vec<Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    for (message, id, op) in [
        ("batch published", &published, "commit_batch"),
        ("batch rejected", &rejected, "commit_batch"),
        ("batch failed", &failed, "fail_batch"),
        ("batch abandoned: its lease expired", &abandoned, "start_batch"),
    ] {
        let found: Vec<&Value> =
            lines.iter().filter(|l| l["message"] == message && l["batch_id"] == id.as_str()).collect();
        assert_eq!(found.len(), 1, "one {message:?} line for {id} in:\n{log}");
        let line = found[0];
        assert_eq!(line["level"], "INFO", "{line}");
        assert_eq!(line["target"], "batchgate::decision", "{line}");
        let spans = line["spans"].as_array().unwrap_or_else(|| panic!("spans in {line}"));
        let span = spans.iter().find(|s| s["name"] == op).unwrap_or_else(|| panic!("inside {op}: {line}"));
        if op != "start_batch" {
            assert_eq!(span["batch_id"], id.as_str(), "{line}");
        } else {
            assert_eq!(span["dataset"], "d.decided", "{line}");
        }
    }
    let abandon = lines.iter().find(|l| l["message"] == "batch abandoned: its lease expired").unwrap();
    assert_eq!(abandon["superseded_by"], newer.as_str(), "{abandon}");
}
