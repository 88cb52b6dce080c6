//! The client's view of the API's bodies (`openapi/openapi.json`): what it
//! sends in full, and of the answers only what the commands read. `--json`
//! prints the answer as the service sent it, so nothing is lost by decoding
//! only part of it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::batch::{BatchState, FailCategory, FailStage, Trigger};

/// `POST /v1/batches`.
#[derive(Debug, Clone, Serialize)]
pub struct StartRequest {
    pub task: String,
    pub dataset: String,
    pub dt: String,
    pub partitions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_seconds: Option<i64>,
    /// Residue batches whose rows the task deleted before this start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cleaned_batch_ids: Vec<String>,
    /// The partitions the batch reads: its lineage.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputRef>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_unready_inputs: bool,
    /// The repair plan this batch carries out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair_id: Option<i64>,
}

/// A partition a batch reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRef {
    pub dataset: String,
    pub partition: String,
}

impl std::str::FromStr for InputRef {
    type Err = String;

    /// `DATASET:PARTITION`, e.g. `dwd.orders:dt=2026-08-24`. Dataset names
    /// may hold `:`, partitions may not begin with one: the split is at the
    /// last `:` before the partition's first `=`.
    fn from_str(s: &str) -> Result<Self, String> {
        let key_end = s.find('=').unwrap_or(s.len());
        match s[..key_end].rfind(':') {
            Some(at) if at > 0 && at + 1 < s.len() => {
                Ok(Self { dataset: s[..at].to_owned(), partition: s[at + 1..].to_owned() })
            }
            _ => Err(format!("expected DATASET:PARTITION, e.g. dwd.orders:dt=2026-08-24, got {s:?}")),
        }
    }
}

/// `POST /v1/batches/{batch_id}/written`.
#[derive(Debug, Clone, Serialize)]
pub struct WrittenRequest {
    pub partitions: Vec<WrittenPartition>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WrittenPartition {
    pub partition: String,
    pub rows_written: u64,
}

/// `POST /v1/partitions/{dataset}/{partition}/invalidate`.
#[derive(Debug, Clone, Serialize)]
pub struct InvalidateRequest {
    pub reason: String,
}

/// `POST /v1/repairs`.
#[derive(Debug, Clone, Serialize)]
pub struct RepairRequest {
    pub dataset: String,
    pub partitions: Vec<String>,
    pub action: String,
    pub reason: String,
}

/// `PUT /v1/datasets/{dataset}`: the whole policy; a field left out takes
/// its default.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_volume_change: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_periods: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_empty: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_partitions_per_batch: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Deadline>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Deadline {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub days_after_dt: Option<i64>,
}

/// The answer to a start.
#[derive(Debug, Clone, Deserialize)]
pub struct Started {
    pub batch_id: String,
    /// `running`, except on an `Idempotency-Key` replay of a batch that has
    /// moved on since.
    pub state: BatchState,
    /// Earlier attempts whose rows the task should delete before writing.
    pub residue: Vec<Residue>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Residue {
    pub batch_id: String,
    pub state: BatchState,
    pub partitions: Vec<String>,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, Deserialize)]
pub struct Lease {
    pub batch_id: String,
    pub lease_expires_at: String,
}

/// What a task reports for one partition it wrote. Unknown fields are
/// refused here as by the service, so a typo cannot drop evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionStats {
    pub partition: String,
    pub rows_written: u64,
    pub row_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinct_keys: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_keys: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
}

/// What the source held, for `source_reconciliation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_count: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
}

/// `POST /v1/batches/{batch_id}/commit`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommitRequest {
    pub marker: String,
    pub partitions: Vec<PartitionStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStats>,
}

/// `POST /v1/batches/{batch_id}/fail`.
#[derive(Debug, Clone, Serialize)]
pub struct FailRequest {
    pub stage: FailStage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<FailCategory>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A batch record, as commit and fail answer it.
#[derive(Debug, Clone, Deserialize)]
pub struct BatchRecord {
    pub batch_id: String,
    pub state: BatchState,
    pub partitions: Vec<BatchPartition>,
    pub checks: Vec<CheckResult>,
    pub failure: Option<Failure>,
}

impl BatchRecord {
    /// The checks that failed.
    pub fn failed_checks(&self) -> impl Iterator<Item = &CheckResult> {
        self.checks.iter().filter(|c| c.status == "fail")
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct BatchPartition {
    pub partition: String,
    /// The version this batch published; none unless it published.
    pub version: Option<i64>,
    pub row_count: Option<i64>,
}

/// One check's outcome.
#[derive(Debug, Clone, Deserialize)]
pub struct CheckResult {
    pub name: String,
    /// Absent for batch-wide checks.
    pub partition: Option<String>,
    /// `pass`, `warn`, `fail` (blocking) or `skipped`.
    pub status: String,
    pub observed: Value,
    pub expected: Value,
    pub message: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Failure {
    pub stage: FailStage,
    pub category: Option<FailCategory>,
}

/// What `/ready` is asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every one of these partitions of the dataset.
    Partitions { dataset: String, partitions: Vec<String> },
    /// The partitions of the task's latest batch for the data date.
    Task { task: String, dt: String },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Partitions { dataset, partitions } => write!(f, "{dataset} {}", partitions.join(", ")),
            Target::Task { task, dt } => write!(f, "task {task} dt {dt}"),
        }
    }
}

/// The answer of `/ready`.
#[derive(Debug, Clone)]
pub enum Readiness {
    Ready(Ready),
    NotReady(NotReady),
}

#[derive(Debug, Clone, Deserialize)]
pub struct Ready {
    pub partitions: Vec<PublishedPartition>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PublishedPartition {
    pub partition: String,
    pub version: i64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NotReady {
    /// `no_batch`, `running`, `rejected`, `failed`, `abandoned` or
    /// `unavailable`.
    pub reason: String,
    /// The first partition that is not ready.
    pub partition: Option<String>,
    /// The batch that decides that partition's state.
    pub batch_id: Option<String>,
}
