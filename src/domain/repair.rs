//! Repairs: before pressing the button, where does each partition stand,
//! and what should the repair do about it?

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::batch::{touches_table, BatchState, FailStage};
use super::checks::{median, CheckResult};
use super::policy::{string_enum, WriteMode};
use super::readiness::Fitness;

string_enum! {
    /// What a repair does to a partition.
    RepairAction { Rebuild = "rebuild", Resume = "resume", Compensate = "compensate", NothingToDo = "nothing_to_do" }
}

string_enum! {
    /// Where the last attempt on a partition stopped.
    Boundary {
        NeverWritten = "never_written",
        PartiallyWritten = "partially_written",
        CommittedUnacknowledged = "committed_unacknowledged",
        PublishedDownstreamPending = "published_downstream_pending",
        PublishedClean = "published_clean",
    }
}

/// One batch of a partition's history, newest first in [`boundary`].
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub state: BatchState,
    pub stage: Option<FailStage>,
    /// The task reported `fail` after this batch had published: it never
    /// heard the acknowledgement of its commit.
    pub failed_after_publish: bool,
}

/// Classifies a partition from its attempts (newest first) and whether any
/// partition built on it is stale. The batch that counts is the newest that
/// may have touched the table: a later failure at `read`/`compute` changed
/// nothing.
pub fn boundary(attempts: &[Attempt], downstream_stale: bool) -> Boundary {
    let Some(latest) = attempts.iter().find(|a| touches_table(a.state, a.stage)) else {
        return Boundary::NeverWritten;
    };
    match latest.state {
        BatchState::Published | BatchState::Superseded if latest.failed_after_publish => {
            Boundary::CommittedUnacknowledged
        }
        BatchState::Published | BatchState::Superseded if downstream_stale => Boundary::PublishedDownstreamPending,
        BatchState::Published | BatchState::Superseded => Boundary::PublishedClean,
        BatchState::Running | BatchState::Rejected | BatchState::Abandoned | BatchState::Failed => {
            Boundary::PartiallyWritten
        }
    }
}

/// What to do to a partition at this boundary, in a plan that asks for
/// `requested`. A rebuild replaces data that is in the table: a mode that
/// cannot overwrite it (append, delete-insert by batch) must take the old
/// rows out first, so it compensates; the others rebuild. Otherwise the
/// boundary decides.
pub fn recommend(b: Boundary, mode: WriteMode, requested: RepairAction) -> RepairAction {
    let in_table = !matches!(b, Boundary::NeverWritten);
    if requested == RepairAction::Rebuild && in_table {
        return match mode {
            WriteMode::Append | WriteMode::DeleteInsertByBatch => RepairAction::Compensate,
            WriteMode::OverwritePartition | WriteMode::Merge => RepairAction::Rebuild,
        };
    }
    match b {
        Boundary::NeverWritten => RepairAction::Rebuild,
        // Rows of the failed attempt are in the table: a mode that cannot
        // overwrite them must take them out first.
        Boundary::PartiallyWritten => match mode {
            WriteMode::Append | WriteMode::DeleteInsertByBatch => RepairAction::Compensate,
            WriteMode::OverwritePartition | WriteMode::Merge => RepairAction::Rebuild,
        },
        // The data is in; carry on from after the commit.
        Boundary::CommittedUnacknowledged | Boundary::PublishedDownstreamPending => RepairAction::Resume,
        Boundary::PublishedClean => RepairAction::NothingToDo,
    }
}

string_enum! {
    /// Where a repair stands: `planned`, `in_progress` (a batch started with
    /// its `repair_id`) or `complete` (every partition and every downstream
    /// partition fresh).
    RepairState { Planned = "planned", InProgress = "in_progress", Complete = "complete" }
}

/// The four questions before a repair, answered from the registry: per
/// partition its `scope` (data date, timezone, the input versions the current
/// version read vs the current ones), `identity` (unique key and last
/// published counts), `retry_boundary`; and every partition downstream,
/// transitively, with owner, write mode and whether it will need
/// recomputing. `GET` adds `progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RepairPlan {
    pub id: i64,
    pub state: RepairState,
    pub dataset: String,
    pub action: RepairAction,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    pub partitions: Vec<RepairPartition>,
    pub downstream: Vec<RepairDownstream>,
    /// `GET` only: the numbers per partition and what downstream still waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<RepairProgress>,
}

/// What the registry keeps of a plan besides its columns: the evidence
/// gathered when it was planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanEvidence {
    pub partitions: Vec<RepairPartition>,
    pub downstream: Vec<RepairDownstream>,
}

/// One partition of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RepairPartition {
    pub partition: String,
    /// The partition's fitness as `/ready` judges it.
    pub state: Fitness,
    pub scope: RepairScope,
    pub identity: Identity,
    pub retry_boundary: RetryBoundary,
}

/// Question 1: which data date, in which zone, built from which inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RepairScope {
    pub partition: String,
    /// Null when no batch ever named the partition.
    pub dt: Option<NaiveDate>,
    pub timezone: String,
    /// What the current version read vs what is current now.
    pub inputs: Vec<ScopeInput>,
}

/// An input of the current version: the version it read and where that input stands now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScopeInput {
    pub dataset: String,
    pub partition: String,
    pub read_version: i64,
    pub current_version: i64,
    pub current_state: Fitness,
}

/// Question 2: what identifies a row, and the last published counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Identity {
    pub unique_key: Vec<String>,
    /// Null before the first publish.
    pub published: Option<PublishedCounts>,
}

/// The counts a batch reported for one partition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PartitionCounts {
    pub row_count: Option<i64>,
    pub distinct_keys: Option<i64>,
    pub null_keys: Option<i64>,
    /// Named numeric metrics, e.g. `{"amount": 98765432.10}`.
    #[schema(value_type = Option<std::collections::BTreeMap<String, f64>>)]
    pub metrics: Option<Value>,
}

/// The current published version and its counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PublishedCounts {
    pub version: i64,
    pub batch_id: String,
    pub row_count: Option<i64>,
    pub distinct_keys: Option<i64>,
    pub null_keys: Option<i64>,
    #[schema(value_type = Option<std::collections::BTreeMap<String, f64>>)]
    pub metrics: Option<Value>,
}

impl PublishedCounts {
    pub fn new(version: i64, batch_id: String, n: PartitionCounts) -> Self {
        Self {
            version,
            batch_id,
            row_count: n.row_count,
            distinct_keys: n.distinct_keys,
            null_keys: n.null_keys,
            metrics: n.metrics,
        }
    }
}

/// Question 3: where the last attempt stopped, and what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RetryBoundary {
    pub state: Boundary,
    pub latest_batch_id: Option<String>,
    /// What to do to the partition: in a `rebuild` plan `rebuild` (or
    /// `compensate` for `append` and `delete_insert_by_batch` datasets, whose
    /// old rows must come out first) whatever the boundary; otherwise what the
    /// boundary calls for.
    pub recommended_action: RepairAction,
}

/// Question 4: a partition built on a repaired one, transitively.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RepairDownstream {
    pub dataset: String,
    pub partition: String,
    pub owner: Option<String>,
    pub write_mode: WriteMode,
    /// The partition's fitness as `/ready` judges it.
    pub state: Fitness,
    pub needs_recompute: bool,
}

/// A plan's progress: per partition the numbers, per downstream partition
/// whether it was recomputed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RepairProgress {
    pub partitions: Vec<PartitionProgress>,
    pub downstream: Vec<DownstreamProgress>,
}

/// A repaired partition: the batches the repair ran and what they show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PartitionProgress {
    pub partition: String,
    /// The partition's fitness as `/ready` judges it.
    pub state: Fitness,
    /// Ready, and published by the repair's latest batch.
    pub done: bool,
    /// The batches started with the plan's `repair_id`, in order.
    pub batches: Vec<RepairBatch>,
    pub row_count: RowCountProgress,
    pub unique_keys: UniqueKeys,
    /// The `source_reconciliation` check of the latest published repair batch.
    pub metric_vs_source: Option<CheckResult>,
    /// Published repair batches.
    pub rebuilds: u32,
    /// Rebuilt at least twice: whether every rebuild from the same inputs gave the same numbers.
    pub rebuilt_identically: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RepairBatch {
    pub batch_id: String,
    pub status: BatchState,
}

/// Row counts: the published version when planned, the repair's latest, and
/// the median of the dataset's `baseline_periods` earlier periods (the
/// volume check's baseline).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RowCountProgress {
    pub before: Option<i64>,
    pub after: Option<i64>,
    pub baseline: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UniqueKeys {
    pub distinct_keys: Option<i64>,
    pub null_keys: Option<i64>,
    pub row_count: Option<i64>,
}

/// A downstream partition now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DownstreamProgress {
    pub dataset: String,
    pub partition: String,
    /// The partition is `stale_upstream` now.
    pub stale: bool,
    /// Ready again and published since the plan was made.
    pub recomputed: bool,
    /// The partition's fitness as `/ready` judges it.
    pub state: Fitness,
}

/// What the registry knows now about one planned partition.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionFacts {
    pub partition: String,
    /// The row count published when the plan was made.
    pub before: Option<i64>,
    pub fitness: Fitness,
    pub published_batch_id: Option<String>,
    /// The batches started with the plan's `repair_id`, in order.
    pub batches: Vec<RepairBatch>,
    /// Those of them that published, in order.
    pub runs: Vec<Run>,
    /// Published row counts of the earlier periods the volume check compares
    /// with (at most the dataset's `baseline_periods`, newest first).
    pub baseline: Vec<i64>,
}

/// A repair batch that published.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub batch_id: String,
    /// `None` when the batch reported nothing for the partition.
    pub counts: Option<PartitionCounts>,
    /// What it read: (dataset, partition, version).
    pub inputs: Vec<(String, String, i64)>,
    pub source_check: Option<CheckResult>,
}

/// What the registry knows now about one downstream partition.
#[derive(Debug, Clone, PartialEq)]
pub struct DownstreamFacts {
    pub dataset: String,
    pub partition: String,
    pub fitness: Fitness,
    pub published_at: Option<DateTime<Utc>>,
}

/// A plan's progress from the facts: a partition is done when it is ready
/// and its current version is the repair's latest published batch; the plan
/// is complete when every partition is done and everything downstream is
/// ready again, `in_progress` once any repair batch started.
pub fn progress(
    created_at: DateTime<Utc>,
    partitions: Vec<PartitionFacts>,
    downstream: Vec<DownstreamFacts>,
) -> (RepairState, RepairProgress) {
    let any_batch = partitions.iter().any(|p| !p.batches.is_empty());
    let mut all_done = true;
    let partitions: Vec<PartitionProgress> = partitions
        .into_iter()
        .map(|p| {
            let after = p.runs.last();
            let after_counts = after.and_then(|r| r.counts.clone()).unwrap_or_default();
            let done =
                p.fitness.is_ready() && after.is_some_and(|r| p.published_batch_id.as_deref() == Some(&r.batch_id));
            all_done &= done;
            // Rebuilt twice from the same inputs: the numbers must not move.
            let rebuilt_identically = (p.runs.len() >= 2)
                .then(|| p.runs.windows(2).all(|w| (&w[0].counts, &w[0].inputs) == (&w[1].counts, &w[1].inputs)));
            PartitionProgress {
                state: p.fitness,
                done,
                row_count: RowCountProgress {
                    before: p.before,
                    after: after_counts.row_count,
                    baseline: median(&p.baseline),
                },
                unique_keys: UniqueKeys {
                    distinct_keys: after_counts.distinct_keys,
                    null_keys: after_counts.null_keys,
                    row_count: after_counts.row_count,
                },
                metric_vs_source: after.and_then(|r| r.source_check.clone()),
                rebuilds: u32::try_from(p.runs.len()).unwrap_or(u32::MAX),
                rebuilt_identically,
                batches: p.batches,
                partition: p.partition,
            }
        })
        .collect();
    let downstream: Vec<DownstreamProgress> = downstream
        .into_iter()
        .map(|d| {
            all_done &= d.fitness.is_ready();
            DownstreamProgress {
                stale: d.fitness == Fitness::StaleUpstream,
                recomputed: d.fitness.is_ready() && d.published_at.is_some_and(|t| t >= created_at),
                state: d.fitness,
                dataset: d.dataset,
                partition: d.partition,
            }
        })
        .collect();
    let state = match (any_batch, all_done) {
        (false, _) => RepairState::Planned,
        (true, false) => RepairState::InProgress,
        (true, true) => RepairState::Complete,
    };
    (state, RepairProgress { partitions, downstream })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(state: BatchState, stage: Option<FailStage>) -> Attempt {
        Attempt { state, stage, failed_after_publish: false }
    }

    #[test]
    fn the_four_boundaries() {
        assert_eq!(boundary(&[], false), Boundary::NeverWritten);
        assert_eq!(boundary(&[a(BatchState::Failed, Some(FailStage::Read))], false), Boundary::NeverWritten);
        assert_eq!(boundary(&[a(BatchState::Rejected, None)], false), Boundary::PartiallyWritten);
        assert_eq!(boundary(&[a(BatchState::Failed, Some(FailStage::Write))], false), Boundary::PartiallyWritten);
        let unacked = Attempt { state: BatchState::Published, stage: None, failed_after_publish: true };
        assert_eq!(boundary(&[unacked], false), Boundary::CommittedUnacknowledged);
        assert_eq!(boundary(&[a(BatchState::Published, None)], true), Boundary::PublishedDownstreamPending);
        assert_eq!(boundary(&[a(BatchState::Published, None)], false), Boundary::PublishedClean);
        // A later read failure does not move the boundary.
        let history = [a(BatchState::Failed, Some(FailStage::Compute)), a(BatchState::Published, None)];
        assert_eq!(boundary(&history, false), Boundary::PublishedClean);
    }

    #[test]
    fn recommendations_follow_the_write_mode() {
        let resume = RepairAction::Resume;
        assert_eq!(recommend(Boundary::PartiallyWritten, WriteMode::Append, resume), RepairAction::Compensate);
        assert_eq!(recommend(Boundary::PartiallyWritten, WriteMode::OverwritePartition, resume), RepairAction::Rebuild);
        assert_eq!(recommend(Boundary::CommittedUnacknowledged, WriteMode::Merge, resume), RepairAction::Resume);
        assert_eq!(recommend(Boundary::PublishedClean, WriteMode::Append, resume), RepairAction::NothingToDo);
    }

    #[test]
    fn a_partition_in_a_rebuild_plan_is_rebuilt_never_left_alone() {
        let rebuild = RepairAction::Rebuild;
        for b in [Boundary::PublishedClean, Boundary::PublishedDownstreamPending, Boundary::CommittedUnacknowledged] {
            assert_eq!(recommend(b, WriteMode::OverwritePartition, rebuild), RepairAction::Rebuild, "{b}");
            assert_eq!(recommend(b, WriteMode::Merge, rebuild), RepairAction::Rebuild, "{b}");
            assert_eq!(recommend(b, WriteMode::Append, rebuild), RepairAction::Compensate, "{b}");
            assert_eq!(recommend(b, WriteMode::DeleteInsertByBatch, rebuild), RepairAction::Compensate, "{b}");
        }
        assert_eq!(recommend(Boundary::NeverWritten, WriteMode::Append, rebuild), RepairAction::Rebuild);
    }

    fn facts(batches: &[(&str, BatchState)], runs: Vec<Run>, baseline: &[i64]) -> PartitionFacts {
        PartitionFacts {
            partition: "dt=2026-08-24".into(),
            before: Some(100),
            fitness: Fitness::Ready,
            published_batch_id: runs.last().map(|r| r.batch_id.clone()),
            batches: batches.iter().map(|(b, s)| RepairBatch { batch_id: (*b).into(), status: *s }).collect(),
            runs,
            baseline: baseline.to_vec(),
        }
    }

    fn run(batch_id: &str, rows: i64) -> Run {
        Run {
            batch_id: batch_id.into(),
            counts: Some(PartitionCounts { row_count: Some(rows), ..PartitionCounts::default() }),
            inputs: vec![],
            source_check: None,
        }
    }

    #[test]
    fn a_plan_without_repair_batches_is_planned() {
        let (state, p) = progress(DateTime::UNIX_EPOCH, vec![facts(&[], vec![], &[])], vec![]);
        assert_eq!(state, RepairState::Planned);
        assert_eq!(p.partitions[0].row_count, RowCountProgress { before: Some(100), after: None, baseline: None });
        assert!(!p.partitions[0].done);
        assert_eq!(p.partitions[0].rebuilt_identically, None);
    }

    #[test]
    fn progress_counts_rebuilds_and_takes_the_median_of_the_baseline_it_is_given() {
        let published = [("b1", BatchState::Superseded), ("b2", BatchState::Published)];
        let f = facts(&published, vec![run("b1", 98), run("b2", 98)], &[90, 120, 100]);
        let (state, p) = progress(DateTime::UNIX_EPOCH, vec![f], vec![]);
        assert_eq!(state, RepairState::Complete);
        let part = &p.partitions[0];
        assert_eq!(part.row_count, RowCountProgress { before: Some(100), after: Some(98), baseline: Some(100.0) });
        assert_eq!((part.rebuilds, part.rebuilt_identically, part.done), (2, Some(true), true));
        let moved = facts(&published, vec![run("b1", 98), run("b2", 97)], &[]);
        let (_, p) = progress(DateTime::UNIX_EPOCH, vec![moved], vec![]);
        assert_eq!(p.partitions[0].rebuilt_identically, Some(false));
    }

    #[test]
    fn a_stale_downstream_partition_keeps_the_plan_in_progress() {
        let planned = DateTime::UNIX_EPOCH + chrono::Duration::hours(1);
        let f = facts(&[("b1", BatchState::Published)], vec![run("b1", 98)], &[]);
        let stale = DownstreamFacts {
            dataset: "dws.daily".into(),
            partition: "dt=2026-08-24".into(),
            fitness: Fitness::StaleUpstream,
            published_at: Some(DateTime::UNIX_EPOCH),
        };
        let (state, p) = progress(planned, vec![f.clone()], vec![stale.clone()]);
        assert_eq!(state, RepairState::InProgress);
        assert_eq!((p.downstream[0].stale, p.downstream[0].recomputed), (true, false));
        let recomputed = DownstreamFacts { fitness: Fitness::Ready, published_at: Some(planned), ..stale };
        let (state, p) = progress(planned, vec![f], vec![recomputed]);
        assert_eq!(state, RepairState::Complete);
        assert_eq!((p.downstream[0].stale, p.downstream[0].recomputed), (false, true));
    }
}
