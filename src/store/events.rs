//! The details the registry stores with each batch event
//! (`batch_events.detail`) and each readiness change (`changes.detail`):
//! one type per kind, serialised to the JSON the API shows. A field that
//! events written by an earlier version lack is optional here, and left out
//! when absent, so such an event reads and is shown as it was stored.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::records::Residue;
use crate::domain::batch::{FailCategory, FailStage, Trigger};
use crate::domain::checks::CheckName;
use crate::domain::retry::RetryAdvice;
use crate::domain::staleness::Staleness;

/// `started`: how the batch was started, and what it must clean first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = StartedDetail)]
pub struct Started {
    pub trigger: Trigger,
    pub run_ref: Option<String>,
    pub lease_expires_at: DateTime<Utc>,
    /// What earlier attempts may have left in these partitions.
    #[serde(default)]
    pub residue: Vec<Residue>,
    /// The retry advice the start answered. Absent on a batch started by
    /// the first version of the registry, which gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub retry: Option<RetryAdvice>,
    /// The residue the task said it had cleaned. Absent where `retry` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub cleaned_batch_ids: Option<Vec<String>>,
}

/// `heartbeat`: every heartbeat of a batch summed up in one event, at the
/// first one; `lease_expires_at` is the lease the last one set. An event
/// written before heartbeats were summed up is one heartbeat and holds only
/// `lease_expires_at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = HeartbeatDetail)]
pub struct Heartbeats {
    /// Absent on an event written before heartbeats were summed up: then the event's own time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub first_at: Option<DateTime<Utc>>,
    /// Absent on an event written before heartbeats were summed up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub last_at: Option<DateTime<Utc>>,
    /// Absent on an event written before heartbeats were summed up: it was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub lease_expires_at: Option<DateTime<Utc>>,
}

impl Heartbeats {
    /// How many heartbeats the event sums up.
    pub fn count(&self) -> i64 {
        self.count.unwrap_or(1)
    }
}

/// One partition of a `written` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = WrittenPartitionDetail)]
pub struct WrittenPartition {
    pub partition: String,
    pub rows_written: Option<i64>,
}

/// `written`: the task reported that its write to the target committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = WrittenDetail)]
pub struct Written {
    pub partitions: Vec<WrittenPartition>,
}

/// `committed`: published with its marker, or rejected with the checks that failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = CommittedDetail)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Committed {
    Published { marker: Option<String> },
    Rejected { failed_checks: Vec<CheckName> },
}

/// `failed` and `fail_after_publish`: what the task reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = FailedDetail)]
pub struct Failed {
    pub stage: FailStage,
    pub category: FailCategory,
    pub message: Option<String>,
}

/// `abandoned`: the lease that ran out, and the batch that started over it (none: the lease scan).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = AbandonedDetail)]
pub struct Abandoned {
    pub lease_expired_at: DateTime<Utc>,
    pub by: Option<String>,
}

/// `superseded`: the newer batch that re-published the last of its partitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = SupersededDetail)]
pub struct Superseded {
    pub by: String,
}

/// The detail of a readiness change: `reason` of an invalidation,
/// `upstream` of a stale change, nothing otherwise.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChangeDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Staleness>,
}

impl ChangeDetail {
    pub fn invalidated(reason: &str) -> Self {
        Self { reason: Some(reason.to_owned()), upstream: None }
    }

    pub fn stale(upstream: Staleness) -> Self {
        Self { reason: None, upstream: Some(upstream) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn details_serialise_to_the_json_the_api_shows() {
        let published = Committed::Published { marker: None };
        assert_eq!(serde_json::to_value(&published).unwrap(), json!({"state": "published", "marker": null}));
        let rejected = Committed::Rejected { failed_checks: vec![CheckName::NonEmpty] };
        assert_eq!(
            serde_json::to_value(&rejected).unwrap(),
            json!({"state": "rejected", "failed_checks": ["non_empty"]})
        );
        let failed = Failed { stage: FailStage::Write, category: FailCategory::Unknown, message: None };
        assert_eq!(
            serde_json::to_value(&failed).unwrap(),
            json!({"stage": "write", "category": "unknown", "message": null})
        );
        assert_eq!(serde_json::to_value(ChangeDetail::default()).unwrap(), json!({}));
        assert_eq!(serde_json::to_value(ChangeDetail::invalidated("bad")).unwrap(), json!({"reason": "bad"}));
        let old: Heartbeats = serde_json::from_value(json!({})).unwrap();
        assert_eq!((old.first_at, old.count()), (None, 1));
    }
}
