//! The readiness rule: a partition is ready when what may be in the table is
//! exactly what a published batch accounted for.

use super::batch::BatchState;
use super::policy::string_enum;

string_enum! {
    /// What a partition's latest table-touching batch says about it.
    PartitionState {
        Ready = "ready",
        Running = "running",
        Rejected = "rejected",
        Failed = "failed",
        Abandoned = "abandoned",
    }
}

/// Decides a partition's state from the latest batch that may have touched
/// its rows (see [`super::batch::touches_table`]) and whether any version was
/// ever published.
///
/// A running, rejected, abandoned or late-failed batch may have left rows the
/// published version does not account for, so it hides that version until a
/// later batch publishes. With no such batch (only early failures), the last
/// published version stands; with none published either, the partition is
/// `failed`.
pub fn partition_state(latest_touching: Option<BatchState>, has_published: bool) -> PartitionState {
    match latest_touching {
        Some(BatchState::Published | BatchState::Superseded) => PartitionState::Ready,
        Some(BatchState::Running) => PartitionState::Running,
        Some(BatchState::Rejected) => PartitionState::Rejected,
        Some(BatchState::Failed) => PartitionState::Failed,
        Some(BatchState::Abandoned) => PartitionState::Abandoned,
        None if has_published => PartitionState::Ready,
        None => PartitionState::Failed,
    }
}

/// Why a partition is not fit to read, or `None` when it is: its latest
/// batch's state first (`running`, `rejected`, …), then an invalidation, then
/// upstream data that has moved on since it was built (`stale_upstream`).
pub fn unfit(state: &str, invalidated: bool, stale: bool) -> Option<&str> {
    if state != PartitionState::Ready.as_str() {
        Some(state)
    } else if invalidated {
        Some("invalidated")
    } else if stale {
        Some("stale_upstream")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_batch_that_may_have_written_hides_the_published_version() {
        for (state, expected) in [
            (BatchState::Running, PartitionState::Running),
            (BatchState::Rejected, PartitionState::Rejected),
            (BatchState::Failed, PartitionState::Failed),
            (BatchState::Abandoned, PartitionState::Abandoned),
            (BatchState::Published, PartitionState::Ready),
        ] {
            assert_eq!(partition_state(Some(state), true), expected);
        }
    }

    #[test]
    fn a_ready_partition_is_unfit_when_invalidated_or_stale() {
        assert_eq!(unfit("running", true, true), Some("running"));
        assert_eq!(unfit("ready", true, true), Some("invalidated"));
        assert_eq!(unfit("ready", false, true), Some("stale_upstream"));
        assert_eq!(unfit("ready", false, false), None);
    }

    #[test]
    fn with_only_early_failures_the_last_publish_stands() {
        assert_eq!(partition_state(None, true), PartitionState::Ready);
        assert_eq!(partition_state(None, false), PartitionState::Failed);
    }
}
