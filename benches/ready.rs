//! `/ready` throughput and latency: batchgate against a bare axum handler.
//!
//! In one run on one machine this measures requests per second and p50/p99
//! latency of `GET /ready` for
//!
//! 1. a bare axum handler returning a constant JSON body, no middleware: the
//!    baseline;
//! 2. batchgate on SQLite (a temporary file) holding 1,000,000 registry rows;
//! 3. batchgate on PostgreSQL (127.0.0.1:5432, user `postgres`, trust auth) in
//!    a fresh database `batchgate_bench_<random>` holding the same rows, dropped
//!    at the end; skipped, loudly, when the server cannot be reached;
//!
//! and prints each one's throughput as a share of the baseline, PASS or FAIL
//! against the 50% target. It then checks that no answer is stale: batches are
//! started and committed through one instance while `/ready` is polled on
//! another (on SQLite, the same single instance).
//!
//! The servers run in-process. The load generator is 32 tokio tasks, each
//! holding one keep-alive connection and writing pre-built HTTP/1.1 requests
//! that cycle over 1,000 of the seeded partitions; after the warm-up those are
//! in batchgate's readiness cache, so the window measures the cached path.
//!
//! Run: `cargo bench --bench ready` (beside another build in the same checkout,
//! add `CARGO_TARGET_DIR=<another dir>` so the two do not wait on each other).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use axum::routing::get;
use axum::{Json, Router};
use batchgate::clock::SystemClock;
use batchgate::config::Settings;
use chrono::{DateTime, Days, NaiveDate, Utc};
use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteSynchronous};
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The registry holds `DATASETS × DAYS` batches, each publishing one partition.
const DATASETS: u32 = 1_000;
const DAYS: u32 = 1_000;
const ROWS: i64 = DATASETS as i64 * DAYS as i64;
const FIRST_DAY: &str = "2023-01-01";
/// Every seeded timestamp.
const SEEDED_AT: &str = "2026-08-24T00:00:00Z";

/// How many distinct partitions the load cycles over.
const POLLED_KEYS: u32 = 1_000;
const CONNECTIONS: usize = 32;
const WARMUP: Duration = Duration::from_secs(2);
const MEASURE: Duration = Duration::from_secs(8);
const TARGET_PERCENT: f64 = 50.0;

const STALE_ROUNDS: usize = 50;
/// How long a change may take to show before the check gives up on it.
const PROPAGATION_LIMIT: Duration = Duration::from_secs(2);
const STALE_TASK: &str = "bench_stale";
const STALE_DATASET: &str = "bench.stale";
const STALE_DT: &str = "2026-01-01";

const PG_SERVER: &str = "postgres://postgres@127.0.0.1:5432";
/// Pool size of each batchgate instance (the service's default).
const MAX_CONNECTIONS: u32 = 10;

#[tokio::main]
async fn main() -> Result<()> {
    println!(
        "/ready bench: {} cores, {CONNECTIONS} keep-alive connections, {} s warm-up + {} s measured, {POLLED_KEYS} partitions cycled",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        WARMUP.as_secs(),
        MEASURE.as_secs(),
    );
    let bare = bare_scenario().await?;
    let sqlite = sqlite_scenario().await?;
    let postgres = postgres_scenario().await?;
    report(&bare, &[Some(sqlite), postgres]);
    Ok(())
}

/// What one server did under load.
struct Load {
    /// Every request sent, warm-up included.
    sent: usize,
    /// Answers other than 200, warm-up included.
    non_ok: usize,
    rps: f64,
    p50: Duration,
    p99: Duration,
}

/// How quickly the changes made through one instance showed on another.
#[derive(Default)]
struct Propagation {
    changes: usize,
    /// Changes whose first `/ready` answer afterwards still showed the old standing.
    stale_first: usize,
    /// Changes that had not shown by [`PROPAGATION_LIMIT`].
    never: usize,
    max_delay: Duration,
}

struct Batchgate {
    name: &'static str,
    load: Load,
    /// After a start, `/ready` must say `running`.
    starts: Propagation,
    /// After a commit, `/ready` must show the new version.
    commits: Propagation,
}

async fn bare_scenario() -> Result<Load> {
    let router = Router::new().route("/ready", get(|| async { Json(json!({"ready": true})) }));
    let server = Server::start(router).await?;
    load(server.addr).await
}

async fn sqlite_scenario() -> Result<Batchgate> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("registry.db");
    let app = batchgate_app(&format!("sqlite://{}", db.display())).await?;
    let began = Instant::now();
    let rows = seed_sqlite(&db).await?;
    println!(
        "sqlite: seeded {rows} task_produce_log rows in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let server = Server::start(app.router).await?;
    let load = load(server.addr).await?;
    let (starts, commits) = staleness(&server.base, &server.base).await?;
    Ok(Batchgate {
        name: "batchgate sqlite, 1 instance",
        load,
        starts,
        commits,
    })
}

/// `None` when PostgreSQL cannot be reached.
async fn postgres_scenario() -> Result<Option<Batchgate>> {
    let admin_url = format!("{PG_SERVER}/postgres");
    let mut admin =
        match tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url)).await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Ok(skip_postgres(&e)),
            Err(elapsed) => return Ok(skip_postgres(&elapsed)),
        };
    let db = format!(
        "batchgate_bench_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    admin
        .execute(format!("CREATE DATABASE {db}").as_str())
        .await?;
    println!("postgres: created database {db}");
    let outcome = postgres_run(&format!("{PG_SERVER}/{db}")).await;
    // FORCE: the instances' pools are still open.
    admin
        .execute(format!("DROP DATABASE {db} WITH (FORCE)").as_str())
        .await?;
    println!("postgres: dropped database {db}");
    outcome.map(Some)
}

fn skip_postgres(why: &dyn std::fmt::Display) -> Option<Batchgate> {
    println!("!!!!! SKIPPED postgres: cannot reach {PG_SERVER} ({why}) !!!!!");
    None
}

/// Two instances on one database: load on the first; changes through the
/// first, `/ready` polled on the second.
async fn postgres_run(url: &str) -> Result<Batchgate> {
    let a = batchgate_app(url).await?;
    let b = batchgate_app(url).await?;
    let began = Instant::now();
    let rows = seed_postgres(url).await?;
    println!(
        "postgres: seeded {rows} task_produce_log rows in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let a = Server::start(a.router).await?;
    let b = Server::start(b.router).await?;
    let load = load(a.addr).await?;
    println!("pg A again: {:.0}", crate::load(a.addr).await?.rps);
    println!("pg B: {:.0}", crate::load(b.addr).await?.rps);
    println!("bare now: {:.0}", bare_scenario().await?.rps);
    let (starts, commits) = staleness(&a.base, &b.base).await?;
    Ok(Batchgate {
        name: "batchgate postgres, 2 instances",
        load,
        starts,
        commits,
    })
}

async fn batchgate_app(database_url: &str) -> Result<batchgate::App> {
    let settings = Settings {
        database_url: database_url.to_owned(),
        max_connections: MAX_CONNECTIONS,
    };
    batchgate::build(&settings, Arc::new(SystemClock)).await
}

/// A server on 127.0.0.1, serving until dropped.
struct Server {
    addr: SocketAddr,
    base: String,
    task: JoinHandle<()>,
}

impl Server {
    async fn start(router: Router) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("server on {addr} stopped: {e}");
            }
        });
        Ok(Self {
            addr,
            base: format!("http://{addr}"),
            task,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---- Seeding ----------------------------------------------------------------

/// A temporary table `seed(i, dataset, task, batch_id, dt, part)`: one row per
/// batch, dataset `i / DAYS` and data date `FIRST_DAY + i % DAYS`.
fn sqlite_seed_table() -> String {
    format!(
        "CREATE TEMP TABLE seed AS \
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {ROWS}), \
         g(i, d, dt) AS (SELECT i, i / {DAYS}, date('{FIRST_DAY}', '+' || (i % {DAYS}) || ' days') FROM n) \
         SELECT i, printf('bench.ds%04d', d) AS dataset, printf('bench_load_%04d', d) AS task, \
                printf('bench_load_%04d-%s-001', d, replace(dt, '-', '')) AS batch_id, dt, 'dt=' || dt AS part \
         FROM g"
    )
}

fn postgres_seed_table() -> String {
    format!(
        "CREATE TEMP TABLE seed ON COMMIT DROP AS \
         SELECT i, 'bench.ds' || lpad(d::text, 4, '0') AS dataset, 'bench_load_' || lpad(d::text, 4, '0') AS task, \
                'bench_load_' || lpad(d::text, 4, '0') || '-' || to_char(dt, 'YYYYMMDD') || '-001' AS batch_id, \
                dt, 'dt=' || to_char(dt, 'YYYY-MM-DD') AS part \
         FROM (SELECT i, i / {DAYS} AS d, DATE '{FIRST_DAY}' + i % {DAYS} AS dt \
               FROM generate_series(0, {ROWS} - 1) AS i) g"
    )
}

/// Fills the registry from `seed`, the same SQL on both backends; `$1` is
/// every timestamp. Each batch published version 1 of its one partition;
/// `batch_seq` is the batch's id, which both backends hand out from 1 in
/// insertion order.
const FILL: [&str; 5] = [
    "INSERT INTO datasets (name, created_at, updated_at) SELECT DISTINCT dataset, $1, $1 FROM seed",
    "INSERT INTO task_seq (task, dt, last_seq) SELECT task, dt, 1 FROM seed",
    "INSERT INTO batches (batch_id, task, dataset, dt, seq, state, trigger_kind, request_fingerprint, \
       lease_seconds, lease_expires_at, started_at, decided_at, marker) \
     SELECT batch_id, task, dataset, dt, 1, 'published', 'scheduled', '{}', 3600, $1, $1, $1, 'bench' \
     FROM seed ORDER BY i",
    "INSERT INTO task_produce_log (batch_id, target_partition, task_name, dt, target_table, status, batch_seq, \
       rows_written, row_count, version, start_time, finish_time) \
     SELECT batch_id, part, task, dt, dataset, 'published', i + 1, 1000, 1000, 1, $1, $1 FROM seed",
    "INSERT INTO partitions (dataset, partition_spec, dt, baseline_key, state, batch_id, version, \
       published_batch_id, published_row_count, published_at, updated_at) \
     SELECT dataset, part, dt, '', 'ready', batch_id, 1, batch_id, 1000, $1, $1 FROM seed",
];

const COUNT_LOG: &str = "SELECT COUNT(*) FROM task_produce_log";

fn seed_time() -> Result<DateTime<Utc>> {
    Ok(SEEDED_AT.parse()?)
}

/// Seeds the (migrated) SQLite registry in one transaction; returns the
/// `task_produce_log` row count.
async fn seed_sqlite(db: &Path) -> Result<i64> {
    let options = SqliteConnectOptions::new()
        .filename(db)
        .synchronous(SqliteSynchronous::Off)
        // Room for the whole transaction, so no page spills to the WAL twice.
        .pragma("cache_size", "-2000000")
        .pragma("temp_store", "memory");
    let mut conn = SqliteConnection::connect_with(&options).await?;
    let at = seed_time()?;
    let mut tx = conn.begin().await?;
    sqlx::query(&sqlite_seed_table()).execute(&mut *tx).await?;
    for sql in FILL {
        sqlx::query(sql).bind(at).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    // Leave the kernel nothing to write back during the measurement: fold
    // the WAL into the file, then flush the file.
    let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(&mut conn)
        .await?;
    ensure!(busy == 0, "the WAL checkpoint was blocked");
    std::fs::File::open(db)?.sync_all()?;
    let (rows,): (i64,) = sqlx::query_as(COUNT_LOG).fetch_one(&mut conn).await?;
    conn.close().await?;
    ensure!(rows == ROWS, "seeded {rows} rows, expected {ROWS}");
    Ok(rows)
}

/// Seeds the (migrated) PostgreSQL registry in one transaction; returns the `task_produce_log` row count.
async fn seed_postgres(url: &str) -> Result<i64> {
    let mut conn = PgConnection::connect(url).await?;
    let at = seed_time()?;
    let mut tx = conn.begin().await?;
    sqlx::query(&postgres_seed_table())
        .execute(&mut *tx)
        .await?;
    for sql in FILL {
        sqlx::query(sql).bind(at).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    // Leave the server no background work for the measurement: the vacuum
    // and analyze autovacuum would start after a bulk insert, then a checkpoint.
    conn.execute("VACUUM (ANALYZE)").await?;
    conn.execute("CHECKPOINT").await?;
    let (rows,): (i64,) = sqlx::query_as(COUNT_LOG).fetch_one(&mut conn).await?;
    conn.close().await?;
    ensure!(rows == ROWS, "seeded {rows} rows, expected {ROWS}");
    Ok(rows)
}

// ---- Load ---------------------------------------------------------------------

/// One raw request per polled partition, spread over every dataset and date.
fn requests() -> Result<Vec<Vec<u8>>> {
    let first: NaiveDate = FIRST_DAY.parse()?;
    (0..POLLED_KEYS)
        .map(|j| {
            let day = first
                .checked_add_days(Days::new(u64::from(j * 337 % DAYS)))
                .context("date out of range")?;
            let dataset = format!("bench.ds{:04}", j % DATASETS);
            Ok(format!(
                "GET /ready?dataset={dataset}&partition=dt%3D{day} HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            .into_bytes())
        })
        .collect()
}

/// What one connection saw.
#[derive(Default)]
struct Tally {
    sent: usize,
    non_ok: usize,
    /// Microseconds, of the requests sent in the measured window.
    latencies: Vec<u32>,
}

/// Loads the server at `addr` from [`CONNECTIONS`] connections: a warm-up,
/// then the measured window.
async fn load(addr: SocketAddr) -> Result<Load> {
    let requests: Arc<[Vec<u8>]> = requests()?.into();
    let measure_from = Instant::now() + WARMUP;
    let until = measure_from + MEASURE;
    let conns: Vec<JoinHandle<Result<Tally>>> = (0..CONNECTIONS)
        .map(|c| {
            let requests = requests.clone();
            let offset = c * requests.len() / CONNECTIONS;
            tokio::spawn(async move { drive(addr, &requests, offset, measure_from, until).await })
        })
        .collect();
    let mut total = Tally::default();
    for conn in conns {
        let t = conn.await??;
        total.sent += t.sent;
        total.non_ok += t.non_ok;
        total.latencies.extend(t.latencies);
    }
    let mut lat = total.latencies;
    ensure!(
        !lat.is_empty(),
        "no request completed in the measured window"
    );
    lat.sort_unstable();
    Ok(Load {
        sent: total.sent,
        non_ok: total.non_ok,
        rps: lat.len() as f64 / MEASURE.as_secs_f64(),
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
    })
}

/// One keep-alive connection sending requests back to back until `until`.
async fn drive(
    addr: SocketAddr,
    requests: &[Vec<u8>],
    offset: usize,
    measure_from: Instant,
    until: Instant,
) -> Result<Tally> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    let mut tally = Tally {
        latencies: Vec::with_capacity(1 << 16),
        ..Tally::default()
    };
    for request in requests.iter().cycle().skip(offset) {
        let sent = Instant::now();
        if sent >= until {
            break;
        }
        stream.write_all(request).await?;
        let status = read_response(&mut stream, &mut buf).await?;
        tally.sent += 1;
        tally.non_ok += usize::from(status != 200);
        if sent >= measure_from {
            let micros = sent.elapsed().as_micros();
            tally
                .latencies
                .push(u32::try_from(micros).unwrap_or(u32::MAX));
        }
    }
    Ok(tally)
}

/// Reads one whole response into `buf` and returns its status code.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<u16> {
    buf.clear();
    let head_len = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        fill(stream, buf).await?;
    };
    let head = std::str::from_utf8(&buf[..head_len])?;
    let status: u16 = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line in {head:?}"))?;
    let body_len: usize = head
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .with_context(|| format!("no content-length in {head:?}"))?;
    while buf.len() < head_len + body_len {
        fill(stream, buf).await?;
    }
    ensure!(
        buf.len() == head_len + body_len,
        "bytes after the response: one request is in flight at a time"
    );
    Ok(status)
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<()> {
    if stream.read_buf(buf).await? == 0 {
        bail!("the server closed the connection");
    }
    Ok(())
}

fn percentile(sorted: &[u32], q: f64) -> Duration {
    let rank = (sorted.len() as f64 * q).ceil() as usize;
    Duration::from_micros(u64::from(sorted[rank.clamp(1, sorted.len()) - 1]))
}

// ---- Staleness ------------------------------------------------------------------

/// Starts and commits [`STALE_ROUNDS`] batches of one partition through
/// `writer`, and after each change polls `/ready` for it on `reader`, which has
/// the partition's previous standing cached from the poll before.
async fn staleness(writer: &str, reader: &str) -> Result<(Propagation, Propagation)> {
    let http = reqwest::Client::new();
    let ready = format!("{reader}/ready?dataset={STALE_DATASET}&partition=dt%3D{STALE_DT}");
    let partition = format!("dt={STALE_DT}");
    let (status, body) = poll(&http, &ready).await?;
    ensure!(
        status == 404 && body["reason"] == "no_batch",
        "{STALE_DATASET} is not fresh: {status} {body}"
    );
    let (mut starts, mut commits) = (Propagation::default(), Propagation::default());
    for _ in 0..STALE_ROUNDS {
        let start = json!({"task": STALE_TASK, "dataset": STALE_DATASET, "dt": STALE_DT, "partitions": [partition]});
        let started = post(&http, &format!("{writer}/v1/batches"), &start, 201).await?;
        let batch_id = started["batch_id"]
            .as_str()
            .context("start answered without batch_id")?;
        starts
            .observe(&http, &ready, |status, body| {
                status == 404 && body["reason"] == "running"
            })
            .await?;

        let commit = json!({"marker": "m", "partitions": [{"partition": partition, "rows_written": 10, "row_count": 10}]});
        let committed = post(
            &http,
            &format!("{writer}/v1/batches/{batch_id}/commit"),
            &commit,
            200,
        )
        .await?;
        let version = committed["partitions"][0]["version"]
            .as_i64()
            .with_context(|| {
                format!("commit answered without partitions[0].version: {committed}")
            })?;
        commits
            .observe(&http, &ready, |status, body| {
                status == 200 && body["partitions"][0]["version"] == version
            })
            .await?;
    }
    Ok((starts, commits))
}

/// GETs `url`: its status and JSON body.
async fn poll(http: &reqwest::Client, url: &str) -> Result<(u16, Value)> {
    let resp = http.get(url).send().await?;
    let status = resp.status().as_u16();
    Ok((status, resp.json().await?))
}

/// POSTs `body` and returns the answer, which must have status `expect`.
async fn post(http: &reqwest::Client, url: &str, body: &Value, expect: u16) -> Result<Value> {
    let resp = http.post(url).json(body).send().await?;
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await?;
    ensure!(
        status == expect,
        "POST {url}: {status} {answer}, expected {expect}"
    );
    Ok(answer)
}

impl Propagation {
    /// Polls `url` right after a change until an answer passes `fresh`.
    async fn observe(
        &mut self,
        http: &reqwest::Client,
        url: &str,
        fresh: impl Fn(u16, &Value) -> bool,
    ) -> Result<()> {
        let since = Instant::now();
        self.changes += 1;
        let mut first = true;
        loop {
            let (status, body) = poll(http, url).await?;
            if fresh(status, &body) {
                self.max_delay = self.max_delay.max(since.elapsed());
                return Ok(());
            }
            self.stale_first += usize::from(first);
            first = false;
            if since.elapsed() > PROPAGATION_LIMIT {
                self.never += 1;
                return Ok(());
            }
        }
    }

    fn passed(&self) -> bool {
        self.stale_first == 0 && self.never == 0
    }

    fn summary(&self) -> String {
        let never = if self.never > 0 {
            format!(
                ", {} never within {} s",
                self.never,
                PROPAGATION_LIMIT.as_secs()
            )
        } else {
            String::new()
        };
        format!(
            "{}/{} stale first answers{never}, max delay {:.2} ms",
            self.stale_first,
            self.changes,
            self.max_delay.as_secs_f64() * 1e3
        )
    }
}

// ---- Report ---------------------------------------------------------------------

fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

fn report(bare: &Load, runs: &[Option<Batchgate>]) {
    let row = |name: &str, l: &Load, share: &str| {
        println!(
            "{name:<32} {:>9.0} {:>8.3} {:>8.3} {:>9} {:>8} {share}",
            l.rps,
            l.p50.as_secs_f64() * 1e3,
            l.p99.as_secs_f64() * 1e3,
            l.sent,
            l.non_ok,
        );
    };
    println!();
    println!(
        "{:<32} {:>9} {:>8} {:>8} {:>9} {:>8} % of bare (target >= {TARGET_PERCENT}%)",
        "GET /ready", "req/s", "p50 ms", "p99 ms", "requests", "non-200"
    );
    row("bare axum handler", bare, "100.0%");
    for run in runs.iter().flatten() {
        let percent = run.load.rps / bare.rps * 100.0;
        let pass = percent >= TARGET_PERCENT && run.load.non_ok == 0;
        row(
            run.name,
            &run.load,
            &format!("{percent:5.1}%  {}", verdict(pass)),
        );
    }
    if runs.iter().any(Option::is_none) {
        println!(
            "{:<32} SKIPPED (PostgreSQL unreachable)",
            "batchgate postgres"
        );
    }
    println!();
    println!("stale answers: a change through one instance, then GET /ready on the reader at once");
    for run in runs.iter().flatten() {
        println!(
            "{:<32} start -> running: {}; commit -> new version: {}  {}",
            run.name,
            run.starts.summary(),
            run.commits.summary(),
            verdict(run.starts.passed() && run.commits.passed()),
        );
    }
}
