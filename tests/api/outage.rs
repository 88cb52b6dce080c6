//! The database goes away under a running binary: requests answer within
//! the database timeout (503 `storage_unavailable`, `/ready` its not-ready
//! answer), `/healthz` names the database, and service resumes when the
//! database is back. PostgreSQL is reached through a TCP proxy the test cuts;
//! SQLite is "down" while another process holds its write lock.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Connection;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::helpers::{admin_url, Backend, TestDb};
use crate::process::{Launch, Proc};

/// Forwards 127.0.0.1:port to PostgreSQL until cut.
struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Self { addr: listener.local_addr().unwrap(), upstream, tasks: Arc::default() };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let (tasks, upstream) = (self.tasks.clone(), self.upstream);
        let pipes = self.tasks.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                pipes.lock().unwrap().push(pipe);
            }
        });
        tasks.lock().unwrap().push(acceptor);
    }

    /// Closes every forwarded connection and refuses new ones.
    fn cut(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    async fn restore(&self) {
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot rebind the proxy: {e}"),
            }
        };
        self.serve(listener);
    }
}

/// A request and how long its answer took.
async fn timed(req: reqwest::RequestBuilder) -> (StatusCode, Value, Duration) {
    let t0 = Instant::now();
    let resp = req.send().await.expect("an answer");
    let status = resp.status();
    let body = resp.json().await.expect("a JSON body");
    (status, body, t0.elapsed())
}

const LIMIT: Duration = Duration::from_millis(2800);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_answers_within_the_db_timeout_and_health_names_it() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let upstream: SocketAddr = {
        let url = url_host_port(&admin_url());
        tokio::net::lookup_host(url).await.unwrap().next().unwrap()
    };
    let proxy = Proxy::start(upstream).await;
    let via_proxy = db.url.replacen(&url_host_port(&db.url), &proxy.addr.to_string(), 1);
    // The default database timeout: 2 s.
    let server = Proc::start(&via_proxy, Launch::default()).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let start = json!({"task": "t", "dataset": "d.out", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]});
    let (status, started, _) = timed(client.post(format!("{}/v1/batches", server.base)).json(&start)).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let id = started["batch_id"].as_str().unwrap().to_owned();

    proxy.cut();
    for _ in 0..2 {
        let start2 = json!({"task": "t2", "dataset": "d.out", "dt": "2026-08-25", "partitions": ["dt=2026-08-25"]});
        let (status, body, took) = timed(client.post(format!("{}/v1/batches", server.base)).json(&start2)).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("storage_unavailable")),
            "{body}"
        );
        assert!(took < LIMIT, "a write answered after {took:?}");

        let (status, body, took) = timed(client.get(format!("{}/v1/batches/{id}", server.base))).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("storage_unavailable")),
            "{body}"
        );
        assert!(took < LIMIT, "a read answered after {took:?}");

        let (status, body, took) =
            timed(client.get(format!("{}/ready?dataset=d.out&partition=dt%3D2026-08-24", server.base))).await;
        assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("unavailable")), "{body}");
        assert!(took < LIMIT, "/ready answered after {took:?}");

        let (status, body, took) = timed(client.get(format!("{}/healthz", server.base))).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["database"], "unreachable", "{body}");
        assert!(took < LIMIT, "/healthz answered after {took:?}");
    }

    proxy.restore().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, _) = timed(client.get(format!("{}/healthz", server.base))).await;
        if status == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "the service heals when the database is back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body, _) = timed(client.get(format!("{}/v1/batches/{id}", server.base))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

fn url_host_port(url: &str) -> String {
    let after = url.split_once('@').map(|(_, r)| r).unwrap_or(url);
    let host_port = after.split('/').next().unwrap();
    if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_locked_by_another_process_answers_within_the_db_timeout() {
    let db = TestDb::create(Backend::Sqlite).await.unwrap();
    let server = Proc::start(&db.url, Launch::default()).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let mut other = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN EXCLUSIVE").execute(&mut other).await.unwrap();

    let start = json!({"task": "t", "dataset": "d.lock", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]});
    let (status, body, took) = timed(client.post(format!("{}/v1/batches", server.base)).json(&start)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("storage_unavailable")),
        "{body}"
    );
    assert!(took < LIMIT, "a write answered after {took:?}");

    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    let (status, body, _) = timed(client.post(format!("{}/v1/batches", server.base)).json(&start)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_db_timeout_is_configurable() {
    let db = TestDb::create(Backend::Sqlite).await.unwrap();
    let server = Proc::start(&db.url, Launch { args: vec!["--db-timeout", "500ms"], ..Launch::default() }).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let mut other = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN EXCLUSIVE").execute(&mut other).await.unwrap();
    let start = json!({"task": "t", "dataset": "d.lock", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]});
    let (status, _, took) = timed(client.post(format!("{}/v1/batches", server.base)).json(&start)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(took < Duration::from_millis(1500), "--db-timeout 500ms answered after {took:?}");
}

/// The server ends every session of the service (an administrator, a
/// failover, a pooler's timeout) while the database stays up: the requests
/// right after, reads and writes alike, are answered as usual. The pool
/// does not hand out a connection the server closed: it pings each one it
/// hands out (a round trip per acquire that a pool which skipped the ping
/// would save, and then answer 500 once for each of its dead connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sessions_ended_by_the_server_are_not_used_again() {
    let Some(app) = crate::helpers::TestApp::spawn(Backend::Postgres).await else { return };
    // Fill the pool: several requests at once hold several connections.
    let warm = (0..8).map(|i| {
        let app = &app;
        async move { app.get(&format!("/v1/batches?limit=1&dataset=warm{i}")).await.0 }
    });
    assert!(futures::future::join_all(warm).await.iter().all(|s| *s == StatusCode::OK));
    let mut c = sqlx::PgConnection::connect(&app.db.url).await.expect("postgres");
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_one(&mut c)
    .await
    .expect("terminate");
    assert!(ended > 1, "the service's sessions were ended: {ended}");
    for i in 0..10 {
        let (status, body) = app.get("/v1/batches?limit=1").await;
        assert_eq!(status, StatusCode::OK, "read {i} after the sessions ended: {body}");
    }
    let (status, started) = app.start("t_ended", "ended.daily", "2026-01-01", &["dt=2026-01-01"]).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
}
