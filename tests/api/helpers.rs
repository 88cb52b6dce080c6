//! `TestApp`: the real service on port 0, on a fresh database per test.
//!
//! SQLite tests use a file in a temporary folder. PostgreSQL tests create a
//! database `bg_test_<uuid>` on `BATCHGATE_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and drop it afterwards. If
//! that server is unreachable the PostgreSQL tests say so loudly and skip,
//! unless `CI` or `BATCHGATE_REQUIRE_POSTGRES` is set: then they fail.

use std::sync::Arc;
use std::time::Duration;

use batchgate::clock::{Clock, ManualClock};
use batchgate::config::Settings;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Connection;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub fn admin_url() -> String {
    std::env::var("BATCHGATE_TEST_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn postgres_required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false")
        || std::env::var_os("BATCHGATE_REQUIRE_POSTGRES").is_some()
}

/// A database of its own for one test.
pub struct TestDb {
    pub url: String,
    pg_name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// `None` when PostgreSQL is wanted but unreachable (and not required).
    pub async fn create(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("registry.db").display());
                Some(Self { url, pg_name: None, _dir: Some(dir) })
            }
            Backend::Postgres => {
                let admin = admin_url();
                let mut conn = match sqlx::PgConnection::connect(&admin).await {
                    Ok(c) => c,
                    Err(e) if !postgres_required() => {
                        eprintln!(
                            "\n**** SKIPPED: PostgreSQL test, no server at {admin}: {e}\n**** set BATCHGATE_TEST_PG_URL, or CI=true to make this a failure\n"
                        );
                        return None;
                    }
                    Err(e) => {
                        panic!("PostgreSQL is required (CI/BATCHGATE_REQUIRE_POSTGRES) but {admin} is unreachable: {e}")
                    }
                };
                let name = format!("bg_test_{}", uuid::Uuid::new_v4().simple());
                sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.expect("create test database");
                let base = admin.rsplit_once('/').map(|(b, _)| b.to_owned()).unwrap_or(admin.clone());
                Some(Self { url: format!("{base}/{name}"), pg_name: Some(name), _dir: None })
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(name) = self.pg_name.take() else {
            return;
        };
        // Drop is synchronous; run the DROP on a runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                if let Ok(mut c) = sqlx::PgConnection::connect(&admin_url()).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut c).await;
                }
            });
        })
        .join();
    }
}

/// One running instance of the service.
pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub clock: Arc<ManualClock>,
    pub backend: Backend,
    pub db: Arc<TestDb>,
    pub scanner: Arc<batchgate::scanner::Scanner>,
    webhook_url: Option<String>,
    settings: Option<Tweak>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Changes the settings an instance starts with.
pub type Tweak = Arc<dyn Fn(&mut Settings) + Send + Sync>;

impl TestApp {
    pub async fn spawn(backend: Backend) -> Option<Self> {
        let db = Arc::new(TestDb::create(backend).await?);
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        Some(Self::spawn_on(backend, db, clock, None, None).await)
    }

    /// An instance on `db`, which the caller prepared (an older schema
    /// with rows in it): starting applies the migrations it lacks.
    pub async fn spawn_on_prepared(backend: Backend, db: TestDb) -> Self {
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        Self::spawn_on(backend, Arc::new(db), clock, None, None).await
    }

    /// An instance whose settings `tweak` changes (`webhook_allow`, `retain`, …).
    pub async fn spawn_with(backend: Backend, tweak: impl Fn(&mut Settings) + Send + Sync + 'static) -> Option<Self> {
        let db = Arc::new(TestDb::create(backend).await?);
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        Some(Self::spawn_on(backend, db, clock, None, Some(Arc::new(tweak))).await)
    }

    /// A fresh instance on the same database and clock, after this one
    /// stopped, with other settings.
    pub async fn restart_with(self, tweak: impl Fn(&mut Settings) + Send + Sync + 'static) -> Self {
        let (backend, db, clock, hook) = (self.backend, self.db.clone(), self.clock.clone(), self.webhook_url.clone());
        drop(self);
        Self::spawn_on(backend, db, clock, hook, Some(Arc::new(tweak))).await
    }

    /// An instance that POSTs every alert to `webhook_url`.
    pub async fn spawn_with_webhook(backend: Backend, webhook_url: &str) -> Option<Self> {
        let db = Arc::new(TestDb::create(backend).await?);
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        Some(Self::spawn_on(backend, db, clock, Some(webhook_url.to_owned()), None).await)
    }

    /// Another instance on the same database (replicas behind a load balancer).
    pub async fn replica(&self) -> Self {
        Self::spawn_on(
            self.backend,
            self.db.clone(),
            self.clock.clone(),
            self.webhook_url.clone(),
            self.settings.clone(),
        )
        .await
    }

    /// A fresh instance on the same database and clock, after this one stopped.
    pub async fn restart(self) -> Self {
        let tweak = self.settings.clone();
        let (backend, db, clock, hook) = (self.backend, self.db.clone(), self.clock.clone(), self.webhook_url.clone());
        drop(self);
        Self::spawn_on(backend, db, clock, hook, tweak).await
    }

    /// One pass of the background scans (tests drive them by hand).
    pub async fn scan(&self) -> batchgate::scanner::ScanReport {
        self.scanner.run_once().await
    }

    async fn spawn_on(
        backend: Backend,
        db: Arc<TestDb>,
        clock: Arc<ManualClock>,
        webhook_url: Option<String>,
        tweak: Option<Tweak>,
    ) -> Self {
        let mut settings = Settings {
            database_url: db.url.clone(),
            max_connections: 8,
            scan_interval: None,
            webhook_url: webhook_url.clone(),
            webhook_backoff: Duration::from_secs(1),
            // Many instances share two cores while the suite runs: the 2 s
            // production default would turn a busy machine into 503s. The
            // outage tests run the binary with their own `--db-timeout`.
            db_timeout: Duration::from_secs(10),
            ..Settings::default()
        };
        if let Some(tweak) = &tweak {
            tweak(&mut settings);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let edge = batchgate::server::Edge::from_settings(&settings).expect("edge settings");
        let app = batchgate::build(&settings, clock.clone() as Arc<dyn Clock>).await.expect("build app");
        let scanner = app.scanner.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // The same serving code as the binary: timeouts, connection ceiling, shutdown.
        tokio::spawn(async move {
            let shutdown = async {
                let _ = rx.await;
            };
            batchgate::serve_app(app, &settings, edge, listener, shutdown).await.expect("serve");
        });
        let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
        Self {
            base: format!("http://{addr}"),
            client,
            clock,
            backend,
            db,
            scanner,
            webhook_url,
            settings: tweak,
            shutdown: Some(tx),
        }
    }

    /// Every answer is checked against the spec ([`crate::conformance`]).
    pub async fn request(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> (StatusCode, Value) {
        let mut req = self.client.request(method.clone(), format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON body for {path}: {text:?}"));
        crate::conformance::check(method.as_str(), path, status.as_u16(), &value);
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.request(reqwest::Method::GET, path, None).await
    }

    /// Posts `body` and returns the answer's exact bytes (checked against
    /// the spec like every answer): for what must repeat byte for byte.
    pub async fn post_bytes(&self, path: &str, body: &Value) -> (StatusCode, String) {
        let resp = self.client.post(format!("{}{path}", self.base)).json(body).send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON body for {path}: {text:?}"));
        crate::conformance::check("POST", path, status.as_u16(), &value);
        (status, text)
    }

    /// Gets `path` and returns the answer's exact bytes (checked against
    /// the spec like every answer).
    pub async fn get_bytes(&self, path: &str) -> (StatusCode, String) {
        let resp = self.client.get(format!("{}{path}", self.base)).send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON body for {path}: {text:?}"));
        crate::conformance::check("GET", path, status.as_u16(), &value);
        (status, text)
    }

    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.request(reqwest::Method::POST, path, Some(body)).await
    }

    /// Posts raw bytes (for malformed bodies).
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        let status = resp.status();
        let value: Value = resp.json().await.expect("JSON body");
        crate::conformance::check("POST", path, status.as_u16(), &value);
        (status, value)
    }

    /// Posts a body over the limit. The service answers 413 from the
    /// `Content-Length` alone and closes the connection without reading the
    /// body, so the client, still writing, can see a reset instead of the
    /// answer; such transport failures are retried (a few times at most).
    pub async fn post_too_large(&self, path: &str, body: String) -> (StatusCode, Value) {
        for _ in 0..5 {
            let sent = self
                .client
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await;
            if let Ok(resp) = sent {
                let status = resp.status();
                let value: Value = resp.json().await.expect("JSON body");
                crate::conformance::check("POST", path, status.as_u16(), &value);
                return (status, value);
            }
        }
        panic!("no answer to an oversized body in five tries");
    }

    pub async fn start(&self, task: &str, dataset: &str, dt: &str, partitions: &[&str]) -> (StatusCode, Value) {
        self.post("/v1/batches", &json!({"task": task, "dataset": dataset, "dt": dt, "partitions": partitions})).await
    }

    /// Starts and expects 201; returns the batch id.
    pub async fn start_ok(&self, task: &str, dataset: &str, dt: &str, partitions: &[&str]) -> String {
        let (status, body) = self.start(task, dataset, dt, partitions).await;
        assert_eq!(status, StatusCode::CREATED, "start failed: {body}");
        body["batch_id"].as_str().expect("batch_id").to_owned()
    }

    pub async fn commit(&self, batch_id: &str, body: &Value) -> (StatusCode, Value) {
        self.post(&format!("/v1/batches/{batch_id}/commit"), body).await
    }

    pub async fn ready(&self, dataset: &str, partitions: &[&str]) -> (StatusCode, Value) {
        let mut q = format!("dataset={}", enc(dataset));
        for p in partitions {
            q.push_str(&format!("&partition={}", enc(p)));
        }
        self.get(&format!("/ready?{q}")).await
    }

    /// The raw bytes of a `/ready` answer, for substring matching.
    pub async fn ready_text(&self, query: &str) -> (StatusCode, String) {
        let resp = self.client.get(format!("{}/ready?{query}", self.base)).send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON /ready answer: {text:?}"));
        crate::conformance::check("GET", "/ready", status.as_u16(), &value);
        (status, text)
    }

    pub async fn put_dataset(&self, dataset: &str, policy: &Value) -> Value {
        let (status, body) = self.request(reqwest::Method::PUT, &format!("/v1/datasets/{dataset}"), Some(policy)).await;
        assert!(status.is_success(), "PUT dataset failed: {status} {body}");
        body
    }

    /// Starts a batch and commits clean evidence; returns the commit body.
    pub async fn publish(&self, task: &str, dataset: &str, dt: &str, partition: &str, rows: u64) -> Value {
        let id = self.start_ok(task, dataset, dt, &[partition]).await;
        let (status, body) = self.commit(&id, &clean(partition, rows)).await;
        assert_eq!(status, StatusCode::OK, "commit failed: {body}");
        body
    }

    /// The first column of the first row of `query`, as a number.
    pub async fn sql_count(&self, query: &str) -> i64 {
        match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.db.url).await.expect("sqlite");
                sqlx::query_scalar(query).fetch_one(&mut c).await.expect("sql")
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.db.url).await.expect("postgres");
                sqlx::query_scalar(query).fetch_one(&mut c).await.expect("sql")
            }
        }
    }

    /// Every row of `query`, whose columns must all be text.
    pub async fn sql_rows(&self, query: &str) -> Vec<Vec<Option<String>>> {
        use sqlx::Row;
        fn texts<R: Row>(rows: Vec<R>) -> Vec<Vec<Option<String>>>
        where
            usize: sqlx::ColumnIndex<R>,
            for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        {
            rows.iter().map(|r| (0..r.len()).map(|i| r.try_get(i).expect("a text column")).collect()).collect()
        }
        match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.db.url).await.expect("sqlite");
                texts(sqlx::query(query).fetch_all(&mut c).await.expect("sql"))
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.db.url).await.expect("postgres");
                texts(sqlx::query(query).fetch_all(&mut c).await.expect("sql"))
            }
        }
    }

    pub async fn sql(&self, statement: &str) {
        match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.db.url).await.expect("sqlite");
                sqlx::raw_sql(statement).execute(&mut c).await.expect("sql");
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.db.url).await.expect("postgres");
                sqlx::raw_sql(statement).execute(&mut c).await.expect("sql");
            }
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

pub fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Commit evidence that passes every check.
pub fn clean(partition: &str, rows: u64) -> Value {
    json!({
        "marker": format!("hdfs://warehouse/{partition}/_SUCCESS"),
        "partitions": [{"partition": partition, "rows_written": rows, "row_count": rows, "distinct_keys": rows, "null_keys": 0}],
    })
}

/// The named check in a batch record.
pub fn check<'a>(record: &'a Value, name: &str) -> &'a Value {
    record["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no check {name} in {record}"))
}

/// Runs each named scenario `async fn name(app: TestApp)` once on SQLite and
/// once on PostgreSQL.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(app) = $crate::helpers::TestApp::spawn($crate::helpers::Backend::Sqlite).await {
                        super::$name(app).await
                    }
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(app) = $crate::helpers::TestApp::spawn($crate::helpers::Backend::Postgres).await {
                        super::$name(app).await
                    }
                }
            )*
        }
    };
}

/// Scenarios that build their own instance (other settings, several
/// instances) from a backend: one test per backend, named explicitly.
#[macro_export]
macro_rules! per_backend {
    ($($scenario:ident => $sqlite:ident, $postgres:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            $scenario(Backend::Sqlite).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            $scenario(Backend::Postgres).await;
        }
    )*};
}

impl TestApp {
    /// `GET path` (with a query already), then each page after it by
    /// `next_cursor`, to the end: every item.
    pub async fn all_pages(&self, path: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut url = path.to_owned();
        loop {
            let (status, page) = self.get(&url).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            items.extend(page["items"].as_array().unwrap().iter().cloned());
            match page["next_cursor"].as_str() {
                Some(c) => url = format!("{path}&cursor={}", enc(c)),
                None => return items,
            }
        }
    }

    /// The service's current time, RFC 3339.
    pub fn clock_now(&self) -> String {
        self.clock.now().to_rfc3339()
    }
}

/// Each request's `Idempotency-Key` header and JSON body.
pub type Requests = Arc<std::sync::Mutex<Vec<(Option<String>, Value)>>>;

/// A webhook receiver on 127.0.0.1 that answers 500 to its first
/// `fail_first` requests, then 200; it records every request.
pub struct Receiver {
    pub url: String,
    pub seen: Requests,
}

impl Receiver {
    pub async fn start(fail_first: usize) -> Self {
        use axum::http::HeaderMap;
        let seen: Requests = Arc::default();
        let log = seen.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: axum::Json<Value>| {
                let log = log.clone();
                async move {
                    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
                    let mut log = log.lock().unwrap();
                    log.push((key, body.0));
                    if log.len() <= fail_first {
                        StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        StatusCode::OK
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, seen }
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl TestApp {
    /// Requests sent with `Authorization: Bearer <token>`.
    pub fn with_token<'a>(&'a self, token: &str) -> Authed<'a> {
        Authed { app: self, token: token.to_owned() }
    }

    /// Makes a token over HTTP as `admin` (the bootstrap token); returns the secret.
    pub async fn make_token(&self, admin: &str, name: &str, scopes: &[&str]) -> String {
        let (status, body) = self.with_token(admin).post("/v1/tokens", &json!({"name": name, "scopes": scopes})).await;
        assert_eq!(status, StatusCode::CREATED, "token create failed: {body}");
        body["token"].as_str().expect("token").to_owned()
    }
}

/// A [`TestApp`] seen through one token.
pub struct Authed<'a> {
    pub app: &'a TestApp,
    pub token: String,
}

impl Authed<'_> {
    /// The raw answer (status, headers, body as text).
    pub async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> reqwest::Response {
        let mut req = self.app.client.request(method, format!("{}{path}", self.app.base)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        req.send().await.expect("request")
    }

    /// Every answer is checked against the spec ([`crate::conformance`]).
    pub async fn request(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> (StatusCode, Value) {
        let resp = self.send(method.clone(), path, body).await;
        let status = resp.status();
        let text = resp.text().await.expect("body");
        let value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        crate::conformance::check(method.as_str(), path, status.as_u16(), &value);
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.request(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.request(reqwest::Method::POST, path, Some(body)).await
    }
}
