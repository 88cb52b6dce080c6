//! Rows as stored, and the records the API returns.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use sqlx::types::Json;

use super::batches::{batch_columns, BATCH_COLUMNS};
use super::db::{args, select_columns, Conn, Dialect, Packed};
use super::events;
use super::lineage::InputRecord;
use crate::domain::batch::{BatchState, EventKind, FailCategory, FailStage, Trigger};
use crate::domain::checks::{self, CheckResult, PartitionEvidence, Recorded, SourceEvidence, StoredCheck};
use crate::domain::deadline::Deadline;
use crate::domain::names::PartitionSpec;
use crate::domain::policy::{DatasetPolicy, Tier, WriteMode};
use crate::domain::readiness::{self, Fitness, PartitionState, Standing};
use crate::domain::staleness::Staleness;
use crate::error::Result;

#[derive(Debug, Clone, sqlx::FromRow)]
pub(super) struct BatchRow {
    pub id: i64,
    pub batch_id: String,
    pub task: String,
    pub dataset: String,
    pub dt: NaiveDate,
    pub seq: i64,
    pub state: BatchState,
    pub trigger_kind: Trigger,
    pub run_ref: Option<String>,
    pub scope: Option<Json<Value>>,
    pub idempotency_key: Option<String>,
    pub request_fingerprint: String,
    pub lease_seconds: i64,
    pub lease_expires_at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub marker: Option<String>,
    pub source: Option<Json<SourceEvidence>>,
    /// As [`checks::Stored`] writes them (packed: [`Dialect::packed`]), or
    /// any form stored before.
    pub checks: Option<Json<Packed<Vec<StoredCheck>>>>,
    pub fail_stage: Option<FailStage>,
    pub fail_category: Option<FailCategory>,
    pub fail_message: Option<String>,
    pub superseded_by: Option<String>,
    pub decision_kind: Option<String>,
    pub decision_fingerprint: Option<String>,
    pub written_at: Option<DateTime<Utc>>,
    pub allow_unready_inputs: bool,
    pub repair_id: Option<i64>,
    /// Set when the `started` event is this row's ([`row_events`]).
    pub start_retry: Option<i16>,
    /// Whether the publish's `committed` event is this row's ([`row_events`]).
    pub published_in_row: bool,
}

impl BatchRow {
    pub fn state(&self) -> BatchState {
        self.state
    }

    /// The batch's `started` event's detail when its row gives it back
    /// (migration 0013, [`events::Started::in_row`]); `None` when it is a
    /// row of `batch_events`. A number that stands for no start is an
    /// unknown stored value.
    pub fn started_in_row(&self) -> Option<std::result::Result<events::Started, sqlx::Error>> {
        let number = self.start_retry?;
        let detail = events::Started::in_row(
            number,
            self.trigger_kind,
            self.run_ref.clone(),
            self.started_at,
            self.lease_seconds,
        );
        Some(detail.ok_or_else(|| unknown_value("start_retry", format!("{number} stands for no start"))))
    }
}

/// A batch row with its partitions and inputs, each a JSON array built by the
/// query ([`record_sql`]): one row per batch record, so a page of a hundred
/// records is a hundred rows, not three hundred (on SQLite every row crosses
/// from sqlx's worker thread on its own, and costs more than its bytes).
#[derive(Debug, sqlx::FromRow)]
pub(super) struct RecordRow {
    #[sqlx(flatten)]
    pub batch: BatchRow,
    pub partitions: Json<Vec<StoredPartition>>,
    pub inputs: Json<Vec<InputRecord>>,
}

/// `SELECT` of [`RecordRow`]s: the batches `FROM batches {pick}` (`WHERE`, and
/// for a page `ORDER BY … LIMIT …`), shown in `order`. Partitions in name
/// order, inputs by dataset and partition, each found by its primary key (the
/// query-plan tests read its plan). The batches are picked before their
/// partitions and inputs are read: SQLite evaluates the select list before it
/// sorts, so a filter whose index does not give the page's order (`task`)
/// would otherwise read them for every batch it matches, not for the page.
pub fn record_sql(d: Dialect, pick: &str, order: &str) -> String {
    records_sql(d, pick, order, "")
}

/// [`record_sql`] with each batch's events, in the order they were written
/// (`events`, a JSON array of [`StoredEvent`]s): a record read whole is one
/// statement, not two.
pub(super) fn record_with_events_sql(d: Dialect, pick: &str) -> String {
    use super::db::Field::{Col, Doc};
    let events = d.json_rows(
        &[Col("id", "e.id"), Col("kind", "e.kind"), Col("at", "e.at"), Doc("detail", "e.detail")],
        "batch_events e WHERE e.batch_id = b.batch_id",
        &["id"],
    );
    records_sql(d, pick, "", &format!(", {events} AS events"))
}

fn records_sql(d: Dialect, pick: &str, order: &str, more: &str) -> String {
    use super::db::Field::{Col, Doc};
    let partitions = d.json_rows(
        &[
            Col("partition", "l.target_partition"),
            Col("status", "l.status"),
            Col("rows_written", "l.rows_written"),
            Col("row_count", "l.row_count"),
            Col("distinct_keys", "l.distinct_keys"),
            Col("null_keys", "l.null_keys"),
            Doc("metrics", "l.metrics"),
            Col("version", "l.version"),
            Col("finish_time", "l.finish_time"),
        ],
        "task_produce_log l WHERE l.batch_id = b.batch_id",
        &["partition"],
    );
    let inputs = d.json_rows(
        &[
            Col("dataset", "i.input_dataset"),
            Col("partition", "i.input_partition"),
            Col("version", "i.input_version"),
            Col("batch_id", "i.input_batch_id"),
        ],
        "batch_inputs i WHERE i.batch_id = b.batch_id",
        &["dataset", "partition"],
    );
    format!(
        "SELECT {BATCH_COLUMNS}, {partitions} AS partitions, {inputs} AS inputs{more} \
         FROM (SELECT {} FROM batches {pick}) AS b {order}",
        batch_columns(d, None)
    )
}

/// A partition of a batch as [`record_sql`] shows it: a `task_produce_log`
/// row, its values as the columns hold them.
#[derive(Debug, Deserialize)]
pub(super) struct StoredPartition {
    partition: String,
    status: BatchState,
    rows_written: Option<i64>,
    row_count: Option<i64>,
    distinct_keys: Option<i64>,
    null_keys: Option<i64>,
    metrics: Option<Value>,
    version: Option<i64>,
    #[serde(deserialize_with = "stored_time")]
    finish_time: Option<DateTime<Utc>>,
}

/// A time inside a document the query built. PostgreSQL writes a
/// `timestamptz` in RFC 3339; SQLite shows the stored text, read here the way
/// sqlx reads a SQLite column (`decode_datetime_from_text` in sqlx-sqlite:
/// RFC 3339, else these formats, a time without offset being UTC), so a
/// record reads the same whether its partitions come as rows or as JSON.
fn stored_time<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<DateTime<Utc>>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    parse_stored_time(&text)
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown stored value: {text:?} is not a time")))
}

fn parse_stored_time(text: &str) -> Option<DateTime<Utc>> {
    use chrono::{FixedOffset, NaiveDateTime};
    const FORMATS: &[&str] = &[
        "%F %T%.f",
        "%F %R",
        "%F %RZ",
        "%F %R%:z",
        "%F %T%.fZ",
        "%F %T%.f%:z",
        "%FT%R",
        "%FT%RZ",
        "%FT%R%:z",
        "%FT%T%.f",
        "%FT%T%.fZ",
        "%FT%T%.f%:z",
    ];
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    FORMATS.iter().find_map(|f| {
        DateTime::<FixedOffset>::parse_from_str(text, f)
            .map(|t| t.with_timezone(&Utc))
            .or_else(|_| NaiveDateTime::parse_from_str(text, f).map(|t| t.and_utc()))
            .ok()
    })
}

/// A batch's record with its events ([`record_with_events_sql`]).
#[derive(Debug, sqlx::FromRow)]
pub(super) struct RecordWithEvents {
    #[sqlx(flatten)]
    pub record: RecordRow,
    pub events: Json<Vec<StoredEvent>>,
}

/// An event as [`record_with_events_sql`] shows it: a `batch_events` row,
/// its values as the columns hold them.
#[derive(Debug, Deserialize)]
pub(super) struct StoredEvent {
    kind: String,
    #[serde(deserialize_with = "stored_time")]
    at: Option<DateTime<Utc>>,
    detail: Option<Value>,
}

/// An unknown stored value of `column`: a decode error naming the column.
fn unknown_value(column: &str, e: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::ColumnDecode { index: column.into(), source: format!("unknown stored value: {e}").into() }
}

impl StoredEvent {
    /// The event, its detail read as its kind's type: a kind, a time or a
    /// detail that is not one is a decode error naming the column (and for
    /// a detail the kind), like any unknown stored value.
    /// `marker` is the batch's, which a publish's event leaves out.
    pub fn into_event(self, marker: Option<&str>) -> Result<Event> {
        let kind = self.kind.parse::<EventKind>().map_err(|e| unknown_value("kind", e))?;
        let at = self.at.ok_or_else(|| unknown_value("at", "an event without a time"))?;
        let detail = self.detail.unwrap_or_else(|| Value::Object(Default::default()));
        Event::decode(kind, at, detail, marker)
            .map_err(|e| unknown_value("detail", format!("not the detail of a {kind} event: {e}")).into())
    }
}

/// A batch's events: `stored` (its rows of `batch_events`, in the order
/// they were written) with those its row gives back (migration 0013). A
/// `started` event, first; a publish's `committed` event after the run's
/// events and before those that came after the decision
/// ([`EventKind::of_the_run`]).
pub(super) fn row_events(b: &BatchRow, mut stored: Vec<Event>) -> Result<Vec<Event>> {
    if b.published_in_row {
        let at = b.decided_at.ok_or_else(|| unknown_value("decided_at", "a publish without a time"))?;
        let run = stored.iter().take_while(|e| e.kind().of_the_run()).count();
        let detail = events::Committed::Published { marker: b.marker.clone() };
        stored.insert(run, Event::Committed { at, detail });
    }
    if let Some(detail) = b.started_in_row() {
        stored.insert(0, Event::Started { at: b.started_at, detail: detail? });
    }
    Ok(stored)
}

/// Serialises a document read from a JSON column the way the API showed it
/// while it was served as a JSON value: through one, so with its keys
/// sorted. Typing event details, checks and source changed no byte of the
/// answers.
fn as_stored<T: Serialize, S: Serializer>(doc: &T, s: S) -> std::result::Result<S::Ok, S::Error> {
    serde_json::to_value(doc).map_err(serde::ser::Error::custom)?.serialize(s)
}

/// A batch's checks as [`as_stored`] shows them, written straight (keys in
/// sorted order) instead of through a JSON value: listings show a hundred
/// batches of eight checks each.
fn checks_as_stored<S: Serializer>(checks: &[CheckResult], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_seq(checks.iter().map(checks::Sorted))
}

/// What the registry keeps of a request to know it again (an idempotent
/// start, a repeated commit or fail): the first 64 bits of the SHA-256 of
/// its canonical body, base64url, 11 characters instead of the body. It only
/// has to tell a repeat from a different request of the same batch or key:
/// two different ones agree on them by chance once in 2^64, and a writer who
/// made them agree on purpose gets the first request's answer again, not a
/// change to the registry.
pub(super) fn fingerprint(canonical: &str) -> String {
    hash_prefix(canonical, 8)
}

/// The first `bytes` bytes of the SHA-256 of `canonical`, base64url.
fn hash_prefix(canonical: &str, bytes: usize) -> String {
    use base64::Engine;
    use sha2::Digest;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&sha2::Sha256::digest(canonical.as_bytes())[..bytes])
}

/// Whether a stored fingerprint is this request's: its [`fingerprint`], or
/// one of the forms rows were written in before: the first 128 bits of the
/// SHA-256 (22 characters), the whole SHA-256 (43, rows written from issue
/// 14 until the hash was first cut), or (rows written before issue 14) its
/// canonical body itself. The hashed forms are told apart by their length.
pub(super) fn same_request(stored: &str, canonical: &str) -> bool {
    let hashed = match stored.len() {
        11 => stored == fingerprint(canonical),
        22 => stored == hash_prefix(canonical, 16),
        43 => stored == hash_prefix(canonical, 32),
        _ => false,
    };
    hashed || stored == canonical
}

/// One partition of a batch (its `task_produce_log` row), with what the batch reported for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchPartition {
    pub partition: String,
    /// This partition's status in the batch: `superseded` once a newer batch
    /// re-published this partition.
    pub status: BatchState,
    pub rows_written: Option<i64>,
    pub row_count: Option<i64>,
    pub distinct_keys: Option<i64>,
    pub null_keys: Option<i64>,
    /// Named numeric metrics, e.g. `{"amount": 98765432.10}`.
    #[schema(value_type = Option<std::collections::BTreeMap<String, f64>>)]
    pub metrics: Option<Value>,
    /// The partition version this batch published; null unless it published.
    pub version: Option<i64>,
    pub finish_time: Option<DateTime<Utc>>,
}

/// What a failed batch reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Failure {
    pub stage: FailStage,
    pub category: Option<FailCategory>,
    pub message: Option<String>,
}

/// One entry of a batch's history, in order: what happened (`kind`, one of
/// `EventKind`), when, and the detail of that kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The batch started: how, its lease, the residue earlier attempts left and the retry advice.
    Started {
        at: DateTime<Utc>,
        #[serde(serialize_with = "as_stored")]
        detail: events::Started,
    },
    /// Every heartbeat of the batch, summed up in one event at the first one.
    Heartbeat {
        at: DateTime<Utc>,
        #[serde(serialize_with = "as_stored")]
        detail: events::Heartbeats,
    },
    /// The task reported that its write to the target committed.
    Written {
        at: DateTime<Utc>,
        #[serde(serialize_with = "as_stored")]
        detail: events::Written,
    },
    /// The commit was decided: published, or rejected with the checks that failed.
    Committed {
        at: DateTime<Utc>,
        #[serde(serialize_with = "as_stored")]
        detail: events::Committed,
    },
    /// The task reported that it failed.
    Failed {
        at: DateTime<Utc>,
        #[serde(serialize_with = "as_stored")]
        detail: events::Failed,
    },
    /// The lease ran out: found by the lease scan, or by a newer batch starting on its partitions.
    Abandoned {
        at: DateTime<Utc>,
        #[serde(serialize_with = "as_stored")]
        detail: events::Abandoned,
    },
    /// A newer batch re-published the last of its partitions.
    Superseded {
        at: DateTime<Utc>,
        #[serde(serialize_with = "as_stored")]
        detail: events::Superseded,
    },
    /// The task reported a failure after its commit had published (it never heard the answer).
    FailAfterPublish {
        at: DateTime<Utc>,
        #[serde(serialize_with = "as_stored")]
        detail: events::Failed,
    },
}

impl Event {
    /// The event of `kind` with its stored detail (`marker`: the batch's).
    fn decode(kind: EventKind, at: DateTime<Utc>, detail: Value, marker: Option<&str>) -> serde_json::Result<Self> {
        use serde_json::from_value as read;
        Ok(match kind {
            EventKind::Started => Self::Started { at, detail: read(detail)? },
            EventKind::Heartbeat => Self::Heartbeat { at, detail: read(detail)? },
            EventKind::Written => Self::Written { at, detail: read(detail)? },
            EventKind::Committed => {
                Self::Committed { at, detail: read::<events::StoredCommitted>(detail)?.read(marker) }
            }
            EventKind::Failed => Self::Failed { at, detail: read(detail)? },
            EventKind::Abandoned => Self::Abandoned { at, detail: read(detail)? },
            EventKind::Superseded => Self::Superseded { at, detail: read(detail)? },
            EventKind::FailAfterPublish => Self::FailAfterPublish { at, detail: read(detail)? },
        })
    }

    pub fn kind(&self) -> EventKind {
        match self {
            Self::Started { .. } => EventKind::Started,
            Self::Heartbeat { .. } => EventKind::Heartbeat,
            Self::Written { .. } => EventKind::Written,
            Self::Committed { .. } => EventKind::Committed,
            Self::Failed { .. } => EventKind::Failed,
            Self::Abandoned { .. } => EventKind::Abandoned,
            Self::Superseded { .. } => EventKind::Superseded,
            Self::FailAfterPublish { .. } => EventKind::FailAfterPublish,
        }
    }

    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::Started { at, .. }
            | Self::Heartbeat { at, .. }
            | Self::Written { at, .. }
            | Self::Committed { at, .. }
            | Self::Failed { at, .. }
            | Self::Abandoned { at, .. }
            | Self::Superseded { at, .. }
            | Self::FailAfterPublish { at, .. } => *at,
        }
    }

    /// The detail as the API shows it (the console prints it).
    pub fn detail_json(&self) -> Value {
        let json = match self {
            Self::Started { detail, .. } => serde_json::to_value(detail),
            Self::Heartbeat { detail, .. } => serde_json::to_value(detail),
            Self::Written { detail, .. } => serde_json::to_value(detail),
            Self::Committed { detail, .. } => serde_json::to_value(detail),
            Self::Failed { detail, .. } | Self::FailAfterPublish { detail, .. } => serde_json::to_value(detail),
            Self::Abandoned { detail, .. } => serde_json::to_value(detail),
            Self::Superseded { detail, .. } => serde_json::to_value(detail),
        };
        json.unwrap_or(Value::Null)
    }
}

/// A batch: its request, state, timestamps, partitions, checks and (when
/// read one at a time) its events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchRecord {
    pub batch_id: String,
    pub task: String,
    pub dataset: String,
    pub dt: NaiveDate,
    pub seq: i64,
    pub state: BatchState,
    pub trigger: Trigger,
    pub run_ref: Option<String>,
    /// As given at start.
    #[schema(value_type = Option<Object>)]
    pub scope: Option<Value>,
    pub idempotency_key: Option<String>,
    pub lease_seconds: i64,
    pub lease_expires_at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    /// In partition-name order.
    pub partitions: Vec<BatchPartition>,
    pub marker: Option<String>,
    /// The `source` counts of the commit, if it gave them.
    #[serde(serialize_with = "as_stored")]
    pub source: Option<SourceEvidence>,
    /// Empty until the batch is committed.
    #[serde(serialize_with = "checks_as_stored")]
    pub checks: Vec<CheckResult>,
    pub failure: Option<Failure>,
    /// The batch that superseded or abandoned this one.
    pub superseded_by: Option<String>,
    /// When the task reported that its write to the target committed.
    pub written_at: Option<DateTime<Utc>>,
    /// What the batch read, at the versions current when it started.
    pub inputs: Vec<InputRecord>,
    pub allow_unready_inputs: bool,
    pub repair_id: Option<i64>,
    /// Ordered history (started, heartbeat, committed/failed, superseded, …).
    /// Present on a single batch, left out of listings.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<Event>)]
    pub events: Option<Vec<Event>>,
}

impl BatchRecord {
    /// The record of a row of [`record_sql`]; `events` when read one at a time.
    pub(super) fn assemble(row: RecordRow, events: Option<Vec<Event>>) -> Result<Self> {
        let RecordRow { batch: b, partitions: Json(partitions), inputs: Json(inputs) } = row;
        let state = b.state();
        let failure = b.fail_stage.map(|stage| Failure { stage, category: b.fail_category, message: b.fail_message });
        let partitions: Vec<BatchPartition> = partitions
            .into_iter()
            .map(|l| BatchPartition {
                partition: l.partition,
                status: l.status,
                rows_written: l.rows_written,
                row_count: l.row_count,
                distinct_keys: l.distinct_keys,
                null_keys: l.null_keys,
                metrics: l.metrics,
                version: l.version,
                finish_time: l.finish_time,
            })
            .collect();
        let source = b.source.map(|j| j.0);
        let checks = match b.checks {
            None => Vec::new(),
            Some(Json(Packed(stored))) => checks::rebuild(stored, || recorded(&b.marker, &source, &partitions))
                .map_err(|e| unknown_value("checks", e))?,
        };
        Ok(Self {
            batch_id: b.batch_id,
            task: b.task,
            dataset: b.dataset,
            dt: b.dt,
            seq: b.seq,
            state,
            trigger: b.trigger_kind,
            run_ref: b.run_ref,
            scope: b.scope.map(|j| j.0),
            idempotency_key: b.idempotency_key,
            lease_seconds: b.lease_seconds,
            lease_expires_at: b.lease_expires_at,
            started_at: b.started_at,
            decided_at: b.decided_at,
            partitions,
            marker: b.marker,
            source,
            checks,
            failure,
            superseded_by: b.superseded_by,
            written_at: b.written_at,
            inputs,
            allow_unready_inputs: b.allow_unready_inputs,
            repair_id: b.repair_id,
            events,
        })
    }
}

/// What a batch's record keeps of its commit, to rebuild the checks stored
/// without it.
pub(super) fn recorded(
    marker: &Option<String>,
    source: &Option<SourceEvidence>,
    partitions: &[BatchPartition],
) -> std::result::Result<Recorded, String> {
    let partitions = partitions
        .iter()
        .map(|p| {
            let spec = PartitionSpec::parse(&p.partition).map_err(|e| format!("partition {:?}: {e}", p.partition))?;
            let counts = PartitionEvidence::recorded(
                spec.clone(),
                p.rows_written,
                p.row_count,
                p.distinct_keys,
                p.null_keys,
                p.metrics.as_ref(),
            );
            Ok((spec, counts))
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    Ok(Recorded::new(marker.clone(), source.clone(), partitions))
}

/// A partition's current standing.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct PartitionRecord {
    pub dataset: String,
    #[serde(rename = "partition")]
    #[sqlx(rename = "partition_spec")]
    pub partition: String,
    /// The data date of the batch that last named the partition.
    pub dt: NaiveDate,
    /// What the latest table-touching batch says; [`PartitionRecord::fitness`]
    /// adds invalidation and staleness.
    pub state: PartitionState,
    /// The batch that decides the state: the latest that may have touched the table.
    pub batch_id: Option<String>,
    /// Published versions so far; 0 before the first publish.
    pub version: i64,
    /// The batch that published the current version.
    pub published_batch_id: Option<String>,
    /// `row_count` of the current published version.
    #[serde(rename = "row_count")]
    #[sqlx(rename = "published_row_count")]
    pub row_count: Option<i64>,
    pub published_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// Set while the current version was built on upstream data that has
    /// since been restated or invalidated: names that upstream partition.
    #[schema(value_type = Option<crate::domain::staleness::Staleness>)]
    pub stale_upstream: Option<Json<Staleness>>,
    /// Set while the partition is taken out of service.
    pub invalidated_reason: Option<String>,
    /// The version the current one replaced (`version - 1`).
    pub prev_published_batch_id: Option<String>,
    pub prev_published_row_count: Option<i64>,
    /// The partition spec without `dt`: what the volume baseline compares.
    #[serde(skip)]
    pub baseline_key: String,
}

/// Every column of [`PartitionRecord`].
pub(super) const PARTITION_COLUMNS: &str =
    "dataset, partition_spec, dt, state, batch_id, version, published_batch_id, published_row_count, \
     published_at, updated_at, stale_upstream, invalidated_reason, prev_published_batch_id, prev_published_row_count, \
     baseline_key";

/// The instants of a partition's row, kept as numbers on SQLite (migration
/// 0022, [`Dialect::split_instant`]). `invalidated_at` stays text: few
/// partitions are ever invalidated.
pub(super) const PARTITION_INSTANTS: &[&str] = &["published_at", "updated_at"];

/// [`PARTITION_COLUMNS`] as a `SELECT` of `partitions` (aliased `alias`) lists them.
pub(super) fn partition_columns(d: Dialect, alias: Option<&str>) -> String {
    select_columns(d, alias, PARTITION_COLUMNS, PARTITION_INSTANTS)
}

/// A partition's row, `None` when no batch ever named it.
pub(super) async fn load_partition(
    c: &mut Conn<'_>,
    dataset: &str,
    partition: &str,
) -> Result<Option<PartitionRecord>> {
    let sql = format!(
        "SELECT {} FROM partitions WHERE dataset = $1 AND partition_spec = $2",
        partition_columns(c.dialect(), None)
    );
    Ok(c.opt(&sql, args![dataset, partition]).await?)
}

/// The published row counts the volume check compares a partition with: the
/// `periods` latest earlier data dates of the same baseline key (the
/// partition spec without `dt`), newest first. The dataset's
/// `baseline_periods` says how many; commits and repair progress both ask here.
pub(super) async fn baseline(
    c: &mut Conn<'_>,
    dataset: &str,
    baseline_key: &str,
    dt: NaiveDate,
    periods: u32,
) -> Result<Vec<i64>> {
    let rows: Vec<(i64,)> =
        c.all(&baseline_sql(baseline_key), args![dataset, baseline_key, dt, i64::from(periods)]).await?;
    Ok(rows.into_iter().map(|(n,)| n).collect())
}

/// The baseline query for partitions of `baseline_key` ($2; $1 the dataset,
/// $3 the date, $4 how many). Partitions of `dt` alone (key '') are found by
/// `partitions_dt` in date order; `partitions_baseline` holds only the other
/// keys (migration 0018), and its condition is repeated word for word so
/// that both planners seek it (a unit test ties the two texts).
pub fn baseline_sql(baseline_key: &str) -> String {
    let keyed = if baseline_key.is_empty() { "" } else { " AND baseline_key <> ''" };
    format!(
        "SELECT published_row_count FROM partitions WHERE dataset = $1 AND baseline_key = $2{keyed} AND dt < $3 \
           AND version > 0 AND published_row_count IS NOT NULL ORDER BY dt DESC LIMIT $4"
    )
}

/// The fitness of a partition that may have no row (`no_batch`).
pub fn fitness_of(rec: Option<&PartitionRecord>) -> Fitness {
    readiness::fitness(rec.map(PartitionRecord::standing))
}

impl PartitionRecord {
    /// What the fitness rule reads from this row.
    pub fn standing(&self) -> Standing {
        Standing {
            state: self.state,
            invalidated: self.invalidated_reason.is_some(),
            stale_upstream: self.stale_upstream.is_some(),
        }
    }

    /// `ready`, or why `/ready` refuses this partition: the one rule.
    pub fn fitness(&self) -> Fitness {
        readiness::fitness(Some(self.standing()))
    }

    #[cfg(test)]
    pub fn placeholder(dataset: &str, partition: &str) -> Self {
        Self {
            dataset: dataset.into(),
            partition: partition.into(),
            dt: NaiveDate::from_ymd_opt(2026, 8, 24).expect("date"),
            state: PartitionState::Ready,
            batch_id: None,
            version: 0,
            published_batch_id: None,
            row_count: None,
            published_at: None,
            updated_at: DateTime::<Utc>::UNIX_EPOCH,
            stale_upstream: None,
            invalidated_reason: None,
            prev_published_batch_id: None,
            prev_published_row_count: None,
            baseline_key: String::new(),
        }
    }
}

/// An earlier batch that did not publish and may have left rows behind.
/// Delete its rows (`DELETE … WHERE batch_id IN (…)`) before writing.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Residue {
    pub batch_id: String,
    /// `abandoned`, `rejected` or `failed`.
    pub state: BatchState,
    /// The partitions of this start that the batch may have left rows in.
    pub partitions: Vec<String>,
}

pub(super) const DATASET_COLUMNS: &str =
    "name, tier, write_mode, unique_key, timezone, max_volume_change, baseline_periods, \
     allow_empty, owner, max_partitions_per_batch, deadline, webhook_url, airflow_asset, partition_key, events_url, created_at, updated_at";

/// A stored count that must fit a `u32`: anything else is a decode error
/// naming the column (sqlx adds it) and the value, never a silent default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Count(pub u32);

impl<DB: sqlx::Database> sqlx::Type<DB> for Count
where
    i64: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as sqlx::Type<DB>>::type_info()
    }
    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for Count
where
    i64: sqlx::Decode<'r, DB>,
{
    fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> std::result::Result<Self, sqlx::error::BoxDynError> {
        let v = <i64 as sqlx::Decode<DB>>::decode(value)?;
        u32::try_from(v)
            .map(Count)
            .map_err(|_| format!("unknown stored value: {v} is not a count from 0 to {}", u32::MAX).into())
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub(super) struct DatasetRow {
    pub name: String,
    pub tier: Tier,
    pub write_mode: WriteMode,
    pub unique_key: Json<Vec<String>>,
    pub timezone: String,
    pub max_volume_change: f64,
    pub baseline_periods: Count,
    pub allow_empty: bool,
    pub owner: Option<String>,
    pub max_partitions_per_batch: Count,
    pub deadline: Option<Json<Deadline>>,
    pub webhook_url: Option<String>,
    pub airflow_asset: Option<String>,
    pub partition_key: Option<String>,
    pub events_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DatasetRow {
    pub fn policy(&self) -> DatasetPolicy {
        DatasetPolicy {
            tier: self.tier,
            write_mode: self.write_mode,
            unique_key: self.unique_key.0.clone(),
            timezone: self.timezone.clone(),
            max_volume_change: self.max_volume_change,
            baseline_periods: self.baseline_periods.0,
            allow_empty: self.allow_empty,
            owner: self.owner.clone(),
            max_partitions_per_batch: self.max_partitions_per_batch.0,
            deadline: self.deadline.as_ref().map(|d| d.0.clone()),
            webhook_url: self.webhook_url.clone(),
            airflow_asset: self.airflow_asset.clone(),
            partition_key: self.partition_key.clone(),
            events_url: self.events_url.clone(),
        }
    }
}

/// A dataset and its policy. A dataset is created by its first batch start
/// (with the default policy) or by a PUT.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = Dataset)]
pub struct DatasetRecord {
    pub dataset: String,
    pub tier: Tier,
    pub write_mode: WriteMode,
    pub unique_key: Vec<String>,
    pub timezone: String,
    pub max_volume_change: f64,
    pub baseline_periods: u32,
    pub allow_empty: bool,
    pub owner: Option<String>,
    pub max_partitions_per_batch: u32,
    pub deadline: Option<Deadline>,
    pub webhook_url: Option<String>,
    pub airflow_asset: Option<String>,
    pub partition_key: Option<String>,
    pub events_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DatasetRecord {
    /// The policy this record states.
    pub fn policy(&self) -> DatasetPolicy {
        DatasetPolicy {
            tier: self.tier,
            write_mode: self.write_mode,
            unique_key: self.unique_key.clone(),
            timezone: self.timezone.clone(),
            max_volume_change: self.max_volume_change,
            baseline_periods: self.baseline_periods,
            allow_empty: self.allow_empty,
            owner: self.owner.clone(),
            max_partitions_per_batch: self.max_partitions_per_batch,
            deadline: self.deadline.clone(),
            webhook_url: self.webhook_url.clone(),
            airflow_asset: self.airflow_asset.clone(),
            partition_key: self.partition_key.clone(),
            events_url: self.events_url.clone(),
        }
    }
}

impl From<DatasetRow> for DatasetRecord {
    fn from(r: DatasetRow) -> Self {
        let p = r.policy();
        Self {
            dataset: r.name,
            tier: p.tier,
            write_mode: p.write_mode,
            unique_key: p.unique_key,
            timezone: p.timezone,
            max_volume_change: p.max_volume_change,
            baseline_periods: p.baseline_periods,
            allow_empty: p.allow_empty,
            owner: p.owner,
            max_partitions_per_batch: p.max_partitions_per_batch,
            deadline: p.deadline,
            webhook_url: p.webhook_url,
            airflow_asset: p.airflow_asset,
            partition_key: p.partition_key,
            events_url: p.events_url,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_keyed_baseline_query_repeats_its_partial_index_condition() {
        for migration in [
            include_str!("../../migrations/sqlite/0018_baseline_index_partial.sql"),
            include_str!("../../migrations/postgres/0018_baseline_index_partial.sql"),
        ] {
            let index = migration.lines().find(|l| l.starts_with("CREATE INDEX")).expect("the index");
            let condition = index.split(" WHERE ").nth(1).expect("a partial index").trim_end_matches(';');
            assert!(baseline_sql("region=eu").contains(&format!("AND {condition} AND")), "{condition}");
            assert!(!baseline_sql("").contains(condition), "the key '' is not in the index");
        }
    }

    #[test]
    fn a_request_is_known_again_by_each_stored_fingerprint() {
        use base64::Engine;
        use sha2::Digest;
        let body = r#"{"marker":"s3://m","partitions":[]}"#;
        let other = r#"{"marker":"s3://other","partitions":[]}"#;
        let stored = fingerprint(body);
        assert_eq!(stored.len(), 11, "{stored}");
        let whole = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(body.as_bytes()));
        assert!(whole.starts_with(&stored[..10]), "the first 64 bits of the whole hash");
        let half = hash_prefix(body, 16);
        assert_eq!(half.len(), 22);
        assert!(whole.starts_with(&half[..21]), "the first 128 bits, as rows were stored before");
        for kept in [stored.as_str(), half.as_str(), whole.as_str(), body] {
            assert!(same_request(kept, body), "{kept}");
            assert!(!same_request(kept, other), "{kept}");
        }
    }

    /// A time inside a document the query built reads as sqlx reads the same
    /// stored text from a SQLite column, in each form sqlx knows, and is an
    /// error where sqlx's is.
    #[tokio::test]
    async fn a_time_in_a_document_reads_as_sqlx_reads_its_column() {
        use sqlx::Connection;
        crate::store::sqlite_memory::configure();
        let mut c = sqlx::SqliteConnection::connect("sqlite::memory:").await.expect("sqlite");
        let stored = [
            "2026-08-24T01:02:03+00:00",
            "2026-08-24T01:02:03.123456789+00:00",
            // The form the store writes now (`db::sqlite_time`).
            "2026-08-24T01:02:03.123456Z",
            "2026-08-24T01:02:03Z",
            "2026-08-24T03:02:03.5+02:00",
            "2026-08-24 01:02:03",
            "2026-08-24 01:02:03.25",
            "2026-08-24 01:02",
            "2026-08-24 01:02Z",
            "2026-08-24 01:02+01:00",
            "2026-08-24 01:02:03.5Z",
            "2026-08-24 01:02:03.5-05:30",
            "2026-08-24T01:02",
            "2026-08-24T01:02Z",
            "2026-08-24T01:02:03",
            "2026-08-24T01:02:03.5Z",
            "2026-08-24",
            "yesterday",
        ];
        for text in stored {
            let read: Option<DateTime<Utc>> = sqlx::query_scalar("SELECT $1").bind(text).fetch_one(&mut c).await.ok();
            assert_eq!(parse_stored_time(text), read, "{text}");
            let doc = serde_json::from_value::<StoredPartition>(json!({"partition": "p", "status": "published",
                "rows_written": null, "row_count": null, "distinct_keys": null, "null_keys": null,
                "metrics": null, "version": null, "finish_time": text}));
            assert_eq!(doc.ok().and_then(|d| d.finish_time), read, "{text}");
        }
        assert_eq!(
            parse_stored_time("2026-08-24 01:02:03").map(|t| t.to_rfc3339()).as_deref(),
            Some("2026-08-24T01:02:03+00:00")
        );
    }

    /// Each kind's stored detail (as written now, and as the first version
    /// wrote `started` and `heartbeat`) reads as that kind's event, which
    /// shows it byte for byte as the stored JSON value did.
    #[test]
    fn every_kind_reads_its_stored_detail_and_shows_it_unchanged() {
        let at: DateTime<Utc> = "2026-08-24T01:00:00Z".parse().unwrap();
        let retry = json!({"safe": true, "cleanup": {}, "reason": "nothing to clean"});
        let residue = json!([{"batch_id": "t-20260824-001", "state": "abandoned", "partitions": ["dt=2026-08-24"]}]);
        let stored = [
            (
                EventKind::Started,
                json!({"trigger": "scheduled", "run_ref": null, "lease_expires_at": at,
                "residue": residue, "retry": retry, "cleaned_batch_ids": []}),
            ),
            (EventKind::Started, json!({"trigger": "retry", "run_ref": "r", "lease_expires_at": at, "residue": []})),
            (EventKind::Heartbeat, json!({"first_at": at, "last_at": at, "count": 3, "lease_expires_at": at})),
            (EventKind::Heartbeat, json!({"lease_expires_at": at})),
            (EventKind::Written, json!({"partitions": [{"partition": "dt=2026-08-24", "rows_written": 5}]})),
            (EventKind::Committed, json!({"state": "published", "marker": "m"})),
            (EventKind::Committed, json!({"state": "rejected", "failed_checks": ["non_empty", "unique_keys"]})),
            (EventKind::Failed, json!({"stage": "write", "category": "unknown", "message": null})),
            (EventKind::Abandoned, json!({"lease_expired_at": at, "by": null})),
            (EventKind::Superseded, json!({"by": "t-20260824-002"})),
            (EventKind::FailAfterPublish, json!({"stage": "verify", "category": "data", "message": "late"})),
        ];
        for (kind, detail) in stored {
            let event = Event::decode(kind, at, detail.clone(), Some("the batch's"))
                .unwrap_or_else(|e| panic!("{kind} {detail}: {e}"));
            assert_eq!(event.kind(), kind);
            assert_eq!(event.at(), at);
            let shown = serde_json::to_string(&event).unwrap();
            let at_json = serde_json::to_string(&at).unwrap();
            let expected = format!(r#"{{"kind":"{kind}","at":{at_json},"detail":{detail}}}"#);
            assert_eq!(shown, expected);
            assert_eq!(serde_json::from_str::<Event>(&shown).unwrap(), event, "a stored decision reads back");
            assert_eq!(event.detail_json(), detail);
        }
        let wrong = Event::decode(EventKind::Superseded, at, json!({}), None);
        assert!(wrong.is_err(), "a detail that is not its kind's is an error");
    }
}
