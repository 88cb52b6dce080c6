//! Value sets the records still hold as text (the store reads them as
//! strings): here their names, for the spec. The response-schema check in
//! the API tests keeps these lists true to what the service sends.

use utoipa::ToSchema;

/// What happened to a batch.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum EventKind {
    Started,
    Heartbeat,
    Written,
    Committed,
    Failed,
    Abandoned,
    Superseded,
    FailAfterPublish,
}

/// The eight commit checks, always reported in this order.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum CheckName {
    MarkerPresent,
    PartitionsComplete,
    RowsMatchWritten,
    UniqueKeys,
    NullKeys,
    NonEmpty,
    VolumeVsBaseline,
    SourceReconciliation,
}

/// A change of a partition's readiness.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ChangeKind {
    Published,
    Restated,
    Invalidated,
    Stale,
    FreshAgain,
}

#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum AlertState {
    Open,
    Resolved,
}

/// What the owner should do.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum RecommendedAction {
    WaitForRetry,
    CleanResidueThenRerun,
    FixSourceData,
    FixCodeThenRerun,
    RecomputeDownstream,
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
