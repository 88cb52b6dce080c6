//! Response bodies the HTTP layer assembles (the records themselves are the
//! store's and the domain's types), and the error envelope.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{ToResponse, ToSchema};

use crate::domain::batch::BatchState;
use crate::domain::checks::CheckName;
use crate::domain::readiness::Fitness;
use crate::store::{
    AlertRecord, AuditRecord, BatchRecord, ChangeRecord, DatasetRecord, DeliveryRecord, LineageEdge, LineageNode,
    PartitionRecord, TokenRecord,
};

/// What went wrong. `code` is stable snake_case that clients may match on;
/// `message` is for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorObject {
    /// Stable snake_case error code. Known codes: `invalid_field`,
    /// `missing_field`, `unknown_field`, `duplicate_field`, `invalid_type`,
    /// `invalid_partition`, `idempotency_key_reused`, `checks_failed`,
    /// `malformed_json`, `unreadable_body`, `payload_too_large`,
    /// `batch_in_progress`, `batch_not_running`, `already_decided`,
    /// `superseded`, `batch_not_found`, `dataset_not_found`,
    /// `route_not_found`, `method_not_allowed`, `request_timeout`,
    /// `unsupported_media_type`, `bad_request`, `malformed_request` (400: not
    /// HTTP/1.1), `uri_too_long` (414: a request target over 65534 bytes),
    /// `headers_too_large` (431: a request head over about 400 KB),
    /// `storage_error`, `storage_unavailable`, `internal_error`,
    /// `answer_unavailable` (503: a commit or fail was stored, but its
    /// answer could not be read back; the same request again gets it).
    #[schema(example = "unknown_field")]
    pub code: String,
    pub message: String,
    /// Structured context. Field errors (422) carry `field`, the path of the
    /// offending field or parameter (e.g. `partitions[0].partiton`);
    /// conflicts (409) name the batch and its state; other errors send `{}`.
    #[schema(value_type = Object)]
    pub details: Value,
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Error, example = json!({"error": {"code": "unknown_field",
    "message": "unknown field \"partitions[0].partiton\" (a typo would silently drop evidence, so it is refused): unknown field `partiton`, expected one of `partition`, `rows_written`, `row_count`, `distinct_keys`, `null_keys`, `metrics`",
    "details": {"field": "partitions[0].partiton"}}}))]
pub struct ErrorBody {
    pub error: ErrorObject,
}

impl ErrorBody {
    pub fn new(code: &str, message: &str, details: Value) -> Self {
        Self { error: ErrorObject { code: code.to_owned(), message: message.to_owned(), details } }
    }
}

/// The body is not JSON (`malformed_json`) or could not be read (`unreadable_body`).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct BadRequest(ErrorBody);

/// The body is larger than 1 MiB (`payload_too_large`).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct PayloadTooLarge(ErrorBody);

/// A missing, invalid, mistyped, unknown or repeated field or query parameter
/// (`missing_field`, `invalid_field`, `invalid_type`, `unknown_field`,
/// `duplicate_field`, `invalid_partition`); `details.field` names it. A
/// repeated single-valued query parameter is refused too, and so is a NUL
/// (`%00`) in any path segment or query parameter (`invalid_field`).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct Invalid(ErrorBody);

/// No such batch (`batch_not_found`).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct BatchNotFound(ErrorBody);

/// The database failed; nothing was changed (`storage_error`, `internal_error`).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct StorageError(ErrorBody);

/// The database cannot be reached; nothing was changed (`storage_unavailable`).
/// Or, from a commit or fail only: the decision was stored but its answer
/// could not be read back (`answer_unavailable`); repeat the same request to
/// get it.
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct StorageUnavailable(ErrorBody);

/// No valid token: `unauthenticated` (with `WWW-Authenticate: Bearer`) or `token_expired`.
#[derive(ToResponse)]
#[response(headers(("WWW-Authenticate" = String, description = "`Bearer`")))]
#[allow(dead_code)]
pub struct Unauthenticated(ErrorBody);

/// The token lacks the scope this needs: `forbidden`, with
/// `details.needed_scope` (e.g. `produce:sales.orders`).
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct Forbidden(ErrorBody);

/// A write whose body is not declared `application/json`: `unsupported_media_type`.
#[derive(ToResponse)]
#[allow(dead_code)]
pub struct UnsupportedMediaType(ErrorBody);

/// A rejected commit: the batch record (state `rejected`, every check) plus
/// an `error` with code `checks_failed`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CommitRejected {
    #[serde(flatten)]
    pub record: BatchRecord,
    pub error: RejectionError,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RejectionError {
    /// Always `checks_failed`.
    #[schema(value_type = String, example = "checks_failed")]
    pub code: &'static str,
    pub message: String,
    pub details: RejectionDetails,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RejectionDetails {
    pub batch_id: String,
    /// The blocking checks that failed, in check order.
    pub failed_checks: Vec<CheckName>,
}

impl CommitRejected {
    /// The 422 body of a rejected commit.
    pub fn new(record: BatchRecord, failed_checks: Vec<CheckName>) -> Self {
        let names: Vec<&str> = failed_checks.iter().map(|c| c.as_str()).collect();
        let error = RejectionError {
            code: "checks_failed",
            message: format!("batch {} rejected: {} failed", record.batch_id, names.join(", ")),
            details: RejectionDetails { batch_id: record.batch_id.clone(), failed_checks },
        };
        Self { record, error }
    }
}

/// A 422 to a commit: the rejected batch, or a field error.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum CommitRefusal {
    // Boxed: a batch record is far larger than a field error (the spec
    // is the same either way).
    Rejected(Box<CommitRejected>),
    Invalid(ErrorBody),
}

macro_rules! page {
    ($(#[$m:meta])* $name:ident, $item:ty, $items_doc:literal) => {
        $(#[$m])*
        #[derive(Debug, Clone, Serialize, ToSchema)]
        pub struct $name {
            #[doc = $items_doc]
            pub items: Vec<$item>,
            /// Opaque; pass as `cursor` (URL-encoded) for the next page. Null on the last page.
            pub next_cursor: Option<String>,
        }
    };
}

page!(
    /// One page of batches.
    BatchPage, BatchRecord, "Newest first, without `events`."
);
page!(
    /// One page of partitions.
    PartitionPage, PartitionRecord, "Newest dt first, partitions of a dt in name order."
);
page!(
    /// One page of alerts.
    AlertPage, AlertRecord, "Newest first."
);
page!(
    /// One page of outbox deliveries.
    DeliveryPage, DeliveryRecord, "Newest first."
);
page!(
    /// One page of the audit log.
    AuditPage, AuditRecord, "Newest first."
);

/// Every dataset.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DatasetList {
    /// Every dataset, by name.
    pub items: Vec<DatasetRecord>,
}

/// A readiness change with its cursor.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Change {
    /// Opaque; pass back as `after`.
    pub cursor: String,
    #[serde(flatten)]
    pub change: ChangeRecord,
}

/// One page of the change feed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChangePage {
    pub items: Vec<Change>,
    /// The last item's cursor, or the `after` given when the page is empty.
    pub next_cursor: String,
}

/// The graph of partitions a partition was built from, or built into.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = LineageGraph)]
pub struct LineageView {
    pub dataset: String,
    pub partition: String,
    pub direction: crate::store::Direction,
    /// Each partition with its fitness (as `/ready` judges it), version and depth.
    pub nodes: Vec<LineageNode>,
    /// Each read: the version read and the current one.
    pub edges: Vec<LineageEdge>,
}

/// A partition taken out of service.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Invalidated {
    pub dataset: String,
    pub partition: String,
    /// Always true.
    pub invalidated: bool,
    pub reason: String,
}

/// The service and its database.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` or `unavailable`.
    #[schema(value_type = HealthStatus)]
    pub status: String,
    /// `ok` or `unreachable`.
    #[schema(value_type = DatabaseStatus)]
    pub database: String,
    /// `sqlite` or `postgres`.
    #[schema(value_type = Backend)]
    pub backend: String,
    /// With status `unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
}

#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum HealthStatus {
    Ok,
    Unavailable,
}

#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum DatabaseStatus {
    Ok,
    Unreachable,
}

/// The database behind the service.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A new token: its record and, this once, the secret.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenCreated {
    #[serde(flatten)]
    pub record: TokenRecord,
    /// The secret (`bgt_…`), shown this once; only its SHA-256 is stored.
    pub token: String,
}

/// Every token, never the secrets.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenList {
    pub items: Vec<TokenRecord>,
}

/// A partition's current published version.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PublishedPartition {
    pub partition: String,
    #[schema(minimum = 1)]
    pub version: i64,
    /// The batch that published this version.
    pub batch_id: Option<String>,
    #[schema(minimum = 0)]
    pub row_count: Option<i64>,
    pub published_at: Option<DateTime<Utc>>,
    /// True when the partition had a published version before this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restatement: Option<bool>,
    /// With a restatement: the replaced version's `version`, `batch_id` and
    /// `row_count`, so an accumulating consumer can subtract it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<Supersedes>,
}

/// The version a restatement replaced.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Supersedes {
    pub version: i64,
    pub batch_id: Option<String>,
    pub row_count: Option<i64>,
}

/// Every asked-for partition is ready. Only ready bodies contain the bytes `"ready":true`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"ready": true, "dataset": "dws.order_detail", "partitions": [{"partition": "dt=2026-08-24",
    "version": 2, "batch_id": "dws_order_detail_daily-20260824-003", "row_count": 1000000,
    "published_at": "2026-08-25T00:41:07Z"}]}))]
pub struct ReadyResponse {
    /// Always true.
    pub ready: bool,
    pub dataset: String,
    pub partitions: Vec<PublishedPartition>,
    /// Asked by task: the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Asked by task: the data date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dt: Option<NaiveDate>,
    /// Asked by task: the task's latest batch for that dt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_batch_id: Option<String>,
}

/// Why `/ready` says not ready: the fitness of the first partition that is
/// not ready, `no_batch` when no batch ever named it (or the dataset or task
/// is unknown), `unavailable` when the registry cannot be read right now,
/// `shutting_down` when this instance is stopping (a long-poll answers at
/// once; poll again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotReadyReason {
    NoBatch,
    Running,
    Rejected,
    Failed,
    Abandoned,
    Invalidated,
    StaleUpstream,
    Unavailable,
    ShuttingDown,
}

impl From<Fitness> for NotReadyReason {
    /// Why a partition of this fitness is not ready (`ready` is not a
    /// reason; it maps to `no_batch` only to keep this total).
    fn from(f: Fitness) -> Self {
        match f {
            Fitness::NoBatch | Fitness::Ready => Self::NoBatch,
            Fitness::Running => Self::Running,
            Fitness::Rejected => Self::Rejected,
            Fitness::Failed => Self::Failed,
            Fitness::Abandoned => Self::Abandoned,
            Fitness::Invalidated => Self::Invalidated,
            Fitness::StaleUpstream => Self::StaleUpstream,
        }
    }
}

impl NotReadyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoBatch => "no_batch",
            Self::Running => "running",
            Self::Rejected => "rejected",
            Self::Failed => "failed",
            Self::Abandoned => "abandoned",
            Self::Invalidated => "invalidated",
            Self::StaleUpstream => "stale_upstream",
            Self::Unavailable => "unavailable",
            Self::ShuttingDown => "shutting_down",
        }
    }
}

impl std::fmt::Display for NotReadyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Not ready (yet).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"ready": false, "reason": "rejected", "dataset": "dws.order_detail", "partition": "dt=2026-08-24",
    "batch_id": "dws_order_detail_daily-20260824-002", "last_published": {"partition": "dt=2026-08-24", "version": 1,
    "batch_id": "dws_order_detail_daily-20260824-001", "row_count": 1000000, "published_at": "2026-08-25T00:30:00Z"},
    "partitions": [{"partition": "dt=2026-08-24", "state": "rejected", "batch_id": "dws_order_detail_daily-20260824-002",
    "version": 1}]}))]
pub struct NotReadyResponse {
    /// Always false: only ready bodies hold the bytes `"ready":true`.
    pub ready: bool,
    pub reason: NotReadyReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// The first partition that is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The batch that decides that partition's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<Option<String>>,
    /// That partition's last published version, if any (it stays in history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_published: Option<Option<PublishedPartition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<PartitionStanding>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dt: Option<NaiveDate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_batch_id: Option<String>,
    /// With reason `unavailable` or `shutting_down`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// With `stale_upstream`: the upstream partition, the version the data was
    /// built on, the current one, and the cause (`restated`, `invalidated`, `stale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<crate::domain::staleness::Staleness>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalidated_reason: Option<String>,
}

impl NotReadyResponse {
    /// Not ready for this reason, and nothing more.
    pub fn new(reason: NotReadyReason) -> Self {
        Self {
            ready: false,
            reason,
            dataset: None,
            partition: None,
            batch_id: None,
            last_published: None,
            partitions: None,
            task: None,
            dt: None,
            latest_batch_id: None,
            message: None,
            upstream: None,
            invalidated_reason: None,
        }
    }
}

/// One asked-for partition in a not-ready answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PartitionStanding {
    pub partition: String,
    /// `ready` or why not (as `reason`).
    pub state: crate::domain::readiness::Fitness,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub version: Option<i64>,
}

/// One batch an OpenLineage event started, committed or failed (or found decided).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LineageBatch {
    pub dataset: String,
    pub batch_id: String,
    pub state: BatchState,
    /// When the commit was rejected: the blocking checks that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_checks: Vec<CheckName>,
}

/// The answer to an OpenLineage event (stored with it).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LineageAnswer {
    /// The event was stored.
    pub accepted: bool,
    /// The stored event's id.
    pub event_id: i64,
    /// `eventType` as sent.
    pub event_type: Option<String>,
    /// `run.runId` as sent.
    pub run_id: Option<String>,
    /// The run's batches this event started, committed or failed, or found already decided.
    pub batches: Vec<LineageBatch>,
    /// What the event could not do, and why.
    pub warnings: Vec<String>,
}

/// An OpenLineage `RunEvent`
/// (<https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent>).
/// Only the fields below are read; any other field or facet is kept in the
/// stored event and otherwise ignored. Any JSON body is accepted: what is
/// missing is reported in `warnings`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub struct OpenLineageRunEvent {
    eventType: Option<OpenLineageEventType>,
    /// `runId`, and the `nominalTime` (`nominalStartTime`, `nominalEndTime`)
    /// and `errorMessage` (`message`) run facets.
    #[schema(value_type = Option<Object>)]
    run: Option<Value>,
    /// `namespace` and `name`.
    #[schema(value_type = Option<Object>)]
    job: Option<Value>,
    /// Each output's `namespace`, `name`, `facets` (`symlinks`: a `TABLE`
    /// identifier names a table given by its location; `dataQualityMetrics`:
    /// `rowCount`, `columnMetrics.<column>.nullCount`, `distinctCount`, `sum`)
    /// and `outputFacets` (`outputStatistics`: `rowCount`; the older
    /// `dataQualityMetrics` shape; `subset` with an `outputCondition` of type
    /// `partition`).
    #[schema(value_type = Option<Vec<Object>>)]
    outputs: Option<Vec<Value>>,
}

#[derive(ToSchema)]
#[allow(dead_code, clippy::upper_case_acronyms)]
pub enum OpenLineageEventType {
    START,
    RUNNING,
    COMPLETE,
    ABORT,
    FAIL,
    OTHER,
}
