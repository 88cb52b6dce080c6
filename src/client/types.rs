//! The client's view of the API's bodies: the requests are the service's
//! own types ([`crate::api`]); of the answers it decodes only what the
//! commands read. `--json` prints the answer as the service sent it, so
//! nothing is lost by decoding only part of it.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

pub use crate::api::NotReadyReason;
pub use crate::api::{
    CommitRequest, FailRequest, InputRef, InvalidateRequest, PartitionStats, PolicyRequest, RepairRequest, SourceStats,
    StartRequest, WrittenPartition, WrittenRequest,
};
use crate::domain::batch::{BatchState, FailCategory, FailStage};
pub use crate::domain::deadline::Deadline;

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
    /// Why not: the spec's `NotReadyReason`, one definition for the service,
    /// this client and the spec.
    pub reason: NotReadyReason,
    /// The first partition that is not ready.
    pub partition: Option<String>,
    /// The batch that decides that partition's state.
    pub batch_id: Option<String>,
}
