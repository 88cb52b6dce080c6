//! Storage: the registry, [`SqlStore`], one implementation for both backends.
//! Each operation is a method in the module named for what it changes or
//! reads (`batches.rs` start and heartbeat, `decide.rs` commit and fail, …).
//!
//! Every operation that changes state runs in one transaction that loads the
//! context a rule needs, asks [`crate::domain`] for the decision and writes it,
//! so two replicas can never decide on different histories. The SQL is shared
//! by both backends (see [`db`]); what differs (connecting, migrating, how a
//! write transaction serialises, how other replicas hear of changes) lives in
//! [`sqlite`] and [`postgres`].

mod alerts;
mod audit_form;
mod batches;
mod datasets;
pub mod db;
mod decide;
pub mod events;
mod feed;
mod lineage;
mod names;
mod openlineage;
mod outbox;
mod postgres;
mod reads;
mod records;
mod repairs;
mod retention;
mod scans;
mod sqlite;
pub(crate) mod sqlite_memory;
mod staleness;
mod tokens;

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use serde_json::Value;

pub use alerts::AlertRecord;
pub use batches::NEXT_SEQ_SQL;
pub use feed::{changes_page_sql, ChangeRecord};
pub use lineage::{Direction, InputRecord, LineageEdge, LineageGraph, LineageNode, UnreadyInput, DOWNSTREAM_SQL};
pub use openlineage::{LineageEvent, Recorded};
pub use outbox::{DeliveryQuery, DeliveryRecord, OutboxItem, Receivers};
pub use reads::batch_page_sql;
pub use records::{baseline_sql, fitness_of, BatchRecord, DatasetRecord, Event, PartitionRecord, Residue};
pub use repairs::{NewRepair, RepairSummary};
pub use retention::{Pruned, MAX_BATCHES_PER_PASS, PRUNE_BATCH};
pub use scans::expiry_sql;
pub use staleness::CONSUMERS_SQL;
pub use tokens::{audit_page_sql, AuditEntry, AuditQuery, AuditRecord, NewToken, TokenRecord, TOKENS_CHANGED};

use crate::changes::{Change, ChangeHub, Wake};
use crate::clock::Clock;
use crate::domain::batch::{BatchState, FailCategory, FailStage, Trigger};
use crate::domain::checks::CheckName;
use crate::domain::names::{DatasetName, PartitionSpec, TaskName};
use crate::domain::retry::RetryAdvice;
use crate::error::Result;
use crate::telemetry::Metrics;
use db::{args, Arg, Conn, Pooled, Tx};

/// A request to start a batch, already parsed.
#[derive(Debug, Clone)]
pub struct StartBatch {
    pub task: TaskName,
    pub dataset: DatasetName,
    pub dt: NaiveDate,
    pub partitions: Vec<PartitionSpec>,
    pub scope: Option<Value>,
    pub trigger: Trigger,
    pub run_ref: Option<String>,
    pub lease_seconds: i64,
    pub idempotency_key: Option<String>,
    /// The canonical request body: the same key with another body is refused.
    pub fingerprint: String,
    /// Partitions given as wildcards (`dt=*`), by position: refused, with a
    /// code that depends on the dataset's write mode.
    pub wildcard_partitions: Vec<(usize, String)>,
    /// Residue batches whose rows the task says it deleted (append mode).
    pub cleaned_batch_ids: Vec<String>,
    /// `(dataset, partition)` the batch reads.
    pub inputs: Vec<(String, String)>,
    /// Start even if an input is not ready (recorded on the batch).
    pub allow_unready_inputs: bool,
    /// The repair plan this batch carries out.
    pub repair_id: Option<i64>,
}

/// The answer to a start.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = StartResponse)]
pub struct Started {
    pub batch_id: String,
    /// The attempt number: counts attempts of this task for this dt from 1, gap-free.
    #[schema(minimum = 1)]
    pub seq: i64,
    /// `running` for a new batch; an `Idempotency-Key` replay reports the batch's current state.
    pub state: BatchState,
    pub lease_expires_at: DateTime<Utc>,
    pub residue: Vec<Residue>,
    pub retry: RetryAdvice,
    pub inputs: Vec<InputRecord>,
    /// False when an `Idempotency-Key` replay returned an existing batch.
    #[serde(skip)]
    pub created: bool,
}

/// A task's report that it failed.
#[derive(Debug, Clone)]
pub struct FailReport {
    pub stage: FailStage,
    pub category: FailCategory,
    pub message: Option<String>,
}

/// Which way a commit or fail went.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// No blocking check failed: the partitions' new version is live.
    Published,
    /// A blocking check failed; these failed, in check order.
    Rejected { failed_checks: Vec<CheckName> },
    /// The task reported that it failed.
    Failed,
}

/// What a commit or fail decided, with the batch record as it stood then.
/// The store keeps the record; the identical request again gets the same
/// `Decision` back (`replayed`), which `http/` turns into the same status
/// and the same bytes.
#[derive(Debug, Clone)]
pub struct Decision {
    pub decided: Decided,
    pub record: BatchRecord,
    /// The recorded answer to an earlier identical request.
    pub replayed: bool,
}

/// The lease after a heartbeat.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Lease {
    pub batch_id: String,
    pub state: BatchState,
    pub lease_expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Default)]
pub struct BatchQuery {
    pub task: Option<String>,
    pub dataset: Option<String>,
    pub dt: Option<NaiveDate>,
    pub state: Option<BatchState>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub limit: i64,
    /// Id of the last batch of the previous page.
    pub after_id: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct PartitionQuery {
    pub dataset: String,
    pub from: Option<NaiveDate>,
    pub to: Option<NaiveDate>,
    pub limit: i64,
    /// `(dt, partition)` of the last item of the previous page.
    pub after: Option<(NaiveDate, String)>,
}

/// One page of a keyset listing.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// The keyset position after the last item, when another page follows.
    pub next: Option<Position>,
}

/// Where a keyset listing resumes: the key of the last item listed. `http/`
/// encodes it as the opaque cursor (the JSON array `[id]` or `[dt, partition]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    Id(i64),
    Partition(NaiveDate, String),
}

impl Serialize for Position {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Position::Id(id) => (id,).serialize(s),
            Position::Partition(dt, partition) => (dt, partition).serialize(s),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct AlertQuery {
    pub state: Option<String>,
    pub dataset: Option<String>,
    pub severity: Option<String>,
    pub kind: Option<String>,
    pub limit: i64,
    pub after_id: Option<i64>,
}

/// Which database, with its pool.
#[derive(Clone)]
pub(crate) enum Backend {
    /// The pool (readers) and the write lane.
    Sqlite(sqlx::SqlitePool, sqlite::Lane),
    Postgres(sqlx::PgPool),
}

/// The registry on SQL: one implementation, two backends.
pub struct SqlStore {
    backend: Backend,
    clock: Arc<dyn Clock>,
    hub: Arc<ChangeHub>,
    /// Where every alert and change is pushed (besides each dataset's own receivers).
    receivers: Receivers,
    /// PostgreSQL: replicas' acknowledgements of changes.
    acks: Option<Arc<postgres::Acks>>,
    /// Where decisions are counted (and logged).
    metrics: Arc<Metrics>,
    /// Audit rows waiting to be written together (`tokens.rs`).
    audit: tokens::AuditQueue,
    /// The numbers of names stored once (`names.rs`).
    names: Arc<names::Names>,
    /// Which dataset each recently started or looked-up batch writes (`datasets.rs`).
    batch_datasets: datasets::BatchDatasets,
}

/// Pool size and connection settings.
#[derive(Debug, Clone)]
pub struct DbOptions {
    pub max_connections: u32,
    /// Longest wait for the database: connecting, a pooled connection,
    /// SQLite's writer lock.
    pub timeout: std::time::Duration,
    /// Service-wide alert webhook.
    pub webhook_url: Option<String>,
    /// Service-wide CloudEvents receivers (`--events-url`).
    pub events_urls: Vec<String>,
    /// Airflow's base URL (`--airflow-url`).
    pub airflow_url: Option<String>,
    /// The service's metrics, which decisions count into.
    pub metrics: Arc<Metrics>,
}

impl Default for DbOptions {
    fn default() -> Self {
        Self {
            max_connections: crate::config::DEFAULT_MAX_CONNECTIONS,
            webhook_url: None,
            events_urls: Vec::new(),
            airflow_url: None,
            metrics: Arc::default(),
            timeout: crate::config::default_duration(crate::config::DEFAULT_DB_TIMEOUT),
        }
    }
}

impl DbOptions {
    fn receivers(&self) -> Receivers {
        Receivers {
            webhook: self.webhook_url.clone(),
            events: self.events_urls.clone(),
            airflow: self.airflow_url.clone(),
        }
    }
}

/// Why migrations failed, for `connect`. A database a newer batchgate
/// migrated holds migrations this binary does not have: it is refused,
/// named so, rather than served in forms this binary does not know. A
/// migration may change no table and exist only for that (0023).
fn migration_error(e: sqlx::migrate::MigrateError) -> anyhow::Error {
    match e {
        sqlx::migrate::MigrateError::VersionMissing(v) => anyhow::anyhow!(
            "this database holds migration {v:04}, which this batchgate does not have: a newer \
             batchgate migrated it. Run that version or a later one; old and new binaries do not \
             share a database (README, \"Upgrading replicas\")"
        ),
        e => anyhow::Error::new(e).context("cannot apply the database migrations"),
    }
}

impl SqlStore {
    /// Connects to `url` (`sqlite:` or `postgres:`), applies migrations and,
    /// on PostgreSQL, starts listening for other replicas' changes.
    pub async fn connect(url: &str, opts: &DbOptions, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<Self>> {
        let store = match url.split(':').next() {
            Some("sqlite") => {
                let pool = sqlite::connect(url, opts).await?;
                let hub = ChangeHub::new(true);
                let lane = sqlite::Lane::open(&pool, hub.clone(), opts).await?;
                Self {
                    backend: Backend::Sqlite(pool, lane),
                    clock,
                    hub,
                    receivers: opts.receivers(),
                    acks: None,
                    metrics: opts.metrics.clone(),
                    audit: Default::default(),
                    names: Default::default(),
                    batch_datasets: Default::default(),
                }
            }
            Some("postgres" | "postgresql") => {
                let pool = postgres::connect(url, opts).await?;
                let hub = ChangeHub::new(false);
                let acks = postgres::Acks::new();
                postgres::spawn_listener(pool.clone(), hub.clone(), acks.clone()).await;
                Self {
                    backend: Backend::Postgres(pool),
                    clock,
                    hub,
                    receivers: opts.receivers(),
                    acks: Some(acks),
                    metrics: opts.metrics.clone(),
                    audit: Default::default(),
                    names: Default::default(),
                    batch_datasets: Default::default(),
                }
            }
            _ => anyhow::bail!("database URL must start with sqlite: or postgres:, got {url:?}"),
        };
        Ok(Arc::new(store))
    }

    /// Applies migrations to `url` and returns.
    pub async fn migrate(url: &str, timeout: std::time::Duration) -> anyhow::Result<()> {
        let opts = DbOptions { max_connections: 1, timeout, ..DbOptions::default() };
        match url.split(':').next() {
            Some("sqlite") => sqlite::connect(url, &opts).await.map(drop),
            Some("postgres" | "postgresql") => postgres::connect(url, &opts).await.map(drop),
            _ => anyhow::bail!("database URL must start with sqlite: or postgres:, got {url:?}"),
        }
    }

    /// A write transaction holding the registry's single writer lock until it
    /// ends: a turn on SQLite's write lane (grouped with others into one
    /// commit, see `sqlite.rs`), the write lock exclusively on PostgreSQL
    /// (see `postgres::begin_write` for the rule).
    async fn begin_write(&self) -> Result<Tx> {
        self.metrics.db_write();
        Ok(match &self.backend {
            Backend::Sqlite(_, lane) => Tx::Sqlite(lane.begin().await?),
            Backend::Postgres(pool) => Tx::Postgres(postgres::begin_write(pool, postgres::Scope::Registry).await?),
        })
    }

    /// A write transaction of the batch lifecycle, which changes only what
    /// `keys` name (datasets, see [`dataset_key`]; idempotency keys) until
    /// it publishes, and then takes the feed's lock ([`feed::lock`]). On
    /// PostgreSQL writers under other keys run at the same time (see
    /// `postgres::begin_write` for the rule); SQLite has one writer.
    async fn begin_write_under(&self, keys: &[String]) -> Result<Tx> {
        Ok(match &self.backend {
            Backend::Sqlite(..) => return self.begin_write().await,
            Backend::Postgres(pool) => {
                self.metrics.db_write();
                Tx::Postgres(postgres::begin_write(pool, postgres::Scope::Keys(keys)).await?)
            }
        })
    }

    /// Runs `sql`, an `INSERT … SELECT` that only appends (it changes no row
    /// a key locks), as a transaction of its own, and returns the rows it
    /// wrote. On PostgreSQL that is one round trip: the statement runs alone
    /// (its own transaction), and its `SELECT` takes the write lock shared
    /// (rule 1 of `postgres::begin_write`) before it gives a row. On SQLite
    /// it is a turn on the write lane.
    async fn write_alone(&self, sql: &str, args: Vec<Arg>) -> Result<u64> {
        match &self.backend {
            Backend::Sqlite(..) => {
                let mut tx = self.begin_write().await?;
                let n = tx.conn().exec(sql, args).await?;
                tx.commit().await?;
                Ok(n)
            }
            Backend::Postgres(pool) => {
                self.metrics.db_write();
                let mut c = pool.acquire().await?;
                let sql = format!("{sql} WHERE {}", postgres::shared_write_lock());
                Ok(Conn::Postgres(&mut c).exec(&sql, args).await?)
            }
        }
    }

    /// A write transaction of the batch lifecycle on one batch: under its
    /// dataset's lock on PostgreSQL (see [`Self::begin_write_under`]).
    async fn begin_write_for_batch(&self, batch_id: &str) -> Result<Tx> {
        let Backend::Postgres(_) = &self.backend else {
            return self.begin_write().await;
        };
        // A batch's dataset never changes: read before locking it. (No such
        // batch: no key, and the caller finds no batch under the lock.)
        let dataset = self.dataset_of_batch(batch_id).await?;
        let keys: Vec<String> = dataset.iter().map(|d| dataset_key(d)).collect();
        self.begin_write_under(&keys).await
    }

    async fn read(&self) -> Result<Pooled> {
        self.metrics.db_read();
        Ok(match &self.backend {
            Backend::Sqlite(pool, _) => Pooled::Sqlite(pool.acquire().await?),
            Backend::Postgres(pool) => Pooled::Postgres(pool.acquire().await?),
        })
    }

    /// Commits, then publishes the changes to this replica's hub. On
    /// PostgreSQL the changes are also notified to every replica from inside
    /// the transaction (delivered only if it commits), and the answer waits
    /// until each live replica has applied them.
    async fn finish(&self, tx: Tx, changes: Vec<Change>) -> Result<()> {
        self.finish_waking(tx, changes, Wake::Waiters).await
    }

    /// [`SqlStore::finish`] for changes that only make partitions not ready
    /// (a start): they wake no long-poll (see [`Wake::Nobody`]), on any
    /// replica (the `NOTIFY` says so).
    async fn finish_unready(&self, tx: Tx, changes: Vec<Change>) -> Result<()> {
        self.finish_waking(tx, changes, Wake::Nobody).await
    }

    async fn finish_waking(&self, tx: Tx, changes: Vec<Change>, wake: Wake) -> Result<()> {
        self.finish_announced(tx, changes, wake, None).await
    }

    /// Sends the notice of `change`, one of those the transaction will
    /// finish with, now (PostgreSQL delivers it at the `COMMIT`), then takes
    /// the feed's lock ([`feed::lock`]), in one round trip: a publish sends
    /// its notice before it takes the lock. On SQLite there is nothing to
    /// send (the lane publishes after its group's `COMMIT`).
    async fn announce_and_lock_feed(
        &self,
        c: &mut Conn<'_>,
        change: Change,
        ripple: &mut staleness::Ripple,
    ) -> Result<Option<postgres::Announced>> {
        let (Conn::Postgres(pg), Some(acks), false) = (&mut *c, &self.acks, ripple.feed_locked) else {
            feed::lock(c, ripple).await?;
            return Ok(None);
        };
        let mut announced = postgres::Announced::new(acks.clone());
        postgres::notify_and_lock_feed(pg, &postgres::notice(&change, Wake::Waiters, announced.token())).await?;
        ripple.feed_locked = true;
        announced.sent(change);
        Ok(Some(announced))
    }

    /// [`SqlStore::finish_waking`] for a transaction that may have
    /// announced a change already ([`SqlStore::announce_and_lock_feed`]): the others are notified
    /// under its token (the announced one again only if it is not among
    /// them, which costs a replica one cache miss).
    async fn finish_announced(
        &self,
        tx: Tx,
        changes: Vec<Change>,
        wake: Wake,
        announced: Option<postgres::Announced>,
    ) -> Result<()> {
        let t = match tx {
            // The lane publishes after its group's COMMIT.
            Tx::Sqlite(t) => return Ok(t.commit_waking(changes, wake).await?),
            Tx::Postgres(t) => t,
        };
        // Forgotten when dropped, on every way out but the last.
        let (token, notices) = match &self.acks {
            Some(acks) if !changes.is_empty() => {
                let token = announced.unwrap_or_else(|| postgres::Announced::new(acks.clone()));
                let mut sent = token.change();
                let mut notices = Vec::with_capacity(changes.len());
                for c in &changes {
                    if sent == Some(c) {
                        sent = None;
                        continue;
                    }
                    notices.push(postgres::notice(c, wake, token.token()));
                }
                (Some(token), notices)
            }
            _ => (None, Vec::new()),
        };
        // The notices go with the COMMIT, in its round trip.
        t.commit_after(notices).await?;
        for c in changes {
            self.hub.apply(c, wake);
        }
        if let Some(token) = token {
            token.wait().await;
        }
        Ok(())
    }

    fn dialect(&self) -> db::Dialect {
        match self.backend {
            Backend::Sqlite(..) => db::Dialect::Sqlite,
            Backend::Postgres(_) => db::Dialect::Postgres,
        }
    }

    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(..) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The hub this store publishes its changes to.
    pub fn hub(&self) -> &Arc<ChangeHub> {
        &self.hub
    }

    /// The registry's clock: what "now" is for leases and deadlines.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Whether the database answers.
    pub async fn health(&self) -> Result<()> {
        let mut r = self.read().await?;
        let _: (i64,) = r.conn().one("SELECT CAST(1 AS BIGINT)", args![]).await?;
        Ok(())
    }

    /// What a write's changes set off, starting empty.
    fn ripple(&self) -> staleness::Ripple {
        staleness::Ripple {
            changes: Vec::new(),
            receivers: self.receivers.clone(),
            feed_locked: false,
            names: self.names.clone(),
            learned: Vec::new(),
        }
    }
}

/// How many times in all a write is run when PostgreSQL keeps refusing it
/// to break deadlocks.
const WRITE_ATTEMPTS: u32 = 4;

/// Runs a write again when the database refused it to break a deadlock
/// ([`crate::error::Error::is_retryable`]): that write was rolled back whole, so running it
/// again from the start is safe, and the request is answered as if nothing
/// had happened instead of with a 500. (On PostgreSQL two writers can meet
/// row against row, see `postgres::begin_write`; SQLite has one writer.)
/// Each run again is counted in `metrics` (`batchgate_db_write_retries_total`).
async fn retrying<T, F: std::future::Future<Output = Result<T>>>(
    metrics: &Metrics,
    write: impl FnMut() -> F,
) -> Result<T> {
    // The other writer is finishing: a short, growing pause lets it.
    let pause = |attempt: u32| std::time::Duration::from_millis(5 << attempt);
    let what = "the database refused a write to break a deadlock";
    let again = |e: &crate::error::Error| {
        let retried = e.is_retryable();
        if retried {
            metrics.db_write_retried();
        }
        retried
    };
    with_attempts(what, WRITE_ATTEMPTS, again, pause, write).await
}

/// Runs `op` up to `attempts` times in all: again after an error `again`
/// accepts, `pause(attempt)` later, saying `what` happened in the log. The
/// last answer is returned.
pub(super) async fn with_attempts<T, F: std::future::Future<Output = Result<T>>>(
    what: &str,
    attempts: u32,
    again: impl Fn(&crate::error::Error) -> bool,
    pause: impl Fn(u32) -> std::time::Duration,
    mut op: impl FnMut() -> F,
) -> Result<T> {
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if attempt < attempts && again(&e) => {
                tracing::warn!(error = %e, attempt, "{what}; trying again");
                tokio::time::sleep(pause(attempt)).await;
                attempt += 1;
            }
            answer => return answer,
        }
    }
}

/// The lock key of a dataset, for [`SqlStore::begin_write_under`].
fn dataset_key(dataset: &str) -> String {
    format!("dataset:{dataset}")
}

/// Partitions as one log field: `dt=2026-08-24,dt=2026-08-25`.
pub(crate) fn partition_list(partitions: &[PartitionSpec]) -> String {
    partitions.iter().map(PartitionSpec::as_str).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A database error carrying only its SQLSTATE.
    #[derive(Debug)]
    struct Refused(&'static str);

    impl std::fmt::Display for Refused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "refused with {}", self.0)
        }
    }

    impl std::error::Error for Refused {}

    impl sqlx::error::DatabaseError for Refused {
        fn message(&self) -> &str {
            "refused"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn refused(code: &'static str) -> crate::error::Error {
        crate::error::Error::Database(sqlx::Error::Database(Box::new(Refused(code))))
    }

    fn retries(m: &Metrics) -> String {
        m.sample("batchgate_db_write_retries_total").expect("the counter")
    }

    #[tokio::test]
    async fn a_write_refused_to_break_a_deadlock_runs_again_and_each_run_again_is_counted() {
        let metrics = Metrics::new();
        let runs = AtomicU32::new(0);
        let answer = retrying(&metrics, || async {
            match runs.fetch_add(1, Ordering::SeqCst) {
                0 => Err(refused("40P01")),
                1 => Err(refused("40001")),
                _ => Ok("written"),
            }
        })
        .await;
        assert_eq!(answer.expect("the third run succeeds"), "written");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(retries(&metrics), "2");
    }

    #[tokio::test]
    async fn other_errors_and_the_last_refusal_are_answered_and_not_counted_as_retries() {
        let metrics = Metrics::new();
        let runs = AtomicU32::new(0);
        let answer: Result<()> = retrying(&metrics, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(refused("23505"))
        })
        .await;
        assert_eq!(answer.expect_err("a unique violation is not run again").code(), "storage_error");
        assert_eq!((runs.load(Ordering::SeqCst), retries(&metrics)), (1, "0".to_owned()));

        let runs = AtomicU32::new(0);
        let answer: Result<()> = retrying(&metrics, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(refused("40P01"))
        })
        .await;
        assert!(answer.expect_err("refused every time").is_retryable());
        assert_eq!(runs.load(Ordering::SeqCst), WRITE_ATTEMPTS);
        assert_eq!(retries(&metrics), (WRITE_ATTEMPTS - 1).to_string());
    }
}
