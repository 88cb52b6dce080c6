//! Repairs: before pressing the button, where does each partition stand,
//! and what should the repair do about it?

use super::batch::{touches_table, BatchState, FailStage};
use super::policy::{string_enum, WriteMode};

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
}
