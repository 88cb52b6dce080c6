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

string_enum! {
    /// Whether a partition is fit to read and, when it is not, why: the one
    /// answer `/ready`, lineage, repairs, alerts and the deadline scan share.
    /// `no_batch`: no batch ever named the partition.
    Fitness {
        Ready = "ready",
        NoBatch = "no_batch",
        Running = "running",
        Rejected = "rejected",
        Failed = "failed",
        Abandoned = "abandoned",
        Invalidated = "invalidated",
        StaleUpstream = "stale_upstream",
    }
}

string_enum! {
    /// A readiness change, as the change feed lists it.
    ChangeKind {
        Published = "published",
        Restated = "restated",
        Invalidated = "invalidated",
        Stale = "stale",
        FreshAgain = "fresh_again",
    }
}

/// What the fitness rule reads from a partition's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub state: PartitionState,
    /// Taken out of service until a new batch publishes it.
    pub invalidated: bool,
    /// Built on upstream data that has since moved on.
    pub stale_upstream: bool,
}

/// The fitness rule: the latest batch's state first (`running`, `rejected`,
/// …), then an invalidation, then upstream data that has moved on since the
/// partition was built (`stale_upstream`); `no_batch` without a row.
pub fn fitness(standing: Option<Standing>) -> Fitness {
    let Some(s) = standing else {
        return Fitness::NoBatch;
    };
    match s.state {
        PartitionState::Running => Fitness::Running,
        PartitionState::Rejected => Fitness::Rejected,
        PartitionState::Failed => Fitness::Failed,
        PartitionState::Abandoned => Fitness::Abandoned,
        PartitionState::Ready if s.invalidated => Fitness::Invalidated,
        PartitionState::Ready if s.stale_upstream => Fitness::StaleUpstream,
        PartitionState::Ready => Fitness::Ready,
    }
}

impl Fitness {
    pub fn is_ready(self) -> bool {
        self == Fitness::Ready
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

    fn at(state: PartitionState, invalidated: bool, stale_upstream: bool) -> Fitness {
        fitness(Some(Standing { state, invalidated, stale_upstream }))
    }

    #[test]
    fn a_ready_partition_is_unfit_when_invalidated_or_stale() {
        assert_eq!(at(PartitionState::Running, true, true), Fitness::Running);
        assert_eq!(at(PartitionState::Ready, true, true), Fitness::Invalidated);
        assert_eq!(at(PartitionState::Ready, false, true), Fitness::StaleUpstream);
        assert_eq!(at(PartitionState::Ready, false, false), Fitness::Ready);
        assert!(at(PartitionState::Ready, false, false).is_ready());
    }

    #[test]
    fn a_partition_without_a_row_has_no_batch() {
        assert_eq!(fitness(None), Fitness::NoBatch);
        assert_eq!(Fitness::NoBatch.as_str(), "no_batch");
        // Every partition state is a fitness of the same name.
        for s in PartitionState::ALL {
            let state: PartitionState = s.parse().unwrap();
            assert_eq!(at(state, false, false).as_str(), *s);
        }
    }

    #[test]
    fn with_only_early_failures_the_last_publish_stands() {
        assert_eq!(partition_state(None, true), PartitionState::Ready);
        assert_eq!(partition_state(None, false), PartitionState::Failed);
    }
}
