//! Request bodies: what the service accepts and the client sends. Each is
//! declared once; unknown fields are refused on both sides (a typo would
//! silently drop evidence).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::schemas::{BatchIdText, DatasetNameText, HumanDuration, PartitionNameText, ScopeText, TaskNameText};
use crate::domain::batch::{FailCategory, FailStage, Trigger};
use crate::domain::deadline::Deadline;
use crate::domain::policy::{self, Tier, WriteMode};

/// Starts a batch: one attempt by one task to produce one data date of one dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"task": "dws_order_detail_daily", "dataset": "dws.order_detail", "dt": "2026-08-24",
    "partitions": ["dt=2026-08-24"], "scope": {"timezone": "Asia/Shanghai", "business_start": "2026-08-24T00:00:00+08:00",
    "business_end": "2026-08-25T00:00:00+08:00", "input_snapshot": "event_date=2026-08-24"}, "trigger": "scheduled",
    "run_ref": "scheduled__2026-08-25T00:00:00", "lease_seconds": 3600}))]
pub struct StartRequest {
    /// The producing task, e.g. an Airflow `dag_id.task_id`.
    #[schema(value_type = TaskNameText)]
    pub task: String,
    /// A target table, e.g. `dws.order_detail`.
    #[schema(value_type = DatasetNameText)]
    pub dataset: String,
    /// A data date, `YYYY-MM-DD`.
    #[schema(format = Date)]
    pub dt: String,
    /// The partitions this batch writes; required and non-empty (an overwrite
    /// must name what it replaces), no spec listed twice. Each is a Hive-style
    /// partition spec `k=v[/k=v…]`, e.g. `dt=2026-08-24` or
    /// `dt=2026-08-24/region=cn`: keys are `[A-Za-z0-9_]+` and may not repeat;
    /// values are non-empty and hold no `/`, `=`, `*`, white space or control
    /// characters. Kept exactly as written.
    #[schema(min_items = 1, value_type = Vec<PartitionNameText>)]
    pub partitions: Vec<String>,
    /// Recorded as given and returned in history. `timezone`, when present,
    /// must be an IANA time zone; `business_start`/`business_end`, when
    /// present, RFC 3339 times. Other keys are free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Scope>)]
    pub scope: Option<Value>,
    /// Why the batch ran (default `scheduled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = "scheduled")]
    pub trigger: Option<Trigger>,
    /// The scheduler's run id, e.g. `scheduled__2026-08-25T00:00:00`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_ref: Option<String>,
    /// How long the batch holds its partitions without a heartbeat, in
    /// seconds (1 s to a week).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::option")]
    #[schema(minimum = 1, maximum = 604800, default = json!(crate::domain::batch::DEFAULT_LEASE_SECONDS))]
    pub lease_seconds: Option<i64>,
    /// Residue batches whose rows the task deleted before this start. For
    /// `append` datasets a start over residue is refused (409
    /// `cleanup_required`) unless this covers every residue batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<BatchIdText>>)]
    pub cleaned_batch_ids: Option<Vec<String>>,
    /// Partitions the batch reads. Each is resolved to its current published
    /// version and recorded; an input that is not ready refuses the start with
    /// 409 `upstream_not_ready` unless `allow_unready_inputs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<InputRef>>,
    /// Start even if an input is not ready (recorded on the batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = false)]
    pub allow_unready_inputs: Option<bool>,
    /// The repair plan this batch carries out.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::option")]
    #[schema(minimum = 1)]
    pub repair_id: Option<i64>,
}

/// `scope` of a start: free-form, with a few keys that are checked.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Scope {
    /// An IANA time zone.
    #[schema(example = "Asia/Shanghai")]
    timezone: Option<String>,
    #[schema(format = DateTime)]
    business_start: Option<String>,
    #[schema(format = DateTime)]
    business_end: Option<String>,
    input_snapshot: Option<String>,
}

/// A partition a batch reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputRef {
    #[schema(value_type = DatasetNameText)]
    pub dataset: String,
    #[schema(value_type = PartitionNameText)]
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

/// The task's write to the target committed (before verification).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WrittenRequest {
    pub partitions: Vec<WrittenPartition>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WrittenPartition {
    #[schema(value_type = PartitionNameText)]
    pub partition: String,
    #[serde(deserialize_with = "crate::whole::deserialize")]
    pub rows_written: u64,
}

/// What the task reports for one partition after writing it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PartitionStats {
    #[schema(value_type = PartitionNameText)]
    pub partition: String,
    /// Rows this batch wrote.
    #[serde(deserialize_with = "crate::whole::deserialize")]
    pub rows_written: u64,
    /// `count(*)` of the partition after the write.
    #[serde(deserialize_with = "crate::whole::deserialize")]
    pub row_count: u64,
    /// Distinct values of the dataset's unique key; `unique_keys` is skipped
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::option")]
    pub distinct_keys: Option<u64>,
    /// Rows with a null in the unique key; `null_keys` is skipped when absent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::option")]
    pub null_keys: Option<u64>,
    /// Named numeric metrics, e.g. `{"amount": 98765432.10}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
}

/// Counts taken from the source the batch read; `source_reconciliation`
/// compares them with the partitions' sums.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceStats {
    /// Must equal the sum of `rows_written`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::option")]
    pub row_count: Option<u64>,
    /// Each must equal the sum of the partitions' metric of that name
    /// (relative tolerance 1e-9).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
}

/// The evidence a task gives when it has written its partitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"marker": "hdfs://warehouse/dws/order_detail/dt=2026-08-24/_SUCCESS",
    "partitions": [{"partition": "dt=2026-08-24", "rows_written": 1000000, "row_count": 1000000,
    "distinct_keys": 1000000, "null_keys": 0, "metrics": {"amount": 98765432.1}}],
    "source": {"row_count": 1000000, "metrics": {"amount": 98765432.1}}}))]
pub struct CommitRequest {
    /// The completion marker, e.g. a `_SUCCESS` path. Absent is the same as
    /// empty: `marker_present` fails.
    #[serde(default)]
    pub marker: String,
    /// Exactly the partitions declared at start (`partitions_complete`).
    pub partitions: Vec<PartitionStats>,
    /// Without it `source_reconciliation` is skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStats>,
}

/// The task's report that it failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"stage": "write", "category": "resource", "message": "executor lost"}))]
pub struct FailRequest {
    pub stage: FailStage,
    /// Default `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = "unknown")]
    pub category: Option<FailCategory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A dataset's policy. A PUT replaces the whole policy: a field left out
/// takes its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = DatasetPolicy, example = json!({"tier": "core", "write_mode": "overwrite_partition", "unique_key": ["order_id"],
    "timezone": "Asia/Shanghai", "max_volume_change": 0.3, "baseline_periods": 7, "allow_empty": false,
    "owner": "data-platform"}))]
pub struct PolicyRequest {
    /// How much the gate blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = json!(policy::DEFAULT_TIER))]
    pub tier: Option<Tier>,
    /// How the producing task writes its partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = json!(policy::DEFAULT_WRITE_MODE))]
    pub write_mode: Option<WriteMode>,
    /// Column names (no white space or control characters); default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<Vec<String>>,
    /// An IANA time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = json!(policy::DEFAULT_TIMEZONE))]
    pub timezone: Option<String>,
    /// Largest allowed `|row_count − baseline| / baseline`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, default = json!(policy::DEFAULT_MAX_VOLUME_CHANGE))]
    pub max_volume_change: Option<f64>,
    /// How many earlier published dts form the volume baseline (their
    /// median); 1 to 366.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::option")]
    #[schema(minimum = 1, maximum = 366, default = json!(policy::DEFAULT_BASELINE_PERIODS))]
    pub baseline_periods: Option<u32>,
    /// Accept a batch that wrote no rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = json!(policy::DEFAULT_ALLOW_EMPTY))]
    pub allow_empty: Option<bool>,
    /// Empty is the same as absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Most partitions one overwrite_partition batch may replace (422
    /// `overwrite_scope_too_wide` beyond).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::option")]
    #[schema(minimum = 1, default = json!(policy::DEFAULT_MAX_PARTITIONS_PER_BATCH))]
    pub max_partitions_per_batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Deadline>,
    /// This dataset's alerts are also POSTed here. Its host must be allowed by
    /// the service (`--webhook-allow`, or the host of `--webhook-url`), else
    /// `422 webhook_not_allowed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    /// The Airflow asset (name, or URI if it contains `://`) each published
    /// version of a partition is reported to as an asset event on
    /// `--airflow-url`; none: no events. An asset Airflow does not know
    /// raises an `airflow_asset_unknown` alert and the event waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1500)]
    pub airflow_asset: Option<String>,
    /// The asset event's partition key: a template over the partition spec's
    /// keys, `{key}` for a key's value (default `{dt}`, e.g. `{region}|{dt}`).
    /// A key the dataset's partitions lack is `422` naming this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200, example = "{region}|{dt}")]
    pub partition_key: Option<String>,
    /// Every change-feed entry of this dataset is also POSTed here as a
    /// CloudEvent (besides `--events-url`); allow-listed like `webhook_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_url: Option<String>,
}

/// Takes a partition out of service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvalidateRequest {
    /// Why; not empty.
    #[schema(min_length = 1)]
    pub reason: String,
}

/// Plans a repair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepairRequest {
    #[schema(value_type = DatasetNameText)]
    pub dataset: String,
    #[schema(min_items = 1, value_type = Vec<PartitionNameText>)]
    pub partitions: Vec<String>,
    /// `rebuild`, `resume` or `compensate`.
    #[schema(value_type = RepairActionName)]
    pub action: String,
    /// Why the repair is needed; not empty.
    #[schema(min_length = 1)]
    pub reason: String,
}

/// What a repair does.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum RepairActionName {
    Rebuild,
    Resume,
    Compensate,
}

/// Makes an API token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCreateRequest {
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub name: String,
    /// `read`, `produce:<glob>`, `operate:<glob>` or `admin`; `*` in a glob
    /// matches any run of characters.
    #[schema(min_items = 1, value_type = Vec<ScopeText>, example = json!(["read", "produce:sales.*"]))]
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<Lifetime>,
}

/// How long a token lives: `"90d"`, `"12h"`, or a number of seconds (≥ 60).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Lifetime {
    Seconds(#[serde(deserialize_with = "crate::whole::deserialize")] u64),
    #[schema(value_type = HumanDuration)]
    Text(String),
}

#[cfg(test)]
mod tests {
    use crate::domain::batch::{DEFAULT_LEASE_SECONDS, MAX_LEASE_SECONDS};

    /// utoipa takes only a literal for `maximum`: this keeps it the rule's.
    #[test]
    fn the_spec_states_the_lease_rule_of_domain_batch() {
        let spec: serde_json::Value = serde_json::from_str(&crate::api::openapi::json()).expect("spec");
        let lease = &spec["components"]["schemas"]["StartRequest"]["properties"]["lease_seconds"];
        assert_eq!(lease["maximum"], serde_json::json!(MAX_LEASE_SECONDS), "{lease}");
        assert_eq!(lease["default"], serde_json::json!(DEFAULT_LEASE_SECONDS), "{lease}");
        assert_eq!(lease["minimum"], serde_json::json!(1), "{lease}");
    }
}
