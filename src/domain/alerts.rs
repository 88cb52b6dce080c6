//! What an alert tells the person on call: how bad, who owns it, what to do.

use super::batch::{FailCategory, FailStage};
use super::checks::{CheckName, CheckStatus};
use super::policy::{string_enum, Tier};
use super::readiness::Fitness;

string_enum! {
    AlertKind { Rejected = "rejected", Failed = "failed", Abandoned = "abandoned", DeadlineMissed = "deadline_missed", StaleDownstream = "stale_downstream",
        AirflowAssetUnknown = "airflow_asset_unknown" }
}

string_enum! {
    /// An alert is open until every partition it names is fit to read again.
    AlertState { Open = "open", Resolved = "resolved" }
}

string_enum! {
    Severity { Critical = "critical", Warning = "warning", Info = "info" }
}

string_enum! {
    /// What the owner should do.
    Action {
        WaitForRetry = "wait_for_retry",
        CleanResidueThenRerun = "clean_residue_then_rerun",
        FixSourceData = "fix_source_data",
        FixCodeThenRerun = "fix_code_then_rerun",
        RecomputeDownstream = "recompute_downstream",
        FixAirflowAsset = "fix_airflow_asset",
    }
}

/// A core dataset pages; scratch data only informs.
pub fn severity(tier: Tier) -> Severity {
    match tier {
        Tier::Core => Severity::Critical,
        Tier::Standard => Severity::Warning,
        Tier::Scratch => Severity::Info,
    }
}

/// Who should act on a failure, relative to the failing dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerOf {
    /// The owners of the datasets the batch read (bad source data).
    Upstream,
    /// The owner of the dataset itself.
    Dataset,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advice {
    pub action: Action,
    pub owner: OwnerOf,
    pub retryable: bool,
}

/// A task's reported failure.
pub fn for_failure(category: FailCategory, stage: FailStage) -> Advice {
    let (action, owner, retryable) = match category {
        FailCategory::Data => (Action::FixSourceData, OwnerOf::Upstream, false),
        FailCategory::Resource => (Action::WaitForRetry, OwnerOf::Dataset, true),
        FailCategory::Logic => (Action::FixCodeThenRerun, OwnerOf::Dataset, false),
        FailCategory::PartialWrite => (Action::CleanResidueThenRerun, OwnerOf::Dataset, true),
        // Nothing known: if it may have written, clean first; else a retry is cheap.
        FailCategory::Unknown if stage.may_have_written() => (Action::CleanResidueThenRerun, OwnerOf::Dataset, true),
        FailCategory::Unknown => (Action::WaitForRetry, OwnerOf::Dataset, true),
    };
    Advice { action, owner, retryable }
}

/// A rejected commit, from the checks that failed: extra rows mean a dirty
/// rerun (clean and rerun); wrong numbers mean the source is off.
pub fn for_rejection(failed: impl IntoIterator<Item = (CheckName, CheckStatus)>) -> Advice {
    use CheckName::*;
    let failed: Vec<CheckName> = failed.into_iter().filter(|(_, s)| *s == CheckStatus::Fail).map(|(n, _)| n).collect();
    let source_problem =
        failed.iter().any(|n| matches!(n, VolumeVsBaseline | SourceReconciliation | NullKeys | NonEmpty));
    let duplicate_problem =
        failed.iter().any(|n| matches!(n, RowsMatchWritten | UniqueKeys | PartitionsComplete | MarkerPresent));
    if source_problem && !duplicate_problem {
        Advice { action: Action::FixSourceData, owner: OwnerOf::Upstream, retryable: false }
    } else {
        Advice { action: Action::CleanResidueThenRerun, owner: OwnerOf::Dataset, retryable: true }
    }
}

/// A batch whose lease ran out: it may have written part of its rows.
pub fn for_abandoned() -> Advice {
    Advice { action: Action::CleanResidueThenRerun, owner: OwnerOf::Dataset, retryable: true }
}

/// A missed deadline, from the fitness of the partition that holds it up.
pub fn for_deadline(blocking: Fitness) -> Advice {
    let action = match blocking {
        Fitness::Running => Action::WaitForRetry,
        // The data is in and checked; what it was built from has moved on.
        Fitness::StaleUpstream => Action::RecomputeDownstream,
        Fitness::NoBatch
        | Fitness::Rejected
        | Fitness::Failed
        | Fitness::Abandoned
        | Fitness::Invalidated
        | Fitness::Ready => Action::CleanResidueThenRerun,
    };
    Advice { action, owner: OwnerOf::Dataset, retryable: true }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_set_action_and_owner() {
        assert_eq!(
            for_failure(FailCategory::Data, FailStage::Read),
            Advice { action: Action::FixSourceData, owner: OwnerOf::Upstream, retryable: false }
        );
        assert!(for_failure(FailCategory::Resource, FailStage::Compute).retryable);
        assert_eq!(for_failure(FailCategory::Resource, FailStage::Compute).action, Action::WaitForRetry);
        assert_eq!(for_failure(FailCategory::Logic, FailStage::Compute).action, Action::FixCodeThenRerun);
        assert_eq!(for_failure(FailCategory::PartialWrite, FailStage::Write).action, Action::CleanResidueThenRerun);
        assert_eq!(for_failure(FailCategory::Unknown, FailStage::Write).action, Action::CleanResidueThenRerun);
        assert_eq!(for_failure(FailCategory::Unknown, FailStage::Read).action, Action::WaitForRetry);
    }

    #[test]
    fn rejections_split_into_duplicates_and_bad_sources() {
        assert_eq!(for_rejection([(CheckName::UniqueKeys, CheckStatus::Fail)]).action, Action::CleanResidueThenRerun);
        assert_eq!(
            for_rejection([(CheckName::RowsMatchWritten, CheckStatus::Fail)]).action,
            Action::CleanResidueThenRerun
        );
        assert_eq!(for_rejection([(CheckName::VolumeVsBaseline, CheckStatus::Fail)]).action, Action::FixSourceData);
        assert_eq!(
            for_rejection([
                (CheckName::SourceReconciliation, CheckStatus::Fail),
                (CheckName::UniqueKeys, CheckStatus::Pass)
            ])
            .action,
            Action::FixSourceData
        );
        assert_eq!(for_rejection([(CheckName::NullKeys, CheckStatus::Fail)]).owner, OwnerOf::Upstream);
    }

    #[test]
    fn a_deadline_advice_follows_what_holds_the_date_up() {
        assert_eq!(for_deadline(Fitness::Running).action, Action::WaitForRetry);
        assert_eq!(for_deadline(Fitness::StaleUpstream).action, Action::RecomputeDownstream);
        assert_eq!(for_deadline(Fitness::Rejected).action, Action::CleanResidueThenRerun);
        assert_eq!(for_deadline(Fitness::Invalidated).action, Action::CleanResidueThenRerun);
    }

    #[test]
    fn tiers_set_severity() {
        assert_eq!(severity(Tier::Core), Severity::Critical);
        assert_eq!(severity(Tier::Scratch), Severity::Info);
    }
}
