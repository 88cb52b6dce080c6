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
