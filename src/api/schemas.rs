//! Shapes the spec names that have no Rust type of their own. The enums the
//! registry stores are typed where they live (`domain/`, `string_enum!`
//! derives `ToSchema`). The response-schema check in the API tests keeps
//! these true to what the service sends.

use utoipa::ToSchema;

/// Where a delivery stands.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum DeliveryState {
    Pending,
    Delivered,
    GivenUp,
}

/// What to clean before writing: `{}` when nothing needs cleaning.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Cleanup {
    batch_ids: Option<Vec<String>>,
    /// `DELETE FROM <dataset> WHERE batch_id IN (...)`.
    statement: Option<String>,
}

/// When a `/ready` long-poll may answer before its deadline.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum Until {
    Ready,
    ReadyOrRejected,
}

/// The four questions before a repair, answered from the registry: per
/// partition its `scope` (data date, timezone, the input versions the current
/// version read vs the current ones), `identity` (unique key and last
/// published counts), `retry_boundary`; and every partition downstream,
/// transitively, with owner, write mode and whether it will need
/// recomputing. `GET` adds `progress`. `state` is `planned`, `in_progress` (a
/// batch started with its `repair_id`) or `complete` (every partition and
/// every downstream partition fresh).
///
/// Until the store returns a typed plan, this declares its shape; the API
/// tests check every plan they receive against it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RepairPlan {
    id: i64,
    state: RepairState,
    dataset: String,
    action: String,
    reason: String,
    created_at: Option<chrono::DateTime<chrono::Utc>>,
    partitions: Vec<RepairPartition>,
    downstream: Vec<RepairDownstream>,
    /// `GET` only: `partitions` (per partition its `state` (fitness), `done`,
    /// `batches`, `row_count` {before, after, baseline}, `unique_keys`,
    /// `metric_vs_source`, `rebuilds`, `rebuilt_identically`) and
    /// `downstream` (per partition `state` (fitness, as `/ready`), `stale`,
    /// `recomputed`).
    progress: Option<Object>,
}

type Object = serde_json::Map<String, serde_json::Value>;

#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum RepairState {
    Planned,
    InProgress,
    Complete,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RepairPartition {
    partition: String,
    /// The partition's fitness as `/ready` judges it.
    state: crate::domain::readiness::Fitness,
    #[schema(value_type = Object)]
    scope: Object,
    #[schema(value_type = Object)]
    identity: Object,
    retry_boundary: RetryBoundary,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RetryBoundary {
    state: crate::domain::repair::Boundary,
    latest_batch_id: Option<String>,
    /// What to do to the partition: in a `rebuild` plan `rebuild` (or
    /// `compensate` for `append` and `delete_insert_by_batch` datasets, whose
    /// old rows must come out first) whatever the boundary; otherwise what the
    /// boundary calls for.
    recommended_action: crate::domain::repair::RepairAction,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RepairDownstream {
    dataset: String,
    partition: String,
    owner: Option<String>,
    write_mode: crate::domain::policy::WriteMode,
    /// The partition's fitness as `/ready` judges it.
    state: crate::domain::readiness::Fitness,
    needs_recompute: bool,
}
