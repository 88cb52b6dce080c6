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
//! against the 50% target. Before that it checks that no answer is stale:
//! batches are started and committed through one instance while `/ready` is
//! polled on another (on SQLite, the same single instance).
//!
//! The servers run in-process. The load generator is 32 tokio tasks, each
//! holding one keep-alive connection and writing pre-built HTTP/1.1 requests
//! that cycle over 1,000 of the seeded partitions; after the warm-up those are
//! in batchgate's readiness cache, so the windows measure the cached path. The
//! servers take turns, a short window each, four rounds over, so that other
//! work on the machine weighs on all of them alike; how much CPU other
//! processes took meanwhile is printed too.
//!
//! Run: `cargo bench --bench ready` (beside another build in the same checkout,
//! add `CARGO_TARGET_DIR=<another dir>` so the two do not wait on each other).

#[path = "common/load.rs"]
mod load;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use axum::routing::get;
use axum::{Json, Router};
use batchgate::clock::SystemClock;
use batchgate::config::Settings;
use chrono::{DateTime, Days, NaiveDate, Utc};
use load::{CpuTicks, Load, Tally};
use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteSynchronous};
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};
use tokio::net::TcpListener;
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
/// Each server is loaded in `ROUNDS` windows, taking turns with the others.
const ROUNDS: usize = 4;
const WARMUP: Duration = Duration::from_millis(500);
const WINDOW: Duration = Duration::from_secs(2);
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
        "/ready bench: {} cores; each server loaded from {CONNECTIONS} keep-alive connections cycling over {POLLED_KEYS} partitions, \
         in {ROUNDS} turns of {:.1} s warm-up + {:.1} s measured",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        WARMUP.as_secs_f64(),
        WINDOW.as_secs_f64(),
    );
    let pg = PgDatabase::create().await?;
    let pg_skipped = pg.is_none();
    let outcome = bench(pg.as_ref().map(|db| db.url.as_str())).await;
    if let Some(pg) = pg {
        pg.remove().await?;
    }
    report(&outcome?, pg_skipped);
    Ok(())
}

/// A server under test.
struct Subject {
    name: &'static str,
    addr: SocketAddr,
    /// For batchgate: how its answers followed changes.
    changes: Option<Changes>,
}

/// Sets up every server, checks staleness, then measures them all.
async fn bench(pg_url: Option<&str>) -> Result<Vec<(Subject, Load)>> {
    let bare = Server::start(Router::new().route("/ready", get(|| async { Json(json!({"ready": true})) }))).await?;
    let dir = tempfile::tempdir()?;
    let sqlite = sqlite_instance(&dir.path().join("registry.db")).await?;
    let mut subjects = vec![
        Subject { name: "bare axum handler", addr: bare.addr, changes: None },
        Subject {
            name: "batchgate sqlite, 1 instance",
            addr: sqlite.addr,
            changes: Some(staleness(&sqlite.base, &sqlite.base).await?),
        },
    ];
    // Every server serves until the measurement ends.
    let mut servers = vec![bare, sqlite];
    if let Some(url) = pg_url {
        let (a, b) = postgres_instances(url).await?;
        subjects.push(Subject {
            name: "batchgate postgres, 2 instances",
            addr: a.addr,
            changes: Some(staleness(&a.base, &b.base).await?),
        });
        servers.extend([a, b]);
    }
    let addrs: Vec<SocketAddr> = subjects.iter().map(|s| s.addr).collect();
    let loads = measure(&addrs).await?;
    drop(servers);
    Ok(subjects.into_iter().zip(loads).collect())
}

/// batchgate on a SQLite file at `db`, seeded.
async fn sqlite_instance(db: &Path) -> Result<Server> {
    let app = batchgate_app(&format!("sqlite://{}", db.display())).await?;
    let began = Instant::now();
    let rows = seed_sqlite(db).await?;
    println!("sqlite: seeded {rows} task_produce_log rows in {:.1} s", began.elapsed().as_secs_f64());
    Server::start_app(app).await
}

/// Two batchgate instances on the PostgreSQL database at `url`, seeded.
async fn postgres_instances(url: &str) -> Result<(Server, Server)> {
    let a = batchgate_app(url).await?;
    let b = batchgate_app(url).await?;
    let began = Instant::now();
    let rows = seed_postgres(url).await?;
    println!("postgres: seeded {rows} task_produce_log rows in {:.1} s", began.elapsed().as_secs_f64());
    Ok((Server::start_app(a).await?, Server::start_app(b).await?))
}

async fn batchgate_app(database_url: &str) -> Result<batchgate::App> {
    let settings =
        Settings { database_url: database_url.to_owned(), max_connections: MAX_CONNECTIONS, ..Settings::default() };
    batchgate::build(&settings, Arc::new(SystemClock)).await
}

/// A fresh database `batchgate_bench_<random>` on the local PostgreSQL server.
struct PgDatabase {
    admin: PgConnection,
    name: String,
    url: String,
}

impl PgDatabase {
    /// `None`, said loudly, when the server cannot be reached.
    async fn create() -> Result<Option<Self>> {
        let admin_url = format!("{PG_SERVER}/postgres");
        let connecting = tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url));
        let mut admin = match connecting.await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Ok(skip_postgres(&e)),
            Err(elapsed) => return Ok(skip_postgres(&elapsed)),
        };
        let name = format!("batchgate_bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        admin.execute(format!("CREATE DATABASE {name}").as_str()).await?;
        println!("postgres: created database {name}");
        Ok(Some(Self { url: format!("{PG_SERVER}/{name}"), admin, name }))
    }

    /// Drops the database; FORCE, as the instances' pools are still open.
    async fn remove(mut self) -> Result<()> {
        let sql = format!("DROP DATABASE {} WITH (FORCE)", self.name);
        self.admin.execute(sql.as_str()).await?;
        self.admin.close().await?;
        println!("postgres: dropped database {}", self.name);
        Ok(())
    }
}

fn skip_postgres(why: &dyn std::fmt::Display) -> Option<PgDatabase> {
    println!("!!!!! SKIPPED postgres: cannot reach {PG_SERVER} ({why}) !!!!!");
    None
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
        Ok(Self { addr, base: format!("http://{addr}"), task })
    }

    /// The service as the binary serves it (`batchgate::serve_app`: its
    /// connection handling, timeouts and ceiling), not bare `axum::serve`.
    async fn start_app(app: batchgate::App) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let settings = Settings { scan_interval: None, ..Settings::default() };
        let edge = batchgate::server::Edge::from_settings(&settings)?;
        let task = tokio::spawn(async move {
            if let Err(e) = batchgate::serve_app(app, &settings, edge, listener, std::future::pending()).await {
                eprintln!("server on {addr} stopped: {e}");
            }
        });
        Ok(Self { addr, base: format!("http://{addr}"), task })
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
const FILL: [&str; 4] = [
    "INSERT INTO datasets (name, created_at, updated_at) SELECT DISTINCT dataset, $1, $1 FROM seed",
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
    let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)").fetch_one(&mut conn).await?;
    ensure!(busy == 0, "the WAL checkpoint was blocked");
    std::fs::File::open(db)?.sync_all()?;
    let (rows,): (i64,) = sqlx::query_as(COUNT_LOG).fetch_one(&mut conn).await?;
    conn.close().await?;
    ensure!(rows == ROWS, "seeded {rows} rows, expected {ROWS}");
    Ok(rows)
}

/// Seeds the (migrated) PostgreSQL registry in one transaction; returns the
/// `task_produce_log` row count.
async fn seed_postgres(url: &str) -> Result<i64> {
    let mut conn = PgConnection::connect(url).await?;
    let at = seed_time()?;
    let mut tx = conn.begin().await?;
    sqlx::query(&postgres_seed_table()).execute(&mut *tx).await?;
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
            let day = first.checked_add_days(Days::new(u64::from(j * 337 % DAYS))).context("date out of range")?;
            let dataset = format!("bench.ds{:04}", j % DATASETS);
            Ok(format!("GET /ready?dataset={dataset}&partition=dt%3D{day} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes())
        })
        .collect()
}

/// Loads each server in turn, [`ROUNDS`] times over, so that whatever else
/// the machine does meanwhile falls on all of them alike.
async fn measure(addrs: &[SocketAddr]) -> Result<Vec<Load>> {
    let requests: Arc<[Vec<u8>]> = requests()?.into();
    let mut tallies: Vec<Tally> = addrs.iter().map(|_| Tally::default()).collect();
    let before = CpuTicks::now(&[]);
    for round in 0..ROUNDS {
        // Each round starts with the next server, so none always goes first.
        for i in 0..addrs.len() {
            let k = (round + i) % addrs.len();
            tallies[k].add(load::window(addrs[k], &requests, CONNECTIONS, WARMUP, WINDOW).await?);
        }
    }
    if let (Some(before), Some(after)) = (before, CpuTicks::now(&[])) {
        let others = after.others_share_since(&before) * 100.0;
        let warning = if others > 5.0 { "  WARNING: the machine was not idle; the numbers are disturbed" } else { "" };
        println!("other processes used {others:.0}% of the machine's CPU while measuring{warning}");
    }
    tallies.into_iter().map(|t| t.summary(WINDOW)).collect()
}

// ---- Staleness ------------------------------------------------------------------

/// How `/ready` answers followed the changes of one partition.
struct Changes {
    /// After a start, `/ready` must say `running`.
    starts: Propagation,
    /// After a commit, `/ready` must show the new version.
    commits: Propagation,
}

/// How quickly changes showed.
#[derive(Default)]
struct Propagation {
    changes: usize,
    /// Changes whose first answer afterwards still showed the old standing.
    stale_first: usize,
    /// Changes that had not shown by [`PROPAGATION_LIMIT`].
    never: usize,
    max_delay: Duration,
}

/// Starts and commits [`STALE_ROUNDS`] batches of one partition through
/// `writer`, and after each change polls `/ready` for it on `reader`, which has
/// the partition's previous standing cached from the poll before.
async fn staleness(writer: &str, reader: &str) -> Result<Changes> {
    let http = reqwest::Client::new();
    let ready = format!("{reader}/ready?dataset={STALE_DATASET}&partition=dt%3D{STALE_DT}");
    let partition = format!("dt={STALE_DT}");
    let (status, body) = poll(&http, &ready).await?;
    ensure!(status == 404 && body["reason"] == "no_batch", "{STALE_DATASET} is not fresh: {status} {body}");
    let (mut starts, mut commits) = (Propagation::default(), Propagation::default());
    for _ in 0..STALE_ROUNDS {
        let start = json!({"task": STALE_TASK, "dataset": STALE_DATASET, "dt": STALE_DT, "partitions": [partition]});
        let started = post(&http, &format!("{writer}/v1/batches"), &start, 201).await?;
        let batch_id = started["batch_id"].as_str().context("start answered without batch_id")?;
        starts.observe(&http, &ready, |status, body| status == 404 && body["reason"] == "running").await?;

        let commit =
            json!({"marker": "m", "partitions": [{"partition": partition, "rows_written": 10, "row_count": 10}]});
        let committed = post(&http, &format!("{writer}/v1/batches/{batch_id}/commit"), &commit, 200).await?;
        let version = committed["partitions"][0]["version"]
            .as_i64()
            .with_context(|| format!("commit answered without partitions[0].version: {committed}"))?;
        commits
            .observe(&http, &ready, |status, body| status == 200 && body["partitions"][0]["version"] == version)
            .await?;
    }
    Ok(Changes { starts, commits })
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
    ensure!(status == expect, "POST {url}: {status} {answer}, expected {expect}");
    Ok(answer)
}

impl Propagation {
    /// Polls `url` right after a change until an answer passes `fresh`.
    async fn observe(&mut self, http: &reqwest::Client, url: &str, fresh: impl Fn(u16, &Value) -> bool) -> Result<()> {
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
            format!(", {} never within {} s", self.never, PROPAGATION_LIMIT.as_secs())
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

/// The table; the first row is the baseline.
fn report(measured: &[(Subject, Load)], pg_skipped: bool) {
    let Some((_, bare)) = measured.first() else {
        return;
    };
    println!();
    println!(
        "{:<32} {:>8} {:>17} {:>7} {:>7} {:>9} {:>7}  % of bare (target >= {TARGET_PERCENT}%)",
        "GET /ready", "req/s", "windows min-max", "p50 ms", "p99 ms", "requests", "non-200"
    );
    for (subject, load) in measured {
        let percent = load.rps / bare.rps * 100.0;
        let share = if subject.changes.is_none() {
            format!("{percent:5.1}%  baseline")
        } else {
            let pass = percent >= TARGET_PERCENT && load.non_ok == 0;
            format!("{percent:5.1}%  {}", verdict(pass))
        };
        println!(
            "{:<32} {:>8.0} {:>17} {:>7.3} {:>7.3} {:>9} {:>7}  {share}",
            subject.name,
            load.rps,
            format!("{:.0}-{:.0}", load.rps_min(), load.rps_max()),
            load.p50.as_secs_f64() * 1e3,
            load.p99.as_secs_f64() * 1e3,
            load.sent,
            load.non_ok,
        );
    }
    if pg_skipped {
        println!("{:<32} SKIPPED: PostgreSQL unreachable", "batchgate postgres");
    }
    println!();
    println!("stale answers: a change through one instance, then GET /ready on the reader at once");
    for (subject, _) in measured {
        if let Some(c) = &subject.changes {
            println!(
                "{:<32} start -> running: {}; commit -> new version: {}  {}",
                subject.name,
                c.starts.summary(),
                c.commits.summary(),
                verdict(c.starts.passed() && c.commits.passed()),
            );
        }
    }
}
