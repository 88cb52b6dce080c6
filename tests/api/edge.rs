//! The listener against the real binary: slow and idle clients, a low file
//! limit, SIGTERM, an unreachable database at start-up.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Connection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{Backend, TestDb};
use crate::process::{Launch, Proc};

/// Reads until the server closes the connection; `None` if it is still
/// open after `within`.
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .ok()
    .map(|()| t0.elapsed())
}

async fn an_idle_flood_under_a_low_file_limit_does_not_starve_ready(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    // The file limit at 256, as in the report; then more idle sockets than that.
    let server = Proc::start(&db.url, Launch { file_limit: Some(256), ..Launch::default() }).await;
    let mut held = Vec::new();
    for i in 0..300 {
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(server.addr())).await
        else {
            break;
        };
        if i % 2 == 0 {
            // Half-open: a head that never ends.
            let _ = s.write_all(b"GET /ready?dataset=d.flood HTTP/1.1\r\nHost: x\r\n").await;
        }
        held.push(s);
    }
    assert!(held.len() >= 256, "the flood was held ({} sockets)", held.len());
    tokio::time::sleep(Duration::from_millis(300)).await;

    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    for _ in 0..3 {
        let t0 = Instant::now();
        let resp = client
            .get(format!("{}/ready?dataset=d.flood&partition=dt%3D2026-08-24", server.base))
            .send()
            .await
            .expect("/ready answers during the flood");
        let elapsed = t0.elapsed();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["reason"], "no_batch", "{body}");
        assert!(elapsed < Duration::from_secs(2), "/ready took {elapsed:?} during the flood");
    }
    let health = client.get(format!("{}/healthz", server.base)).send().await.expect("healthz answers");
    assert_eq!(health.status(), StatusCode::OK);
    let log = server.log();
    assert!(!log.contains("Too many open files"), "accept ran out of descriptors:\n{log}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_idle_flood_under_a_low_file_limit_does_not_starve_ready() {
    an_idle_flood_under_a_low_file_limit_does_not_starve_ready(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_idle_flood_under_a_low_file_limit_does_not_starve_ready() {
    an_idle_flood_under_a_low_file_limit_does_not_starve_ready(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_idle_keep_alive_connections_are_closed() {
    let db = TestDb::create(Backend::Sqlite).await.unwrap();
    let server =
        Proc::start(&db.url, Launch { env: vec![("BATCHGATE_HEADER_TIMEOUT", "1s")], ..Launch::default() }).await;

    // A head that never ends.
    let mut slow = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let closed = closed_within(&mut slow, Duration::from_secs(4)).await;
    assert!(closed.is_some_and(|d| d >= Duration::from_millis(500)), "a slow head is cut after ~1 s: {closed:?}");

    // A connection that sends nothing at all.
    let mut silent = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(4)).await.is_some(), "a silent connection is closed");

    // A keep-alive connection after its request, idle.
    let mut idle = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    assert!(
        closed_within(&mut idle, Duration::from_secs(4)).await.is_some(),
        "an idle keep-alive connection is closed"
    );
}

/// Holds the registry's write lock from outside the service, so that a
/// write is in flight (waiting for it) when SIGTERM arrives.
enum WriteLock {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl WriteLock {
    async fn take(backend: Backend, url: &str) -> Self {
        match backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
                sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut c).await.unwrap();
                WriteLock::Sqlite(c)
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                // The advisory lock every writing transaction of the service takes.
                sqlx::query("SELECT pg_advisory_lock(x'6261746368676174'::bigint)").execute(&mut c).await.unwrap();
                WriteLock::Postgres(c)
            }
        }
    }

    async fn release(self) {
        match self {
            WriteLock::Sqlite(mut c) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut c).await.unwrap();
            }
            WriteLock::Postgres(mut c) => {
                sqlx::raw_sql("SELECT pg_advisory_unlock_all()").execute(&mut c).await.unwrap();
            }
        }
    }
}

async fn sigterm_answers_long_polls_finishes_writes_and_exits(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let mut server =
        Proc::start(&db.url, Launch { env: vec![("BATCHGATE_DB_TIMEOUT", "20s")], ..Launch::default() }).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();

    // A head that never ends, and an idle keep-alive connection.
    let mut half_open = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    half_open.write_all(b"GET /ready?dataset=d.term HTTP/1.1\r\n").await.unwrap();
    let _ = client.get(format!("{}/healthz", server.base)).send().await.unwrap();
    // A long-poll.
    let poll = tokio::spawn({
        let (client, base) = (client.clone(), server.base.clone());
        async move {
            let resp = client.get(format!("{base}/ready?dataset=d.term&partition=dt%3D1&wait=120")).send().await;
            let resp = resp.expect("the long-poll is answered");
            (resp.status(), resp.json::<Value>().await.unwrap(), Instant::now())
        }
    });
    // A write in flight: it waits for the write lock the test holds.
    let lock = WriteLock::take(backend, &db.url).await;
    let write = tokio::spawn({
        let (client, base) = (client.clone(), server.base.clone());
        async move {
            let body = json!({"task": "t", "dataset": "d.term", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]});
            let resp =
                client.post(format!("{base}/v1/batches")).json(&body).send().await.expect("the write is answered");
            (resp.status(), resp.json::<Value>().await.unwrap())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!write.is_finished() && !poll.is_finished(), "both are in flight");

    let term = Instant::now();
    server.sigterm();
    let (status, body, at) =
        tokio::time::timeout(Duration::from_secs(3), poll).await.expect("long-poll answered").unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["reason"], "shutting_down", "{body}");
    assert!(at.duration_since(term) < Duration::from_secs(2), "the long-poll answered at once");

    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.release().await;
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), write).await.expect("write answered").unwrap();
    assert_eq!(status, StatusCode::CREATED, "the write in flight finished: {body}");

    let exit = server.exited_within(Duration::from_secs(5)).await;
    assert!(exit.is_some_and(|s| s.success()), "exits cleanly within seconds of SIGTERM: {exit:?}\n{}", server.log());
    assert!(term.elapsed() < Duration::from_secs(6));
    assert!(closed_within(&mut half_open, Duration::from_secs(1)).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigterm_answers_long_polls_finishes_writes_and_exits() {
    sigterm_answers_long_polls_finishes_writes_and_exits(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sigterm_answers_long_polls_finishes_writes_and_exits() {
    sigterm_answers_long_polls_finishes_writes_and_exits(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_postgres_at_start_up_fails_fast_naming_host_and_cause() {
    let t0 = Instant::now();
    let out = tokio::process::Command::new(crate::process::binary())
        .args(["serve", "--db", "postgres://nobody@127.0.0.1:1/x", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(10), out).await.expect("it exits").unwrap();
    let elapsed = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}: {stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "names the host: {stderr}");
    assert!(stderr.to_lowercase().contains("connection refused"), "names the cause: {stderr}");
}
