//! Fast at the size real registries reach (issue 14), measured from outside.
//!
//! For each backend (SQLite in a file, PostgreSQL at 127.0.0.1:5432 in a fresh
//! database dropped at the end) and each registry size (a small one, 10,000
//! batches, and a big one, 10,000,000 by default), this bench
//!
//! 1. migrates the database with the release binary, then seeds it in the
//!    service's own schema with bulk SQL (`tests/api/seed.rs`, shared with the
//!    query-plan tests; secondary indexes dropped during the load and built
//!    after it, then `ANALYZE`; on PostgreSQL `VACUUM (ANALYZE)`, so that
//!    the measured commits do not meet the first vacuum of a table just
//!    filled, setting hint bits and the visibility map, as a registry that
//!    grew over years would not);
//! 2. starts the release binary on each and measures how long it takes to
//!    answer `/healthz`, then start and commit latency (restatements of a
//!    partition that has one consumer) on the two sizes in alternating
//!    rounds, so that both meet the same moments of this machine;
//! 3. starts it again on each in turn (two replicas on PostgreSQL) and
//!    measures history listings (`/v1/batches` and `/v1/partitions`,
//!    `limit=100`), `/ready` on cached partitions (against a bare axum handler
//!    in another process, in alternating windows of the same run; the share
//!    is the median of the rounds' ratios) and on
//!    partitions never asked for (every answer a database read), and the
//!    stored bytes per batch;
//! 4. on the small registry only: write throughput at 1/8/32 clients on
//!    distinct datasets next to a pgbench script doing one INSERT and one
//!    UPDATE per transaction (and the same with a `pg_notify`, and with one
//!    lock held through COMMIT: the ceiling of the write design, see
//!    [`Pgbench`]), the bytes each batch the API wrote took (and, on a
//!    database of its own, took with names as long as real ones), and
//!    10,000 long-poll waiters on 1,000 partitions (RSS, queries while idle
//!    as the service counts them in `batchgate_db_operations_total`, how
//!    soon each is answered after its partition's publish, publishing speed
//!    with them and without, before they connect and after they left);
//!
//! The services run without their background scan (`--scan-interval 0`):
//! nothing measured needs it, and the idle figures then count only what
//! waiting costs.
//!
//! and prints every figure with its ratio to the small registry and PASS or
//! FAIL against the goals. All load is on 127.0.0.1, bounded in count
//! and time. How much CPU other processes took is printed: on a shared
//! machine the figures are disturbed when it is high.
//!
//! Knobs (environment): `BENCH_SMALL` (10000), `BENCH_BIG` (10000000),
//! `BENCH_BIG_PG` (PostgreSQL's big size, default `BENCH_BIG`),
//! `BENCH_BACKENDS` (`sqlite,postgres`), `BENCH_WAITERS` (10000),
//! `BENCH_SECONDS` (each throughput window, 5), `BENCH_SAMPLES` (commit
//! cycles and list requests per size, 200), `BENCH_IDLE` (seconds of each
//! idle observation, 10), `BENCH_ONLY` (`waiters`, `writes` or `bytes`:
//! only the small registry and only its long-poll waiters, its write
//! throughput, or the bytes a batch takes on a database of its own, for
//! working on them). Sizes are multiples of 1,000 days.
//!
//! Run: `cargo bench --bench registry`; a quick run:
//! `BENCH_BIG=100000 BENCH_WAITERS=1000 cargo bench --bench registry`; the
//! waiters alone: `BENCH_ONLY=waiters BENCH_BACKENDS=sqlite cargo bench --bench registry`.

#[path = "common/load.rs"]
mod load;
#[path = "../tests/api/seed.rs"]
mod seed;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use chrono::{Days, NaiveDate};
use load::{CpuTicks, Load, Tally};
use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_batchgate");
const PG_SERVER: &str = "postgres://postgres@127.0.0.1:5432";
/// Every seeded dataset has one batch per day for this many days.
const DAYS: u64 = 1_000;
const FIRST_DAY: &str = "2000-01-01";

const READY_CONNECTIONS: usize = 32;
const READY_ROUNDS: usize = 7;
const WARMUP: Duration = Duration::from_millis(500);
const WINDOW: Duration = Duration::from_secs(2);
const HOT_KEYS: u64 = 1_000;
const WAITED_PARTITIONS: usize = 1_000;
const WRITERS: [usize; 3] = [1, 8, 32];
/// Commit cycles are measured in this many rounds per size, alternating.
const COMMIT_ROUNDS: usize = 10;
/// Longest the commit rounds of one backend go on.
const COMMIT_BUDGET: Duration = Duration::from_secs(120);

// The goals.
const COMMIT_RATIO_GOAL: f64 = 1.2;
const LIST_P50_GOAL_MS: f64 = 5.0;
const READY_SHARE_GOAL: f64 = 0.8;
const READY_P99_GOAL_MS: f64 = 2.0;
const BYTES_GOAL: f64 = 1024.0;
const STARTUP_GOAL_MS: f64 = 1000.0;
const PG_WRITES_GOAL: f64 = 2000.0;
const SQLITE_WRITES_GOAL: f64 = 500.0;
const WAITER_RSS_GOAL_MB: f64 = 200.0;
const WAKE_GOAL_MS: f64 = 1000.0;
/// "Publishing speed unchanged with 10k waiting": within this share.
const PUBLISH_SHARE_GOAL: f64 = 0.8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

struct Knobs {
    small: u64,
    big: u64,
    big_pg: u64,
    backends: Vec<Backend>,
    waiters: usize,
    seconds: Duration,
    samples: usize,
    idle: Duration,
    /// `BENCH_ONLY`: one part of the small registry's figures alone.
    only: Option<Part>,
}

/// The parts of the small registry's figures `BENCH_ONLY` runs alone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The long-poll waiters.
    Waiters,
    /// Write throughput, with pgbench beside it on PostgreSQL.
    Writes,
    /// The bytes a batch takes on a database of its own, with short and
    /// long names (and, on PostgreSQL, when vacuum keeps up).
    Bytes,
}

impl Part {
    const ALL: [Part; 3] = [Part::Waiters, Part::Writes, Part::Bytes];

    /// The part's name in `BENCH_ONLY`.
    fn name(self) -> &'static str {
        match self {
            Part::Waiters => "waiters",
            Part::Writes => "writes",
            Part::Bytes => "bytes",
        }
    }
}

fn env_u64(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(v) => v.replace('_', "").parse().with_context(|| format!("{name}={v:?} is not a number")),
        Err(_) => Ok(default),
    }
}

impl Knobs {
    fn from_env() -> Result<Self> {
        let big = env_u64("BENCH_BIG", 10_000_000)?;
        let knobs = Self {
            small: env_u64("BENCH_SMALL", 10_000)?,
            big,
            big_pg: env_u64("BENCH_BIG_PG", big)?,
            backends: std::env::var("BENCH_BACKENDS")
                .unwrap_or_else(|_| "sqlite,postgres".into())
                .split(',')
                .map(|b| match b.trim() {
                    "sqlite" => Ok(Backend::Sqlite),
                    "postgres" => Ok(Backend::Postgres),
                    other => bail!("BENCH_BACKENDS: unknown backend {other:?}"),
                })
                .collect::<Result<_>>()?,
            waiters: usize::try_from(env_u64("BENCH_WAITERS", 10_000)?)?,
            seconds: Duration::from_secs(env_u64("BENCH_SECONDS", 5)?),
            samples: usize::try_from(env_u64("BENCH_SAMPLES", 200)?)?,
            idle: Duration::from_secs(env_u64("BENCH_IDLE", 10)?),
            only: match std::env::var("BENCH_ONLY").as_deref() {
                Err(_) | Ok("") => None,
                Ok(asked) => match Part::ALL.into_iter().find(|p| p.name() == asked) {
                    Some(part) => Some(part),
                    None => {
                        let parts: Vec<&str> = Part::ALL.iter().map(|p| p.name()).collect();
                        bail!("BENCH_ONLY: {asked:?} is not a part this bench runs alone ({})", parts.join(", "))
                    }
                },
            },
        };
        for size in [knobs.small, knobs.big, knobs.big_pg] {
            ensure!(
                size % DAYS == 0 && size / DAYS >= 10,
                "sizes are multiples of {DAYS} batches, at least 10 datasets"
            );
        }
        Ok(knobs)
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    if let Some(at) = args.iter().position(|a| a == "--bare-server") {
        let addr = args.get(at + 1).context("--bare-server ADDR")?.clone();
        return runtime.block_on(bare_server(addr));
    }
    raise_file_limit();
    runtime.block_on(run())
}

/// The baseline: a bare axum handler returning a constant JSON body, no
/// middleware, in its own process as batchgate is.
async fn bare_server(addr: String) -> Result<()> {
    use axum::routing::get;
    let router = axum::Router::new().route("/ready", get(|| async { axum::Json(json!({"ready": true})) }));
    let listener = TcpListener::bind(&addr).await?;
    axum::serve(listener, router).await?;
    Ok(())
}

/// 10,000 waiters need as many sockets here and in the service.
fn raise_file_limit() {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

async fn run() -> Result<()> {
    let knobs = Knobs::from_env()?;
    println!(
        "registry bench: {} cores, {} {BIN}; small registry {} batches, big {} (SQLite) / {} (PostgreSQL)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        // `cargo test --benches` builds both unoptimised: its figures are
        // not the goals' (bytes per batch are the same).
        if cfg!(debug_assertions) { "DEBUG binary (times not comparable to the goals)" } else { "release binary" },
        knobs.small,
        knobs.big,
        knobs.big_pg
    );
    if knobs.big_pg < 10_000_000 && knobs.backends.contains(&Backend::Postgres) {
        println!("NOTE: PostgreSQL's big registry is {} batches, not 10M (BENCH_BIG_PG)", knobs.big_pg);
    }
    let bare_addr = free_addr().await?;
    let mut bare = Command::new(std::env::current_exe()?)
        .args(["--bare-server", &bare_addr.to_string()])
        .kill_on_drop(true)
        .spawn()?;
    wait_listening(bare_addr, "/ready").await?;
    let bare_pid = bare.id().unwrap_or(0);
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    for &backend in &knobs.backends {
        if let Some(part) = knobs.only {
            let small = if part == Part::Bytes {
                // Databases of their own: the small registry is not needed.
                let mut f = Figures::default();
                own_db_figures(&reqwest::Client::new(), backend, &tmp, &mut f).await?;
                f
            } else {
                measure_small_alone(backend, &knobs, bare_addr, bare_pid, &tmp).await?
            };
            println!();
            println!("== {} ==  (BENCH_ONLY={})", backend.name(), part.name());
            match part {
                Part::Waiters => {
                    if let Some(w) = &small.waiters {
                        report_waiters(w);
                    }
                }
                Part::Writes => report_writes(backend, &small.writes),
                Part::Bytes => report_own_db_bytes(&small),
            }
            continue;
        }
        let [small, large] = measure_backend(backend, &knobs, bare_addr, bare_pid, &tmp).await?;
        report(backend, &small, &large);
    }
    bare.kill().await?;
    Ok(())
}

/// A free port on 127.0.0.1 (bound, then released for a child to take).
async fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0").await?.local_addr()?)
}

/// Waits until `path` answers on `addr`; how long that took.
async fn wait_listening(addr: SocketAddr, path: &str) -> Result<Duration> {
    let began = Instant::now();
    let http = reqwest::Client::new();
    let url = format!("http://{addr}{path}");
    loop {
        if let Ok(r) = http.get(&url).send().await {
            if r.status().is_success() {
                return Ok(began.elapsed());
            }
        }
        ensure!(began.elapsed() < Duration::from_secs(300), "{url} did not answer within 300 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

// ---- Databases ------------------------------------------------------------------

/// A bench database: a SQLite file, or a PostgreSQL database dropped at the end.
struct Db {
    backend: Backend,
    url: String,
    /// PostgreSQL: the database's name.
    name: String,
    path: Option<PathBuf>,
}

impl Db {
    async fn create(backend: Backend, label: &str, tmp: &tempfile::TempDir) -> Result<Self> {
        match backend {
            Backend::Sqlite => {
                let path = tmp.path().join(format!("{label}.db"));
                Ok(Self { backend, url: format!("sqlite://{}", path.display()), name: label.into(), path: Some(path) })
            }
            Backend::Postgres => {
                let name = format!("batchgate_bench_{label}_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
                let mut admin = PgConnection::connect(&format!("{PG_SERVER}/postgres")).await?;
                admin.execute(format!("CREATE DATABASE {name}").as_str()).await?;
                admin.close().await?;
                Ok(Self { backend, url: format!("{PG_SERVER}/{name}"), name, path: None })
            }
        }
    }

    async fn remove(self) -> Result<()> {
        match self.backend {
            Backend::Sqlite => {
                let path = self.path.context("sqlite path")?;
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Backend::Postgres => {
                let mut admin = PgConnection::connect(&format!("{PG_SERVER}/postgres")).await?;
                admin.execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str()).await?;
                admin.close().await?;
            }
        }
        Ok(())
    }

    /// Bytes the registry takes, indexes included.
    async fn size(&self) -> Result<i64> {
        match self.backend {
            Backend::Sqlite => {
                let mut c = SqliteConnection::connect(&self.url).await?;
                let pages: i64 = sqlx::query_scalar("PRAGMA page_count").fetch_one(&mut c).await?;
                let free: i64 = sqlx::query_scalar("PRAGMA freelist_count").fetch_one(&mut c).await?;
                let page: i64 = sqlx::query_scalar("PRAGMA page_size").fetch_one(&mut c).await?;
                c.close().await?;
                Ok((pages - free) * page)
            }
            Backend::Postgres => {
                let mut c = PgConnection::connect(&self.url).await?;
                let size: i64 =
                    sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(&mut c).await?;
                c.close().await?;
                Ok(size)
            }
        }
    }

    /// `VACUUM` on PostgreSQL: the space of dead row versions is free for
    /// new rows (the files do not shrink); nothing on SQLite, which keeps
    /// none.
    async fn vacuum(&self) -> Result<()> {
        if self.backend == Backend::Postgres {
            let mut c = PgConnection::connect(&self.url).await?;
            c.execute("VACUUM").await?;
            c.close().await?;
        }
        Ok(())
    }

    /// Bytes each table and index takes (SQLite: pages, `dbstat`;
    /// PostgreSQL: `pg_relation_size`, TOAST included), by name.
    async fn sizes(&self) -> Result<BTreeMap<String, i64>> {
        let rows: Vec<(String, i64)> = match self.backend {
            Backend::Sqlite => {
                let mut c = SqliteConnection::connect(&self.url).await?;
                let rows = sqlx::query_as("SELECT name, CAST(SUM(pgsize) AS INTEGER) FROM dbstat GROUP BY name")
                    .fetch_all(&mut c)
                    .await?;
                c.close().await?;
                rows
            }
            Backend::Postgres => {
                let mut c = PgConnection::connect(&self.url).await?;
                let rows = sqlx::query_as(
                    "SELECT c.relname::text, pg_relation_size(c.oid) + COALESCE(pg_relation_size(NULLIF(c.reltoastrelid, 0)), 0) \
                     FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'i')",
                )
                .fetch_all(&mut c)
                .await?;
                c.close().await?;
                rows
            }
        };
        Ok(rows.into_iter().collect())
    }

    async fn batches(&self) -> Result<i64> {
        const SQL: &str = "SELECT COUNT(*) FROM batches";
        match self.backend {
            Backend::Sqlite => {
                let mut c = SqliteConnection::connect(&self.url).await?;
                Ok(sqlx::query_scalar(SQL).fetch_one(&mut c).await?)
            }
            Backend::Postgres => {
                let mut c = PgConnection::connect(&self.url).await?;
                Ok(sqlx::query_scalar(SQL).fetch_one(&mut c).await?)
            }
        }
    }
}

/// The tables the seed fills; their secondary indexes are built after it.
const SEEDED: &str = "'batches', 'task_produce_log', 'partitions', 'batch_inputs'";

/// Migrates with the binary, then seeds `size` batches by bulk SQL.
async fn migrate_and_seed(db: &Db, size: u64) -> Result<Duration> {
    let status = Command::new(BIN)
        .args(["migrate", "--db", &db.url])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .status()
        .await?;
    ensure!(status.success(), "batchgate migrate failed");
    let (datasets, days) = (u32::try_from(size / DAYS)?, u32::try_from(DAYS)?);
    let began = Instant::now();
    match db.backend {
        Backend::Sqlite => {
            let options = SqliteConnectOptions::new()
                .filename(db.path.as_ref().context("sqlite path")?)
                .journal_mode(SqliteJournalMode::Off)
                .synchronous(SqliteSynchronous::Off)
                .foreign_keys(false)
                .pragma("cache_size", "-2000000")
                .pragma("temp_store", "memory");
            let mut c = SqliteConnection::connect_with(&options).await?;
            let indexes: Vec<(String, String)> = sqlx::query_as(&format!(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({SEEDED})"
            ))
            .fetch_all(&mut c)
            .await?;
            for (name, _) in &indexes {
                c.execute(format!("DROP INDEX {name}").as_str()).await?;
            }
            sqlx::raw_sql(&seed::sqlite(datasets, days)).execute(&mut c).await?;
            for (_, sql) in &indexes {
                c.execute(sql.as_str()).await?;
            }
            c.execute("ANALYZE").await?;
            c.execute("PRAGMA journal_mode = WAL").await?;
            c.close().await?;
            // The load ran without syncing: its pages are still being
            // written back by the kernel. Flushed here (PostgreSQL's
            // CHECKPOINT below), so that the service's first checkpoint and
            // every commit's fsync meet a quiet disk, as on a registry
            // that grew over years, not one loaded a minute ago.
            let path = db.path.clone().context("sqlite path")?;
            tokio::task::spawn_blocking(move || std::fs::File::open(path)?.sync_all()).await??;
        }
        Backend::Postgres => {
            let mut c = PgConnection::connect(&db.url).await?;
            let indexes: Vec<(String, String)> = sqlx::query_as(&format!(
                "SELECT i.indexname::text, i.indexdef FROM pg_indexes i WHERE i.schemaname = 'public' \
                 AND i.tablename IN ({SEEDED}) \
                 AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)"
            ))
            .fetch_all(&mut c)
            .await?;
            for (name, _) in &indexes {
                c.execute(format!("DROP INDEX {name}").as_str()).await?;
            }
            // Foreign keys are not checked row by row during the load: the
            // seed is consistent by construction.
            c.execute("SET session_replication_role = replica").await?;
            c.execute("SET maintenance_work_mem = '1GB'").await?;
            sqlx::raw_sql(&seed::postgres(datasets, days)).execute(&mut c).await?;
            for (_, sql) in &indexes {
                c.execute(sql.as_str()).await?;
            }
            c.execute("VACUUM (ANALYZE)").await?;
            c.execute("CHECKPOINT").await?;
            c.close().await?;
        }
    }
    let seeded = db.batches().await?;
    ensure!(seeded == i64::try_from(size)?, "seeded {seeded} batches, expected {size}");
    Ok(began.elapsed())
}

// ---- The service --------------------------------------------------------------------

/// The release binary serving a registry.
struct Service {
    child: Child,
    addr: SocketAddr,
    pid: u32,
    /// From spawning the process to its first `/healthz` answer.
    startup: Duration,
}

impl Service {
    async fn spawn(db: &Db, log: &std::path::Path) -> Result<Self> {
        let addr = free_addr().await?;
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let began = Instant::now();
        let child = Command::new(BIN)
            // No background scan: nothing measured needs it (leases here
            // do not expire), and the idle figures count only what waiting
            // costs.
            .args(["serve", "--db", &db.url, "--listen", &addr.to_string(), "--scan-interval", "0"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().context("child pid")?;
        wait_listening(addr, "/healthz").await?;
        Ok(Self { child, addr, pid, startup: began.elapsed() })
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGTERM, then wait (killed if it takes over 10 s).
    async fn stop(mut self) -> Result<()> {
        // SAFETY: a signal to our own child's pid.
        unsafe {
            libc::kill(i32::try_from(self.pid)?, libc::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_err() {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// Resident memory of a process, in MB.
fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

// ---- One registry size ----------------------------------------------------------

/// Everything measured on one registry.
#[derive(Default)]
struct Figures {
    batches: u64,
    seed: Duration,
    startup: Duration,
    seeded_bytes: f64,
    start: Vec<u32>,
    commit: Vec<u32>,
    list_batches: Vec<u32>,
    list_partitions: Vec<u32>,
    hot: Option<Load>,
    bare: Option<Load>,
    miss: Option<Load>,
    /// Share of the CPU other processes took while `/ready` was measured.
    others_cpu: f64,
    writes: Vec<Writes>,
    api_bytes: Option<f64>,
    /// The tables and indexes those bytes went to, largest first.
    api_bytes_by_relation: Vec<(String, f64)>,
    /// PostgreSQL: bytes per batch when vacuum keeps up ([`steady_bytes`]).
    steady_bytes: Option<f64>,
    /// Bytes per batch on a database of its own ([`own_db_bytes`]), with
    /// short names and with names as long as real ones.
    name_bytes: Option<(f64, f64)>,
    waiters: Option<Waiters>,
}

struct Writes {
    clients: usize,
    per_second: f64,
    p99: Duration,
    /// Cycles that failed (e.g. 503 storage_unavailable), and the first error.
    failed: usize,
    first_failure: Option<String>,
    pgbench: Option<Pgbench>,
}

/// pgbench's transactions per second at the same concurrency, for three
/// shapes of transaction: the one INSERT and one UPDATE; the same
/// with a `pg_notify` (PostgreSQL serialises the commits of notifying
/// transactions); and the same holding one advisory lock from before the
/// INSERT through its COMMIT, as a publishing commit holds the feed's lock.
/// The last is the ceiling of the service's write design on this disk.
struct Pgbench {
    plain: f64,
    notify: f64,
    locked: f64,
}

/// Both registries of `backend`: seeded, their commits measured in
/// alternating rounds ([`alternate_commits`]), then the rest of each.
async fn measure_backend(
    backend: Backend,
    knobs: &Knobs,
    bare: SocketAddr,
    bare_pid: u32,
    tmp: &tempfile::TempDir,
) -> Result<[Figures; 2]> {
    let big = if backend == Backend::Postgres { knobs.big_pg } else { knobs.big };
    let dbs = [Db::create(backend, "small", tmp).await?, Db::create(backend, "big", tmp).await?];
    let outcome = async {
        let mut figures = [seeded(&dbs[0], knobs.small).await?, seeded(&dbs[1], big).await?];
        alternate_commits(&dbs, &mut figures, knobs, tmp).await?;
        for (n, (db, f)) in dbs.iter().zip(&mut figures).enumerate() {
            measure_db(db, f, n == 0, knobs, bare, bare_pid, tmp).await?;
        }
        anyhow::Ok(figures)
    }
    .await;
    for db in dbs {
        db.remove().await?;
    }
    outcome
}

/// `BENCH_ONLY`: the small registry, seeded, and the one part asked for.
async fn measure_small_alone(
    backend: Backend,
    knobs: &Knobs,
    bare: SocketAddr,
    bare_pid: u32,
    tmp: &tempfile::TempDir,
) -> Result<Figures> {
    let db = Db::create(backend, "small", tmp).await?;
    let outcome = async {
        let mut f = seeded(&db, knobs.small).await?;
        measure_db(&db, &mut f, true, knobs, bare, bare_pid, tmp).await?;
        anyhow::Ok(f)
    }
    .await;
    db.remove().await?;
    outcome
}

/// Migrates and seeds `db` with `size` batches: the seed's figures.
async fn seeded(db: &Db, size: u64) -> Result<Figures> {
    let backend = db.backend;
    let mut f = Figures { batches: size, ..Figures::default() };
    println!("{} {size}: seeding …", backend.name());
    f.seed = migrate_and_seed(db, size).await?;
    f.seeded_bytes = db.size().await? as f64 / size as f64;
    println!(
        "{} {size}: seeded in {:.1} s, {:.0} bytes per batch; df: {}",
        backend.name(),
        f.seed.as_secs_f64(),
        f.seeded_bytes,
        disk_free()
    );
    Ok(f)
}

fn service_log(tmp: &tempfile::TempDir, f: &Figures, backend: Backend) -> PathBuf {
    tmp.path().join(format!("{}-{}.log", backend.name(), f.batches))
}

/// Start and commit latency of both registries, each started on its own
/// service (the first start after the seed: its time to `/healthz` is the
/// start-up figure), measured in [`COMMIT_ROUNDS`] alternating rounds of
/// restatements of a partition with one consumer (the next-to-last
/// dataset's days; the last dataset reads them). Whatever this machine
/// does meanwhile falls on both sizes alike, so the ratio compares
/// commits made seconds apart, not minutes: measured one size after the
/// other, the same code read 0.60x to 1.24x on SQLite.
async fn alternate_commits(
    dbs: &[Db; 2],
    figures: &mut [Figures; 2],
    knobs: &Knobs,
    tmp: &tempfile::TempDir,
) -> Result<()> {
    let mut services = Vec::with_capacity(2);
    for (db, f) in dbs.iter().zip(figures.iter_mut()) {
        let service = Service::spawn(db, &service_log(tmp, f, db.backend)).await?;
        f.startup = service.startup;
        services.push(service);
    }
    let http = reqwest::Client::new();
    let per_round = (knobs.samples.min(DAYS as usize) / COMMIT_ROUNDS).max(1);
    let outcome = async {
        let began = Instant::now();
        for round in 0..COMMIT_ROUNDS {
            // The order within a round alternates too.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                let k = figures[side].batches / DAYS - 2;
                let first = day((round * per_round) as u64)?;
                let base = services[side].base();
                let (starts, commits) =
                    commit_cycles(&http, &base, &format!("t{k}"), &format!("ds{k}"), first, per_round).await?;
                figures[side].start.extend(starts);
                figures[side].commit.extend(commits);
            }
            if began.elapsed() > COMMIT_BUDGET {
                println!(
                    "  commit cycles stopped after {} s: {} rounds of {COMMIT_ROUNDS} done",
                    COMMIT_BUDGET.as_secs(),
                    round + 1
                );
                break;
            }
        }
        anyhow::Ok(())
    }
    .await;
    for s in services {
        s.stop().await?;
    }
    if outcome.is_err() {
        for (db, f) in dbs.iter().zip(figures.iter()) {
            let log = service_log(tmp, f, db.backend);
            eprintln!("service log {}:\n{}", log.display(), std::fs::read_to_string(&log).unwrap_or_default());
        }
    }
    outcome
}

/// Everything but the seed and the commits, on one seeded registry.
#[allow(clippy::too_many_arguments)]
async fn measure_db(
    db: &Db,
    f: &mut Figures,
    small: bool,
    knobs: &Knobs,
    bare: SocketAddr,
    bare_pid: u32,
    tmp: &tempfile::TempDir,
) -> Result<()> {
    let backend = db.backend;
    let size = f.batches;
    let datasets = size / DAYS;
    let log = service_log(tmp, f, backend);
    let mut services = vec![Service::spawn(db, &log).await?];
    if backend == Backend::Postgres {
        services.push(Service::spawn(db, &log).await?);
    }
    let bases: Vec<String> = services.iter().map(Service::base).collect();
    let pids: Vec<u32> = services.iter().map(|s| s.pid).chain([bare_pid]).collect();
    let http = reqwest::Client::new();
    let outcome = async {
        match knobs.only {
            Some(Part::Waiters) => {
                f.waiters = Some(waiters(&http, &services, datasets - 2, knobs).await?);
                return anyhow::Ok(());
            }
            Some(Part::Writes) => {
                f.writes = writes(&http, &bases, db, knobs).await?;
                return anyhow::Ok(());
            }
            // Measured on databases of their own, without this one.
            Some(Part::Bytes) => unreachable!("BENCH_ONLY=bytes does not seed the small registry"),
            None => {}
        }
        f.list_batches = list(&http, &bases[0], "/v1/batches", datasets, knobs.samples).await?;
        f.list_partitions = list(&http, &bases[0], "/v1/partitions", datasets, knobs.samples).await?;
        let before = CpuTicks::now(&pids);
        (f.hot, f.bare) = ready_hot(services[0].addr, bare, datasets - 2).await?;
        f.miss = Some(ready_miss(services[0].addr, datasets).await?);
        if let (Some(b), Some(a)) = (before, CpuTicks::now(&pids)) {
            f.others_cpu = a.others_share_since(&b);
        }
        if small {
            let size0 = db.size().await?;
            let count0 = db.batches().await?;
            let sizes0 = db.sizes().await?;
            f.writes = writes(&http, &bases, db, knobs).await?;
            f.waiters = Some(waiters(&http, &services, datasets - 2, knobs).await?);
            let (size1, count1) = (db.size().await?, db.batches().await?);
            let batches = (count1 - count0).max(1) as f64;
            f.api_bytes = Some((size1 - size0) as f64 / batches);
            let mut grown: Vec<(String, f64)> = (db.sizes().await?.into_iter())
                .map(|(name, size)| (size - sizes0.get(&name).copied().unwrap_or(0), name))
                .filter(|(delta, _)| *delta > 0)
                .map(|(delta, name)| (name, delta as f64 / batches))
                .collect();
            grown.sort_by(|a, b| b.1.total_cmp(&a.1));
            f.api_bytes_by_relation = grown;
            own_db_figures(&http, backend, tmp, f).await?;
        }
        anyhow::Ok(())
    }
    .await;
    for s in services {
        s.stop().await?;
    }
    if outcome.is_err() {
        eprintln!("service log {}:\n{}", log.display(), std::fs::read_to_string(&log).unwrap_or_default());
    }
    outcome
}

fn disk_free() -> String {
    std::process::Command::new("df")
        .args(["-h", "--output=avail", env!("CARGO_TARGET_TMPDIR")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().last().unwrap_or("?").to_owned())
        .unwrap_or_else(|_| "?".into())
}

/// The seeded days are `FIRST_DAY + 0 ..`.
fn day(n: u64) -> Result<NaiveDate> {
    let first: NaiveDate = FIRST_DAY.parse()?;
    first.checked_add_days(Days::new(n)).context("date out of range")
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// POSTs `body`; the answer must have status `expect`.
async fn post(http: &reqwest::Client, url: &str, body: &Value, expect: u16) -> Result<Value> {
    let resp = http.post(url).json(body).send().await?;
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await?;
    ensure!(status == expect, "POST {url}: {status} {answer}, expected {expect}");
    Ok(answer)
}

/// Starts and commits one batch of one partition: the latency of each.
async fn cycle(
    http: &reqwest::Client,
    base: &str,
    task: &str,
    dataset: &str,
    dt: NaiveDate,
) -> Result<(Duration, Duration)> {
    let partition = format!("dt={dt}");
    let began = Instant::now();
    let start = json!({"task": task, "dataset": dataset, "dt": dt, "partitions": [partition]});
    let started = post(http, &format!("{base}/v1/batches"), &start, 201).await?;
    let start_took = began.elapsed();
    let id = started["batch_id"].as_str().context("start answered without batch_id")?;
    let commit = json!({"marker": format!("hdfs://warehouse/{dataset}/{partition}/_SUCCESS"),
        "partitions": [{"partition": partition, "rows_written": 1000, "row_count": 1000}]});
    let began = Instant::now();
    post(http, &format!("{base}/v1/batches/{id}/commit"), &commit, 200).await?;
    Ok((start_took, began.elapsed()))
}

/// `n` start+commit cycles of consecutive days from `first`, one after another.
async fn commit_cycles(
    http: &reqwest::Client,
    base: &str,
    task: &str,
    dataset: &str,
    first: NaiveDate,
    n: usize,
) -> Result<(Vec<u32>, Vec<u32>)> {
    let (mut starts, mut commits) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for d in 0..n {
        let dt = first.checked_add_days(Days::new(d as u64)).context("date")?;
        let (s, c) = cycle(http, base, task, dataset, dt).await?;
        starts.push(micros(s));
        commits.push(micros(c));
    }
    Ok((starts, commits))
}

/// First pages of a history listing (`limit=100`) over many datasets, each
/// timed from the request's first byte sent to the answer's last received.
async fn list(http: &reqwest::Client, base: &str, path: &str, datasets: u64, samples: usize) -> Result<Vec<u32>> {
    let mut took = Vec::with_capacity(samples);
    for n in 0..samples as u64 {
        let ds = n * 7919 % datasets;
        let url = format!("{base}{path}?dataset=ds{ds}&limit=100");
        let began = Instant::now();
        let resp = http.get(&url).send().await?;
        ensure!(resp.status() == 200, "GET {url}: {}", resp.status());
        let body = resp.bytes().await?;
        // The answer's latency ends with its last byte; parsing it is the
        // client's own work, checked after the clock stops.
        took.push(micros(began.elapsed()));
        let page: Value = serde_json::from_slice(&body)?;
        let items = page["items"].as_array().map_or(0, Vec::len);
        ensure!(items == 100, "GET {url}: {items} items, expected 100");
    }
    Ok(took)
}

fn ready_request(dataset: &str, dt: NaiveDate) -> Vec<u8> {
    format!("GET /ready?dataset={dataset}&partition=dt%3D{dt} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes()
}

/// `/ready` on [`HOT_KEYS`] seeded partitions of the first `datasets`
/// datasets (cached after the warm-up), in windows alternating with the bare
/// handler: (batchgate, bare).
async fn ready_hot(addr: SocketAddr, bare: SocketAddr, datasets: u64) -> Result<(Option<Load>, Option<Load>)> {
    let requests: Arc<[Vec<u8>]> = (0..HOT_KEYS)
        .map(|j| Ok(ready_request(&format!("ds{}", j % datasets), day(j * 337 % DAYS)?)))
        .collect::<Result<Vec<_>>>()?
        .into();
    let bare_requests: Arc<[Vec<u8>]> = vec![b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()].into();
    let (mut ours, mut theirs) = (Tally::default(), Tally::default());
    for round in 0..READY_ROUNDS {
        for turn in 0..2 {
            if (round + turn) % 2 == 0 {
                ours.add(load::window(addr, &requests, READY_CONNECTIONS, WARMUP, WINDOW).await?);
            } else {
                theirs.add(load::window(bare, &bare_requests, READY_CONNECTIONS, WARMUP, WINDOW).await?);
            }
        }
    }
    Ok((Some(ours.summary(WINDOW)?), Some(theirs.summary(WINDOW)?)))
}

/// `/ready` on partitions never asked for before (each a database read).
async fn ready_miss(addr: SocketAddr, datasets: u64) -> Result<Load> {
    let first: NaiveDate = "3000-01-01".parse()?;
    let requests: Arc<[Vec<u8>]> = (0..400_000u64)
        .map(|j| {
            Ok(ready_request(&format!("ds{}", j % datasets), first.checked_add_days(Days::new(j)).context("date")?))
        })
        .collect::<Result<Vec<_>>>()?
        .into();
    let measured = Duration::from_secs(3);
    load::window(addr, &requests, READY_CONNECTIONS, WARMUP, measured).await?.summary(measured)
}

/// The bytes a batch takes on databases of their own: with short names and
/// with long ones ([`own_db_bytes`]), and on PostgreSQL when vacuum keeps up
/// ([`steady_bytes`]).
async fn own_db_figures(
    http: &reqwest::Client,
    backend: Backend,
    tmp: &tempfile::TempDir,
    f: &mut Figures,
) -> Result<()> {
    if backend == Backend::Postgres {
        f.steady_bytes = Some(steady_bytes(http, tmp).await?);
    }
    f.name_bytes = Some((
        own_db_bytes(http, backend, tmp, Names::Short).await?,
        own_db_bytes(http, backend, tmp, Names::Long).await?,
    ));
    Ok(())
}

/// Cycles of each [`steady_bytes`] round.
const STEADY_CYCLES: u64 = 700;

/// Bytes per batch on PostgreSQL once the dead row versions a commit leaves
/// (its UPDATEs) are vacuumed and their space reused, as autovacuum does on
/// a registry that runs for months. On a database of its own, served by a
/// service of its own: a round of one-partition cycles and `VACUUM`, then
/// two more rounds, each reusing the space the previous one freed; the
/// growth over those two, divided by their batches.
async fn steady_bytes(http: &reqwest::Client, tmp: &tempfile::TempDir) -> Result<f64> {
    let db = Db::create(Backend::Postgres, "steady", tmp).await?;
    let log = tmp.path().join("steady.log");
    let service = Service::spawn(&db, &log).await?;
    let first: NaiveDate = "2200-01-01".parse()?;
    let mut size0 = 0;
    let outcome = async {
        for n in 0..3 * STEADY_CYCLES {
            let dt = first.checked_add_days(Days::new(n)).context("date")?;
            cycle(http, &service.base(), "steady", "steady", dt).await?;
            if (n + 1) % STEADY_CYCLES == 0 {
                db.vacuum().await?;
                if n + 1 == STEADY_CYCLES {
                    size0 = db.size().await?;
                }
            }
        }
        anyhow::Ok((db.size().await? - size0) as f64 / (2 * STEADY_CYCLES) as f64)
    }
    .await;
    service.stop().await?;
    db.remove().await?;
    outcome
}

/// Writers of [`own_db_bytes`], each on its own dataset.
const OWN_DB_CLIENTS: usize = 32;
/// Cycles each of them measures (after two that create the datasets).
const OWN_DB_CYCLES: u64 = 150;

#[derive(Clone, Copy)]
enum Names {
    /// As short as the rest of the bench's names: task `w07`, dataset `w.d07`.
    Short,
    /// As long as real ones: task `load_dws_order_detail_region_07`,
    /// dataset `dws.order_detail_region_07`.
    Long,
}

impl Names {
    fn of(self, c: usize) -> (String, String) {
        match self {
            Names::Short => (format!("w{c:02}"), format!("w.d{c:02}")),
            Names::Long => (format!("load_dws_order_detail_region_{c:02}"), format!("dws.order_detail_region_{c:02}")),
        }
    }
}

/// Bytes per one-partition batch the API writes on a database of its own
/// (no seed, no lineage, nothing but these writers): growth over
/// [`OWN_DB_CLIENTS`] × [`OWN_DB_CYCLES`] batches. Run with short names and
/// with long ones, the difference is what names cost: a name is stored
/// several times per batch, in rows and in index keys and in the batch id,
/// and the bench's other names have 2 to 6 characters.
async fn own_db_bytes(http: &reqwest::Client, backend: Backend, tmp: &tempfile::TempDir, names: Names) -> Result<f64> {
    let db = Db::create(backend, "names", tmp).await?;
    let service = Service::spawn(&db, &tmp.path().join("names.log")).await?;
    let base = service.base();
    let outcome = async {
        own_db_cycles(http, &base, "2200-01-01".parse()?, 2, names).await?;
        let (size0, count0) = (db.size().await?, db.batches().await?);
        own_db_cycles(http, &base, "2300-01-01".parse()?, OWN_DB_CYCLES, names).await?;
        let (size1, count1) = (db.size().await?, db.batches().await?);
        anyhow::Ok((size1 - size0) as f64 / (count1 - count0).max(1) as f64)
    }
    .await;
    service.stop().await?;
    db.remove().await?;
    outcome
}

async fn own_db_cycles(http: &reqwest::Client, base: &str, first: NaiveDate, cycles: u64, names: Names) -> Result<()> {
    let writers: Vec<_> = (0..OWN_DB_CLIENTS)
        .map(|c| {
            let (http, base) = (http.clone(), base.to_owned());
            tokio::spawn(async move {
                let (task, dataset) = names.of(c);
                for n in 0..cycles {
                    let dt = first.checked_add_days(Days::new(n)).context("date")?;
                    cycle(&http, &base, &task, &dataset, dt).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for w in writers {
        w.await??;
    }
    Ok(())
}

/// Start+commit cycles from 1/8/32 clients on distinct datasets, each for
/// `knobs.seconds`; next to pgbench on PostgreSQL.
async fn writes(http: &reqwest::Client, bases: &[String], db: &Db, knobs: &Knobs) -> Result<Vec<Writes>> {
    let mut out = Vec::new();
    for clients in WRITERS {
        let until = Instant::now() + knobs.seconds;
        let tasks: Vec<_> = (0..clients)
            .map(|c| {
                let (http, base) = (http.clone(), bases[c % bases.len()].clone());
                tokio::spawn(async move {
                    let (task, dataset) = (format!("w{clients}_{c}"), format!("w{clients}.c{c}"));
                    let first: NaiveDate = "2100-01-01".parse()?;
                    let (mut took, mut failed, mut n) = (Vec::new(), Vec::new(), 0);
                    while Instant::now() < until {
                        let dt = first.checked_add_days(Days::new(n)).context("date")?;
                        n += 1;
                        let began = Instant::now();
                        // A refused write (503 when the database's lock was
                        // not had in time) is counted, not fatal.
                        match cycle(&http, &base, &task, &dataset, dt).await {
                            Ok(_) => took.push(micros(began.elapsed())),
                            Err(e) => failed.push(e.to_string()),
                        }
                    }
                    anyhow::Ok((took, failed))
                })
            })
            .collect();
        let began = Instant::now();
        let (mut all, mut failed) = (Vec::new(), Vec::new());
        for t in tasks {
            let (took, errors) = t.await??;
            all.extend(took);
            failed.extend(errors);
        }
        let elapsed = began.elapsed();
        all.sort_unstable();
        let pgbench = match db.backend {
            Backend::Postgres => Some(Pgbench {
                plain: pgbench(db, clients, knobs.seconds, "", "").await?,
                notify: pgbench(db, clients, knobs.seconds, "", "SELECT pg_notify('bench_probe', 'x');\n").await?,
                locked: pgbench(
                    db,
                    clients,
                    knobs.seconds,
                    "SELECT pg_advisory_xact_lock(7);\n",
                    "SELECT pg_notify('bench_probe', 'x');\n",
                )
                .await?,
            }),
            Backend::Sqlite => None,
        };
        out.push(Writes {
            clients,
            per_second: all.len() as f64 / elapsed.as_secs_f64(),
            p99: if all.is_empty() { Duration::MAX } else { load::percentile(&all, 0.99) },
            failed: failed.len(),
            first_failure: failed.into_iter().next(),
            pgbench,
        });
    }
    if db.backend == Backend::Postgres {
        // pgbench's table is not the registry's: its bytes are not the API's.
        let mut c = PgConnection::connect(&db.url).await?;
        c.execute("DROP TABLE IF EXISTS bench_probe").await?;
        c.close().await?;
    }
    Ok(out)
}

/// Transactions per second of pgbench doing one INSERT and one UPDATE per
/// transaction with `clients` clients, on the bench database; `first` and
/// `last` are statements run before the INSERT and after the UPDATE, in the
/// same transaction.
async fn pgbench(db: &Db, clients: usize, seconds: Duration, first: &str, last: &str) -> Result<f64> {
    let mut c = PgConnection::connect(&db.url).await?;
    c.execute("CREATE TABLE IF NOT EXISTS bench_probe (id BIGSERIAL PRIMARY KEY, k BIGINT NOT NULL, v INT NOT NULL)")
        .await?;
    // Each run starts from the same empty table.
    c.execute("TRUNCATE bench_probe").await?;
    c.close().await?;
    let script = tempfile::NamedTempFile::new()?;
    std::fs::write(
        script.path(),
        format!(
            "\\set k random(1, 1000000000)\nBEGIN;\n{first}INSERT INTO bench_probe (k, v) VALUES (:k, 0) RETURNING id \\gset\n\
             UPDATE bench_probe SET v = v + 1 WHERE id = :id;\n{last}END;\n"
        ),
    )?;
    let out = Command::new("pgbench")
        .args(["-n", "-h", "127.0.0.1", "-U", "postgres", "-c", &clients.to_string(), "-j"])
        .arg(clients.min(2).to_string())
        .args(["-T", &seconds.as_secs().to_string(), "-f"])
        .arg(script.path())
        .arg(&db.name)
        .output()
        .await
        .context("pgbench (Debian: postgresql-client / postgresql-contrib)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no tps in pgbench's output: {text}{}", String::from_utf8_lossy(&out.stderr)))
}

// ---- Long-poll waiters --------------------------------------------------------------

struct Waiters {
    count: usize,
    idle: Duration,
    rss_idle_mb: f64,
    rss_waiting_mb: f64,
    /// Readiness reads from the database while idle, without and with waiters
    /// (the service's cache misses).
    reads_idle: (u64, u64),
    /// Times the service went to the database while idle (reads and write
    /// transactions, `batchgate_db_operations_total`, less what the
    /// bench's own scrapes cost), without and with waiters.
    ops_idle: (i64, i64),
    answered: usize,
    wake_p50: Duration,
    wake_p99: Duration,
    wake_max: Duration,
    /// Publishes per second, each phase [`WAITED_PARTITIONS`] new partitions
    /// of the same datasets, without waiters: before they connect and after
    /// they were all answered. The ratios are against the mean of the two
    /// ([`Waiters::alone`]), a baseline measured on both sides of the
    /// waiting, not minutes before.
    publish_alone: (f64, f64),
    /// The same with them connected, of the partitions they wait for (each
    /// publish answers its waiters).
    publish_waited: f64,
    /// Publishes per second with the waiters connected, of partitions
    /// nobody waits for (same count and kind as above): what a change that
    /// wakes no waiter costs while they wait.
    publish_unwaited: f64,
    /// Readiness lookups (cache hits and misses) during those publishes:
    /// a waiter woken by a change not its own would make some.
    lookups_unwaited: u64,
    /// CPU per publish in microseconds, (publishing service, bench process),
    /// without waiters, of unwaited partitions, of waited ones.
    publish_cpu_us: [(f64, f64); 3],
}

impl Waiters {
    /// Publishes per second without waiters: the mean of before and after.
    fn alone(&self) -> f64 {
        (self.publish_alone.0 + self.publish_alone.1) / 2.0
    }
}

/// One scrape of the service's `/metrics`.
async fn scrape(http: &reqwest::Client, base: &str) -> Result<String> {
    Ok(http.get(format!("{base}/metrics")).send().await?.text().await?)
}

/// The value of `name` in a scrape: its sample without labels, or the sum
/// of its labelled samples.
fn metric_in(text: &str, name: &str) -> Result<f64> {
    let mut found: Option<f64> = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name).filter(|r| r.starts_with([' ', '{'])) else {
            continue;
        };
        let value = rest.rsplit_once(' ').and_then(|(_, v)| v.trim().parse::<f64>().ok());
        *found.get_or_insert(0.0) += value.with_context(|| format!("no value in {line:?}"))?;
    }
    found.with_context(|| format!("no {name} in /metrics"))
}

/// A metric of the service's `/metrics` (see [`metric_in`]).
async fn metric(http: &reqwest::Client, base: &str, name: &str) -> Result<f64> {
    metric_in(&scrape(http, base).await?, name)
}

/// Readiness reads from the database (cache misses) and times the service
/// went to the database at all, so far: one scrape.
async fn db_counters(http: &reqwest::Client, base: &str) -> Result<(f64, f64)> {
    let text = scrape(http, base).await?;
    Ok((metric_in(&text, "batchgate_ready_cache_misses_total")?, metric_in(&text, "batchgate_db_operations_total")?))
}

/// Readiness reads from the database, and times the service went to the
/// database, over `idle`. A scrape reads the database gauges: what one
/// costs is measured first (two scrapes back to back) and taken off.
async fn idle_queries(http: &reqwest::Client, base: &str, idle: Duration) -> Result<(u64, i64)> {
    let (_, ops_a) = db_counters(http, base).await?;
    let (misses_b, ops_b) = db_counters(http, base).await?;
    tokio::time::sleep(idle).await;
    let (misses_c, ops_c) = db_counters(http, base).await?;
    Ok(((misses_c - misses_b) as u64, ((ops_c - ops_b) - (ops_b - ops_a)) as i64))
}

/// A run of publishes: when each commit was answered, publishes per second,
/// and the CPU each publish cost the service (`pid`) and this process (the
/// publisher and, with waiters, their readers), in microseconds.
struct Published {
    at: Vec<Instant>,
    rate: f64,
    cpu_us: (f64, f64),
}

/// Publishes one new partition per `(dataset, dt)`, one after another.
async fn publish(http: &reqwest::Client, base: &str, pid: u32, targets: &[(u64, NaiveDate)]) -> Result<Published> {
    let cpu = || load::process_cpu(Some(pid)).zip(load::process_cpu(None));
    let cpu0 = cpu();
    let began = Instant::now();
    let mut at = Vec::with_capacity(targets.len());
    for (d, dt) in targets {
        cycle(http, base, &format!("t{d}"), &format!("ds{d}"), *dt).await?;
        at.push(Instant::now());
    }
    let rate = targets.len() as f64 / began.elapsed().as_secs_f64();
    let per = |a: Duration, b: Duration| (b - a).as_secs_f64() * 1e6 / targets.len() as f64;
    let cpu_us = match (cpu0, cpu()) {
        (Some((s0, b0)), Some((s1, b1))) => (per(s0, s1), per(b0, b1)),
        _ => (f64::NAN, f64::NAN),
    };
    Ok(Published { at, rate, cpu_us })
}

/// `knobs.waiters` long-polls (`wait=120`) on [`WAITED_PARTITIONS`]
/// partitions of the first `datasets` datasets, then their publishes
/// (through the other replica on PostgreSQL).
async fn waiters(http: &reqwest::Client, services: &[Service], datasets: u64, knobs: &Knobs) -> Result<Waiters> {
    let (waited, publisher) = (&services[0], services.last().context("a service")?);
    let (base, pbase) = (waited.base(), publisher.base());
    let targets = |first: &str, n: usize| -> Result<Vec<(u64, NaiveDate)>> {
        let first: NaiveDate = first.parse()?;
        (0..n as u64)
            .map(|p| Ok((p % datasets, first.checked_add_days(Days::new(p / datasets)).context("date")?)))
            .collect()
    };
    // Every publishing phase: as many new partitions of the same datasets.
    let alone = publish(http, &pbase, publisher.pid, &targets("2400-01-01", WAITED_PARTITIONS)?).await?;
    let rss_idle_mb = rss_mb(waited.pid);
    let (reads0, ops0) = idle_queries(http, &base, knobs.idle).await?;

    let waited_on = targets("2300-01-01", WAITED_PARTITIONS)?;
    let requests: Vec<Vec<u8>> = waited_on
        .iter()
        .map(|(d, dt)| {
            format!("GET /ready?dataset=ds{d}&partition=dt%3D{dt}&wait=120 HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes()
        })
        .collect();
    let connecting = Arc::new(tokio::sync::Semaphore::new(200));
    let mut tasks = Vec::with_capacity(knobs.waiters);
    for w in 0..knobs.waiters {
        let p = w % WAITED_PARTITIONS;
        let (request, connecting, addr) = (requests[p].clone(), connecting.clone(), waited.addr);
        tasks.push(tokio::spawn(async move {
            let permit = connecting.acquire_owned().await?;
            let mut stream = TcpStream::connect(addr).await?;
            stream.write_all(&request).await?;
            drop(permit);
            let mut buf = Vec::new();
            let status = load::read_response(&mut stream, &mut buf).await?;
            anyhow::Ok((p, status, Instant::now()))
        }));
    }
    let began = Instant::now();
    while metric(http, &base, "batchgate_longpoll_waiters").await? < knobs.waiters as f64 {
        ensure!(began.elapsed() < Duration::from_secs(120), "the waiters did not all connect within 120 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss_waiting_mb = rss_mb(waited.pid);
    let (reads1, ops1) = idle_queries(http, &base, knobs.idle).await?;
    let lookups0 = lookups(http, &base).await?;
    let unwaited = publish(http, &pbase, publisher.pid, &targets("2500-01-01", WAITED_PARTITIONS)?).await?;
    let lookups_unwaited = (lookups(http, &base).await? - lookups0) as u64;
    let of_waited = publish(http, &pbase, publisher.pid, &waited_on).await?;
    let published_at = &of_waited.at;
    let rss_waiting_mb = rss_waiting_mb.max(rss_mb(waited.pid));
    let mut wakes = Vec::with_capacity(knobs.waiters);
    let deadline = Instant::now() + Duration::from_secs(30);
    for t in &mut tasks {
        let Ok(Ok(Ok((p, status, at)))) = tokio::time::timeout_at(deadline.into(), t).await else {
            continue;
        };
        if status == 200 {
            wakes.push(micros(at.saturating_duration_since(published_at[p])));
        }
    }
    // Whoever is still waiting (a failure the figures show) leaves now:
    // the last phase publishes with no waiter connected.
    for t in &tasks {
        t.abort();
    }
    let leaving = Instant::now();
    while metric(http, &base, "batchgate_longpoll_waiters").await? > 0.0 {
        if leaving.elapsed() > Duration::from_secs(60) {
            // Unanswered waiters are already a FAIL above; the baseline is
            // then measured with them.
            println!("  NOTE: waiters still connected 60 s after the last publish; publishing measured with them");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = publish(http, &pbase, publisher.pid, &targets("2600-01-01", WAITED_PARTITIONS)?).await?;
    wakes.sort_unstable();
    let answered = wakes.len();
    if wakes.is_empty() {
        wakes.push(u32::MAX);
    }
    Ok(Waiters {
        count: knobs.waiters,
        idle: knobs.idle,
        rss_idle_mb,
        rss_waiting_mb,
        reads_idle: (reads0, reads1),
        ops_idle: (ops0, ops1),
        answered,
        wake_p50: load::percentile(&wakes, 0.5),
        wake_p99: load::percentile(&wakes, 0.99),
        wake_max: Duration::from_micros(u64::from(*wakes.last().unwrap_or(&0))),
        publish_alone: (alone.rate, after.rate),
        publish_waited: of_waited.rate,
        publish_unwaited: unwaited.rate,
        lookups_unwaited,
        publish_cpu_us: [alone.cpu_us, unwaited.cpu_us, of_waited.cpu_us],
    })
}

/// Readiness lookups so far: cache hits and misses of `/ready`.
async fn lookups(http: &reqwest::Client, base: &str) -> Result<f64> {
    let text = scrape(http, base).await?;
    Ok(metric_in(&text, "batchgate_ready_cache_hits_total")? + metric_in(&text, "batchgate_ready_cache_misses_total")?)
}

// ---- Report ---------------------------------------------------------------------------

fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

fn p50_ms(v: &[u32]) -> f64 {
    q_ms(v, 0.5)
}

fn q_ms(v: &[u32], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    load::percentile(&s, q).as_secs_f64() * 1e3
}

fn size_name(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// `/ready`'s share of the bare handler's throughput: the median over the
/// rounds of [`ready_hot`] of each round's ratio (its two windows ran back
/// to back, so a slowdown of the machine that lasts seconds touches both),
/// with the lowest and highest round.
fn ready_share(f: &Figures) -> (f64, f64, f64) {
    let (Some(hot), Some(bare)) = (&f.hot, &f.bare) else {
        return (f64::NAN, f64::NAN, f64::NAN);
    };
    let mut ratios: Vec<f64> = hot.windows.iter().zip(&bare.windows).map(|(h, b)| h / b).collect();
    if ratios.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = if n % 2 == 1 { ratios[n / 2] } else { (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0 };
    (median, ratios[0], ratios[n - 1])
}

/// One row: the figure at each size, the big/small ratio, the goal and its verdict.
fn row(name: &str, unit: &str, small: f64, big: f64, goal: &str, pass: Option<bool>) {
    let ratio = big / small;
    println!("{name:<34} {small:>10.2} {big:>10.2} {unit:<6} {ratio:>6.2}x  {goal:<26} {}", pass.map_or("", verdict));
}

fn report(backend: Backend, s: &Figures, b: &Figures) {
    let rps = |l: &Option<Load>| l.as_ref().map_or(f64::NAN, |l| l.rps);
    let p99 = |l: &Option<Load>| l.as_ref().map_or(f64::NAN, |l| l.p99.as_secs_f64() * 1e3);
    let share = |f: &Figures| ready_share(f).0;
    println!();
    println!(
        "== {} ==  {:<23} {:>10} {:>10} {:<6} {:>7}  {:<26} verdict",
        backend.name(),
        "",
        size_name(s.batches),
        size_name(b.batches),
        "unit",
        "big/sm",
        "goal"
    );
    row("seed (bulk SQL)", "s", s.seed.as_secs_f64(), b.seed.as_secs_f64(), "", None);
    let startup = b.startup.as_secs_f64() * 1e3;
    row(
        "startup to /healthz",
        "ms",
        s.startup.as_secs_f64() * 1e3,
        startup,
        "< 1000 ms at big",
        Some(startup < STARTUP_GOAL_MS),
    );
    let commit_ratio = p50_ms(&b.commit) / p50_ms(&s.commit);
    row(
        "commit p50",
        "ms",
        p50_ms(&s.commit),
        p50_ms(&b.commit),
        "big <= 1.2x small",
        Some(commit_ratio <= COMMIT_RATIO_GOAL),
    );
    row("commit p99", "ms", q_ms(&s.commit, 0.99), q_ms(&b.commit, 0.99), "", None);
    row("start p50", "ms", p50_ms(&s.start), p50_ms(&b.start), "", None);
    for (name, sv, bv) in [
        ("GET /v1/batches limit=100 p50", &s.list_batches, &b.list_batches),
        ("GET /v1/partitions limit=100 p50", &s.list_partitions, &b.list_partitions),
    ] {
        let at_big = p50_ms(bv);
        row(
            name,
            "ms",
            p50_ms(sv),
            at_big,
            "<= 5 ms at big",
            Some(at_big <= LIST_P50_GOAL_MS && p50_ms(sv) <= LIST_P50_GOAL_MS),
        );
    }
    row("/ready hot req/s", "req/s", rps(&s.hot), rps(&b.hot), "", None);
    row("bare axum req/s (same windows)", "req/s", rps(&s.bare), rps(&b.bare), "", None);
    row(
        "/ready hot / bare axum",
        "x",
        share(s),
        share(b),
        ">= 0.8x",
        Some(share(s) >= READY_SHARE_GOAL && share(b) >= READY_SHARE_GOAL),
    );
    let spread = |f: &Figures| {
        let (_, low, high) = ready_share(f);
        format!("{low:.2}-{high:.2}")
    };
    println!("  (median of {READY_ROUNDS} rounds, each /ready's window over the bare handler's next to it; rounds ranged {} / {})", spread(s), spread(b));
    row(
        "/ready hot p99, 32 connections",
        "ms",
        p99(&s.hot),
        p99(&b.hot),
        "< 2 ms",
        Some(p99(&s.hot) < READY_P99_GOAL_MS && p99(&b.hot) < READY_P99_GOAL_MS),
    );
    row("/ready miss req/s", "req/s", rps(&s.miss), rps(&b.miss), "flat", None);
    row("bytes per batch, seeded", "B", s.seeded_bytes, b.seeded_bytes, "", None);
    println!("(seeded rows carry minimal documents; the bytes the API writes per batch are below)");
    println!(
        "other processes took {:.0}% / {:.0}% of the CPU while /ready was measured{}",
        s.others_cpu * 100.0,
        b.others_cpu * 100.0,
        if s.others_cpu.max(b.others_cpu) > 0.05 {
            "  WARNING: the machine was not idle; figures disturbed"
        } else {
            ""
        }
    );
    if let Some(api) = s.api_bytes {
        println!(
            "bytes per one-partition batch written by the API (small registry, size delta / batches): {api:.0}  goal <= 1024  {}",
            verdict(api <= BYTES_GOAL)
        );
        let parts: Vec<String> = s.api_bytes_by_relation.iter().map(|(name, b)| format!("{name} {b:.0}")).collect();
        println!("  by table and index: {}", parts.join(", "));
    }
    report_own_db_bytes(s);
    report_writes(backend, &s.writes);
    if let Some(w) = &s.waiters {
        report_waiters(w);
    }
}

/// The bytes per batch of [`own_db_figures`] against the goal.
fn report_own_db_bytes(s: &Figures) {
    if let Some((short, long)) = s.name_bytes {
        println!(
            "bytes per batch on a database of its own ({OWN_DB_CLIENTS} writers, nothing else): names of 3-5 characters (task w07, dataset w.d07) {short:.0}, as long as real ones (task load_dws_order_detail_region_07, dataset dws.order_detail_region_07) {long:.0}  goal <= 1024  {}",
            verdict(long <= BYTES_GOAL)
        );
    }
    if let Some(steady) = s.steady_bytes {
        println!(
            "bytes per batch when vacuum keeps up (own database; growth over rounds 2 and 3 of {STEADY_CYCLES} cycles, each followed by VACUUM): {steady:.0}  goal <= 1024  {}",
            verdict(steady <= BYTES_GOAL)
        );
    }
}

/// Write throughput at each concurrency against the goal.
fn report_writes(backend: Backend, writes: &[Writes]) {
    println!();
    let goal = if backend == Backend::Postgres { PG_WRITES_GOAL } else { SQLITE_WRITES_GOAL };
    println!(
        "write throughput, start+commit cycles on distinct datasets{}:",
        if backend == Backend::Postgres { ", two replicas" } else { "" }
    );
    for w in writes {
        let pgb = w.pgbench.as_ref().map_or(String::new(), |p| {
            format!(
                "   pgbench 1 INSERT + 1 UPDATE: {:.0} tx/s, + NOTIFY: {:.0}, + one lock held through COMMIT: {:.0}",
                p.plain, p.notify, p.locked
            )
        });
        let judged = if w.clients == 32 {
            format!("  goal >= {goal:.0}/s  {}", verdict(w.per_second >= goal && w.failed == 0))
        } else {
            String::new()
        };
        println!(
            "  {:>2} clients: {:>7.0} batches/s  cycle p99 {:>7.1} ms  failed cycles {}{pgb}{judged}",
            w.clients,
            w.per_second,
            w.p99.as_secs_f64() * 1e3,
            w.failed
        );
        if let Some(e) = &w.first_failure {
            println!("      first failure: {e}");
        }
    }
}

/// The long-poll waiters' figures against the goals.
fn report_waiters(w: &Waiters) {
    println!();
    println!("{} long-poll waiters (wait=120) on {WAITED_PARTITIONS} partitions:", w.count);
    let grown = w.rss_waiting_mb;
    println!(
        "  RSS {:.0} MB idle, {grown:.0} MB with the waiters  goal < 200 MB  {}",
        w.rss_idle_mb,
        verdict(grown < WAITER_RSS_GOAL_MB)
    );
    let quiet = w.reads_idle.1 == 0 && w.ops_idle.1 == 0;
    println!(
        "  queries while idle ({} s): readiness reads {} without / {} with waiters, database reads and writes {} without / {} with waiters  goal none  {}",
        w.idle.as_secs(),
        w.reads_idle.0,
        w.reads_idle.1,
        w.ops_idle.0,
        w.ops_idle.1,
        verdict(quiet)
    );
    let in_time = w.answered == w.count && w.wake_max.as_secs_f64() * 1e3 <= WAKE_GOAL_MS;
    println!(
        "  answered {}/{}; after their partition's publish: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms  goal all within 1 s  {}",
        w.answered,
        w.count,
        w.wake_p50.as_secs_f64() * 1e3,
        w.wake_p99.as_secs_f64() * 1e3,
        w.wake_max.as_secs_f64() * 1e3,
        verdict(in_time)
    );
    let (alone, waiting) = (w.alone(), w.publish_waited);
    let (before, after) = w.publish_alone;
    println!(
        "  publishes (start+commit, one client): {alone:.0}/s without ({before:.0} before the waiters, {after:.0} after), {waiting:.0}/s with the waiters ({:.2}x)  goal unchanged (>= 0.8x)  {}",
        waiting / alone,
        verdict(waiting / alone >= PUBLISH_SHARE_GOAL)
    );
    let unwaited = w.publish_unwaited;
    println!(
        "  publishes of partitions nobody waits for: {alone:.0}/s without, {unwaited:.0}/s with the waiters connected ({:.2}x; readiness lookups meanwhile {})  goal unchanged (>= 0.8x)  {}",
        unwaited / alone,
        w.lookups_unwaited,
        verdict(unwaited / alone >= PUBLISH_SHARE_GOAL)
    );
    let [a, u, w] = w.publish_cpu_us;
    println!(
        "  CPU per publish, publishing service / bench process (its waiters' readers included): without {:.0}/{:.0} µs, nobody's partitions {:.0}/{:.0} µs, waited partitions {:.0}/{:.0} µs",
        a.0, a.1, u.0, u.1, w.0, w.1
    );
}
