//! A batch's lifecycle: its states, how it ends, and what an ending leaves in
//! the target table.

use super::policy::string_enum;

/// The lease of a batch whose start does not give one (OpenLineage runs too).
pub const DEFAULT_LEASE_SECONDS: i64 = 3600;
/// A week: longer than any batch should run without a heartbeat.
pub const MAX_LEASE_SECONDS: i64 = 7 * 24 * 3600;

string_enum! {
    /// Where a batch is in its life. `running` is the only state that moves
    /// forward on a request; `published` moves to `superseded` when a newer
    /// batch republishes all of its partitions.
    BatchState {
        Running = "running",
        Published = "published",
        Rejected = "rejected",
        Failed = "failed",
        Abandoned = "abandoned",
        Superseded = "superseded",
    }
}

string_enum! {
    /// Why the batch ran.
    Trigger { Scheduled = "scheduled", Retry = "retry", Backfill = "backfill", Repair = "repair", Manual = "manual" }
}

string_enum! {
    /// Where a failing task stopped.
    FailStage { Read = "read", Compute = "compute", Write = "write", Verify = "verify" }
}

string_enum! {
    /// What kind of failure the task reports.
    FailCategory { Resource = "resource", Data = "data", Logic = "logic", PartialWrite = "partial_write", Unknown = "unknown" }
}

string_enum! {
    /// What happened to a batch, as its event history lists it.
    EventKind {
        Started = "started",
        Heartbeat = "heartbeat",
        Written = "written",
        Committed = "committed",
        Failed = "failed",
        Abandoned = "abandoned",
        Superseded = "superseded",
        FailAfterPublish = "fail_after_publish",
    }
}

impl EventKind {
    /// Whether an event of this kind is of a batch's run, written while it
    /// is `running`: every such event of a batch comes before its decision
    /// (`committed`, `failed`, `abandoned`), and every other after it.
    pub fn of_the_run(self) -> bool {
        matches!(self, EventKind::Started | EventKind::Heartbeat | EventKind::Written)
    }
}

impl FailStage {
    /// A failure at `read` or `compute` happened before any write, so the
    /// table still holds exactly what the earlier version published.
    pub fn may_have_written(self) -> bool {
        matches!(self, FailStage::Write | FailStage::Verify)
    }
}

/// Whether a batch in this state may have left rows in the target table that
/// no published version accounts for. Such a batch is *residue*: the next
/// attempt should delete its rows before writing.
pub fn leaves_residue(state: BatchState, stage: Option<FailStage>) -> bool {
    match state {
        BatchState::Rejected | BatchState::Abandoned => true,
        BatchState::Failed => stage.is_none_or(FailStage::may_have_written),
        BatchState::Running | BatchState::Published | BatchState::Superseded => false,
    }
}

/// Whether a batch in this state decides what the table holds now. Every
/// batch does except one that failed before it wrote anything: that one
/// leaves the partition as the batch before it left it.
pub fn touches_table(state: BatchState, stage: Option<FailStage>) -> bool {
    !(state == BatchState::Failed && stage.is_some_and(|s| !s.may_have_written()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_events_are_those_before_its_decision() {
        let run: Vec<EventKind> =
            EventKind::ALL.iter().map(|k| k.parse::<EventKind>().unwrap()).filter(|k| k.of_the_run()).collect();
        assert_eq!(run, [EventKind::Started, EventKind::Heartbeat, EventKind::Written]);
    }

    #[test]
    fn only_early_failures_leave_the_table_untouched() {
        assert!(!touches_table(BatchState::Failed, Some(FailStage::Read)));
        assert!(!touches_table(BatchState::Failed, Some(FailStage::Compute)));
        assert!(touches_table(BatchState::Failed, Some(FailStage::Write)));
        assert!(touches_table(BatchState::Failed, Some(FailStage::Verify)));
        assert!(touches_table(BatchState::Running, None));
        assert!(touches_table(BatchState::Rejected, None));
    }

    #[test]
    fn residue_is_what_did_not_publish_and_may_have_written() {
        assert!(leaves_residue(BatchState::Rejected, None));
        assert!(leaves_residue(BatchState::Abandoned, None));
        assert!(leaves_residue(BatchState::Failed, Some(FailStage::Write)));
        assert!(!leaves_residue(BatchState::Failed, Some(FailStage::Read)));
        assert!(!leaves_residue(BatchState::Published, None));
        assert!(!leaves_residue(BatchState::Running, None));
    }
}
