//! Storage: the registry behind the [`Store`] trait.
//!
//! Every operation that changes state runs in one transaction that loads the
//! context a rule needs, asks [`crate::domain`] for the decision and writes it,
//! so two replicas can never decide on different histories. The SQL is shared
//! by both backends (see [`db`]); what differs (connecting, migrating, how a
//! write transaction serialises, how other replicas hear of changes) lives in
//! [`sqlite`] and [`postgres`].

mod alerts;
mod batches;
pub mod db;
mod decide;
pub mod events;
mod lineage;
mod openlineage;
mod outbox;
mod postgres;
mod reads;
mod records;
mod repairs;
mod retention;
mod scans;
mod sqlite;
mod tokens;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use serde_json::Value;

pub use alerts::AlertRecord;
pub use lineage::{
    ChangeRecord, Direction, InputRecord, LineageEdge, LineageGraph, LineageNode, UnreadyInput, CONSUMERS_SQL,
    DOWNSTREAM_SQL,
};
pub use openlineage::{LineageEvent, Recorded};
pub use outbox::{DeliveryQuery, DeliveryRecord, OutboxItem, Receivers};
pub use records::{fitness_of, BatchRecord, DatasetRecord, PartitionRecord, Residue};
pub use repairs::{NewRepair, RepairSummary};
pub use retention::{Pruned, PRUNE_BATCH};
pub use tokens::{AuditEntry, AuditQuery, AuditRecord, NewToken, TokenRecord, TOKENS_CHANGED};

use crate::changes::{Change, ChangeHub, TaskLatest};
use crate::clock::Clock;
use crate::domain::batch::{BatchState, FailCategory, FailStage, Trigger};
use crate::domain::checks::{CheckName, CommitEvidence};
use crate::domain::names::{DatasetName, PartitionSpec, TaskName};
use crate::domain::policy::DatasetPolicy;
use crate::domain::repair::RepairPlan;
use crate::domain::retry::RetryAdvice;
use crate::error::Result;
use crate::telemetry::{Metrics, StoreGauges};
use db::{Pooled, Tx};

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

/// The registry.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    fn backend(&self) -> &'static str;
    /// The hub this store publishes its changes to.
    fn hub(&self) -> &Arc<ChangeHub>;
    /// The registry's clock: what "now" is for leases and deadlines.
    fn now(&self) -> DateTime<Utc>;
    async fn health(&self) -> Result<()>;

    async fn put_dataset(&self, name: &DatasetName, policy: &DatasetPolicy) -> Result<(DatasetRecord, bool)>;
    async fn get_dataset(&self, name: &str) -> Result<Option<DatasetRecord>>;
    async fn list_datasets(&self) -> Result<Vec<DatasetRecord>>;

    async fn start_batch(&self, req: StartBatch) -> Result<Started>;
    async fn heartbeat(&self, batch_id: &str) -> Result<Lease>;
    async fn commit_batch(&self, batch_id: &str, evidence: CommitEvidence, fingerprint: String) -> Result<Decision>;
    async fn fail_batch(&self, batch_id: &str, report: FailReport, fingerprint: String) -> Result<Decision>;

    async fn get_batch(&self, batch_id: &str) -> Result<Option<BatchRecord>>;
    async fn list_batches(&self, q: &BatchQuery) -> Result<Page<BatchRecord>>;
    async fn list_partitions(&self, q: &PartitionQuery) -> Result<Page<PartitionRecord>>;
    /// The current standing of each named partition, in order; `None` where
    /// no batch ever named it.
    async fn partition_status(&self, dataset: &str, partitions: &[String]) -> Result<Vec<Option<PartitionRecord>>>;
    /// The latest batch a task started for a data date.
    async fn latest_task_batch(&self, task: &str, dt: NaiveDate) -> Result<Option<TaskLatest>>;

    /// Records that the task's write to the target committed.
    async fn record_written(&self, batch_id: &str, partitions: Vec<(PartitionSpec, i64)>) -> Result<BatchRecord>;
    /// Abandons every running batch whose lease has expired; returns their ids.
    async fn expire_leases(&self) -> Result<Vec<String>>;
    /// Raises `deadline_missed` for data dates past their deadline; returns how many.
    async fn check_deadlines(&self) -> Result<usize>;
    async fn list_alerts(&self, q: &AlertQuery) -> Result<Page<AlertRecord>>;
    /// Takes up to `limit` due deliveries (webhooks, Airflow asset events,
    /// CloudEvents) for a while, so that no other replica sends them
    /// meanwhile; never one that an earlier undelivered one of the same
    /// partition and receiver holds back.
    async fn claim_deliveries(&self, limit: i64) -> Result<Vec<OutboxItem>>;
    async fn delivery_sent(&self, id: i64) -> Result<()>;
    async fn delivery_failed(&self, id: i64, error: &str, retry_at: DateTime<Utc>) -> Result<()>;
    /// Gives a delivery up for good (its host is no longer allowed); `reason` is kept with it.
    async fn delivery_given_up(&self, id: i64, reason: &str) -> Result<()>;
    /// Hands a claimed delivery back unsent.
    async fn release_delivery(&self, id: i64) -> Result<()>;
    /// Deliveries, newest first.
    async fn list_deliveries(&self, q: &DeliveryQuery) -> Result<Page<DeliveryRecord>>;
    /// Raises an alert about a dataset's pushes (at most once per `dedup_key`).
    async fn raise_push_alert(
        &self,
        kind: crate::domain::alerts::AlertKind,
        dataset: &str,
        partition: Option<&str>,
        dedup_key: &str,
        message: &str,
    ) -> Result<()>;
    /// Prunes the change feed, resolved alerts, finished deliveries and raw
    /// OpenLineage events older than `cutoff`, in small batches.
    async fn prune(&self, cutoff: DateTime<Utc>) -> Result<Pruned>;
    /// The highest change-feed position pruned so far (0: none): a cursor
    /// below it points into pruned history.
    async fn changes_horizon(&self) -> Result<i64>;

    /// Takes a partition out of service until a new batch publishes it;
    /// everything built on it goes stale.
    async fn invalidate_partition(&self, dataset: &str, partition: &str, reason: &str) -> Result<()>;
    /// Readiness changes after feed position `after`, in commit order.
    async fn list_changes(&self, after: i64, dataset: Option<&str>, limit: i64) -> Result<Vec<ChangeRecord>>;
    async fn lineage(&self, dataset: &str, partition: &str, direction: Direction, depth: u32) -> Result<LineageGraph>;
    /// Plans a repair from the registry's evidence.
    async fn create_repair(&self, repair: NewRepair) -> Result<RepairPlan>;
    /// A plan with its progress.
    async fn get_repair(&self, id: i64) -> Result<Option<RepairPlan>>;
    /// The most recent repair plans, newest first (without their progress).
    async fn list_repairs(&self, limit: i64) -> Result<Vec<RepairSummary>>;

    /// Stores an OpenLineage event as received, once: an exact repeat of a
    /// stored event is not stored again.
    async fn record_lineage_event(&self, event: &LineageEvent) -> Result<Recorded>;
    /// Records what the intake made of a stored OpenLineage event.
    async fn set_lineage_outcome(&self, id: i64, outcome: &Value) -> Result<()>;
    /// The batches an OpenLineage run started, oldest first.
    async fn lineage_batches(&self, run_id: &str) -> Result<Vec<BatchRecord>>;

    /// Stores a token's hash; 409 `token_exists` when the name is taken.
    async fn create_token(&self, token: &NewToken) -> Result<TokenRecord>;
    /// Every token, by name (hashes included, for the caller to keep to itself).
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>>;
    /// Deletes a token; every replica stops accepting it before this returns
    /// (PostgreSQL: as far as the change acknowledgements reach). False when
    /// there was none of that name.
    async fn revoke_token(&self, name: &str) -> Result<bool>;
    async fn find_token(&self, secret_hash: &str) -> Result<Option<TokenRecord>>;
    async fn touch_token(&self, name: &str, at: DateTime<Utc>) -> Result<()>;
    async fn record_audit(&self, entries: &[AuditEntry]) -> Result<()>;
    async fn list_audit(&self, q: &AuditQuery) -> Result<Page<AuditRecord>>;
    /// What the database-backed gauges of `/metrics` show now (bounded
    /// queries: one per dataset with a deadline, one on the outbox).
    async fn gauges(&self) -> Result<StoreGauges>;
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
    Sqlite(sqlx::SqlitePool),
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

impl SqlStore {
    /// Connects to `url` (`sqlite:` or `postgres:`), applies migrations and,
    /// on PostgreSQL, starts listening for other replicas' changes.
    pub async fn connect(url: &str, opts: &DbOptions, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<Self>> {
        let store = match url.split(':').next() {
            Some("sqlite") => {
                let pool = sqlite::connect(url, opts).await?;
                Self {
                    backend: Backend::Sqlite(pool),
                    clock,
                    hub: ChangeHub::new(true),
                    receivers: opts.receivers(),
                    acks: None,
                    metrics: opts.metrics.clone(),
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
    /// ends: SQLite's own, an advisory lock on PostgreSQL (see
    /// `postgres::begin_write` for why one lock).
    async fn begin_write(&self) -> Result<Tx> {
        Ok(match &self.backend {
            Backend::Sqlite(pool) => Tx::Sqlite(sqlite::begin_write(pool).await?),
            // One lock for all writers there: see `postgres::begin_write`.
            Backend::Postgres(pool) => Tx::Postgres(postgres::begin_write(pool).await?),
        })
    }

    async fn read(&self) -> Result<Pooled> {
        Ok(match &self.backend {
            Backend::Sqlite(pool) => Pooled::Sqlite(pool.acquire().await?),
            Backend::Postgres(pool) => Pooled::Postgres(pool.acquire().await?),
        })
    }

    /// Commits, then publishes the changes to this replica's hub. On
    /// PostgreSQL the changes are also notified to every replica from inside
    /// the transaction (delivered only if it commits), and the answer waits
    /// until each live replica has applied them.
    async fn finish(&self, mut tx: Tx, changes: Vec<Change>) -> Result<()> {
        let token = match (&mut tx, &self.acks) {
            (Tx::Postgres(t), Some(acks)) if !changes.is_empty() => {
                let token = acks.register();
                for c in &changes {
                    if let Err(e) = postgres::notify(t, c, &token).await {
                        acks.forget(&token);
                        return Err(e.into());
                    }
                }
                Some(token)
            }
            _ => None,
        };
        if let Err(e) = tx.commit().await {
            if let (Some(t), Some(acks)) = (&token, &self.acks) {
                acks.forget(t);
            }
            return Err(e.into());
        }
        for c in changes {
            self.hub.publish(c);
        }
        if let (Some(t), Some(acks)) = (&token, &self.acks) {
            acks.wait(t).await;
        }
        Ok(())
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// What a write's changes set off, starting empty.
    fn ripple(&self) -> lineage::Ripple {
        lineage::Ripple { changes: Vec::new(), receivers: self.receivers.clone() }
    }
}
