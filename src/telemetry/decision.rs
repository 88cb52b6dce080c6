//! The log line of a decision: one info event per published, rejected,
//! failed or abandoned batch, with the ids as fields.

use serde::Serialize;
use serde_json::Value;

use super::context;
use crate::domain::batch::{FailCategory, FailStage};
use crate::domain::checks::{CheckName, CheckResult};
use crate::domain::policy::Tier;

/// How a batch was decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Published,
    Rejected,
    Failed {
        stage: FailStage,
        category: FailCategory,
    },
    /// Its lease ran out; `superseded_by` names the batch whose start noticed.
    Abandoned {
        superseded_by: Option<String>,
    },
}

impl Outcome {
    pub fn state(&self) -> &'static str {
        match self {
            Outcome::Published => "published",
            Outcome::Rejected => "rejected",
            Outcome::Failed { .. } => "failed",
            Outcome::Abandoned { .. } => "abandoned",
        }
    }
}

/// A failed check as the log shows it: what was observed against what was
/// expected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedCheck {
    pub check: CheckName,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    pub observed: Value,
    pub expected: Value,
    pub blocking: bool,
}

impl From<&CheckResult> for FailedCheck {
    fn from(c: &CheckResult) -> Self {
        Self {
            check: c.name,
            partition: c.partition.clone(),
            observed: c.observed.clone(),
            expected: c.expected.clone(),
            blocking: c.blocking,
        }
    }
}

/// A committed decision about a batch (logged only once its transaction
/// committed).
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub batch_id: String,
    pub dataset: String,
    pub tier: Tier,
    pub partitions: Vec<String>,
    pub outcome: Outcome,
    /// Failed checks: the reasons of a rejection, or the non-blocking
    /// failures a published batch carried.
    pub failed_checks: Vec<FailedCheck>,
}

impl Decided {
    pub(super) fn log(&self) {
        let request_id = context::request_id();
        let actor = context::actor();
        let partitions = self.partitions.join(",");
        let failed_checks = serde_json::to_string(&self.failed_checks).unwrap_or_default();
        macro_rules! decision {
            ($($extra:tt)*) => {
                tracing::info!(
                    target: "batchgate::decision",
                    batch_id = %self.batch_id,
                    dataset = %self.dataset,
                    partitions = %partitions,
                    tier = self.tier.as_str(),
                    state = self.outcome.state(),
                    actor = %actor,
                    request_id = request_id.as_deref(),
                    $($extra)*
                )
            };
        }
        match &self.outcome {
            Outcome::Published if self.failed_checks.is_empty() => decision!("batch published"),
            Outcome::Published => decision!(failed_checks = %failed_checks, "batch published with failed checks"),
            Outcome::Rejected => decision!(failed_checks = %failed_checks, "batch rejected"),
            Outcome::Failed { stage, category } => {
                decision!(stage = stage.as_str(), category = category.as_str(), "batch failed")
            }
            Outcome::Abandoned { superseded_by } => {
                decision!(superseded_by = superseded_by.as_deref(), "batch abandoned: its lease expired")
            }
        }
    }
}
