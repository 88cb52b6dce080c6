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
use crate::domain::retry::{self, RetryAdvice};
use crate::domain::staleness::Staleness;

/// `started`: how the batch was started, and what it must clean first.
// Stored as `Started::stored` writes it; reads both that and the form the
// API shows (stored until issue 14). Not in the doc comment: that is the spec's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = StartedDetail)]
#[serde(try_from = "StoredStarted")]
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

/// A `started` detail as stored. Usually [`ShortStarted`]; else, and in
/// rows stored before it, [`LongStarted`].
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum StoredStarted {
    Short(ShortStarted),
    Long(LongStarted),
}

/// A `started` detail whose retry advice [`retry::compact`] rebuilds
/// exactly (every start since issue 14 but one whose advice names its
/// dataset), in a third of the text: one-letter keys, and what every
/// ordinary start has left out — the `scheduled` trigger, no run, no
/// residue, nothing cleaned.
#[derive(Serialize, Deserialize)]
pub(super) struct ShortStarted {
    /// `lease_expires_at`.
    l: DateTime<Utc>,
    /// `retry`, as the number `retry::compact` gives it.
    r: u8,
    /// `trigger`, unless `scheduled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<Trigger>,
    /// `run_ref`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    u: Option<String>,
    /// `residue`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    s: Vec<Residue>,
    /// `cleaned_batch_ids`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    c: Vec<String>,
}

/// A `started` detail with the API's keys: the retry advice as the number
/// `retry::compact` gives it when it rebuilds it exactly, which is a
/// tenth of its text (the residue and cleaned ids it is rebuilt from are
/// stored anyway); else, and in rows stored before issue 14, the advice itself.
#[derive(Serialize, Deserialize)]
pub(super) struct LongStarted {
    trigger: Trigger,
    run_ref: Option<String>,
    lease_expires_at: DateTime<Utc>,
    #[serde(default)]
    residue: Vec<Residue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry: Option<StoredRetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cleaned_batch_ids: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum StoredRetry {
    Rebuilt(u8),
    Kept(RetryAdvice),
}

impl Started {
    /// The number a batch's row keeps instead of this detail (migration
    /// 0013, `batches.start_retry`), when [`Started::in_row`] gives it back
    /// whole from that number and the row: a start at `at` with a lease of
    /// `lease_seconds` that found no residue and cleaned nothing, whose
    /// retry advice [`retry::compact`] rebuilds. `None`: it is stored.
    pub(super) fn row_number(&self, at: DateTime<Utc>, lease_seconds: i64) -> Option<i16> {
        let cleaned = self.cleaned_batch_ids.as_ref()?;
        if !self.residue.is_empty() || !cleaned.is_empty() {
            return None;
        }
        let code = retry::compact(self.retry.as_ref()?, &[], &[])?;
        let row = Self::in_row(code.into(), self.trigger, self.run_ref.clone(), at, lease_seconds)?;
        (row == *self).then_some(code.into())
    }

    /// The detail a batch's row gives back from its [`Started::row_number`],
    /// its trigger and run, the time it started and its lease's length.
    pub(super) fn in_row(
        number: i16,
        trigger: Trigger,
        run_ref: Option<String>,
        at: DateTime<Utc>,
        lease_seconds: i64,
    ) -> Option<Self> {
        Some(Self {
            trigger,
            run_ref,
            lease_expires_at: at + chrono::Duration::try_seconds(lease_seconds)?,
            residue: Vec::new(),
            retry: Some(retry::rebuild(u8::try_from(number).ok()?, &[], &[])?),
            cleaned_batch_ids: Some(Vec::new()),
        })
    }

    /// The detail in the form the registry stores.
    pub(super) fn stored(&self) -> StoredStarted {
        let residue: Vec<String> = self.residue.iter().map(|r| r.batch_id.clone()).collect();
        let cleaned = self.cleaned_batch_ids.as_deref().unwrap_or_default();
        let code = self.retry.as_ref().and_then(|advice| retry::compact(advice, &residue, cleaned));
        if let (Some(code), Some(cleaned)) = (code, &self.cleaned_batch_ids) {
            return StoredStarted::Short(ShortStarted {
                l: self.lease_expires_at,
                r: code,
                t: Some(self.trigger).filter(|t| *t != Trigger::Scheduled),
                u: self.run_ref.clone(),
                s: self.residue.clone(),
                c: cleaned.clone(),
            });
        }
        let retry = self.retry.as_ref().map(|advice| match code {
            Some(code) => StoredRetry::Rebuilt(code),
            None => StoredRetry::Kept(advice.clone()),
        });
        StoredStarted::Long(LongStarted {
            trigger: self.trigger,
            run_ref: self.run_ref.clone(),
            lease_expires_at: self.lease_expires_at,
            residue: self.residue.clone(),
            retry,
            cleaned_batch_ids: self.cleaned_batch_ids.clone(),
        })
    }
}

impl TryFrom<StoredStarted> for Started {
    type Error = String;

    fn try_from(s: StoredStarted) -> Result<Self, String> {
        let s = match s {
            StoredStarted::Long(long) => long,
            StoredStarted::Short(short) => LongStarted {
                trigger: short.t.unwrap_or(Trigger::Scheduled),
                run_ref: short.u,
                lease_expires_at: short.l,
                residue: short.s,
                retry: Some(StoredRetry::Rebuilt(short.r)),
                cleaned_batch_ids: Some(short.c),
            },
        };
        let retry = match s.retry {
            None => None,
            Some(StoredRetry::Kept(advice)) => Some(advice),
            Some(StoredRetry::Rebuilt(code)) => {
                let residue: Vec<String> = s.residue.iter().map(|r| r.batch_id.clone()).collect();
                let cleaned = s.cleaned_batch_ids.as_deref().unwrap_or_default();
                let advice = retry::rebuild(code, &residue, cleaned)
                    .ok_or_else(|| format!("retry {code} stands for no advice over this residue"))?;
                Some(advice)
            }
        };
        Ok(Self {
            trigger: s.trigger,
            run_ref: s.run_ref,
            lease_expires_at: s.lease_expires_at,
            residue: s.residue,
            retry,
            cleaned_batch_ids: s.cleaned_batch_ids,
        })
    }
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

/// A `committed` detail as stored: a rejection; or a publish, as rows
/// written before migration 0013 hold it (a publish since is its batch's
/// row's, [`super::records::row_events`]). From issue 14 a publish's detail
/// left its marker out: the commit writes it to the batch's row
/// (`batches.marker`) in the same transaction, and a decided batch's marker
/// never changes, so the row's is the event's. Rows stored before issue 14
/// keep it (`null` included), and it is read as stored.
#[derive(Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(super) enum StoredCommitted {
    Published {
        #[serde(default, deserialize_with = "present")]
        marker: Option<Option<String>>,
    },
    Rejected {
        failed_checks: Vec<CheckName>,
    },
}

/// A field that is there, `null` or not: `Some` (an absent one is `None`, by `default`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl StoredCommitted {
    /// The detail, with the batch's `marker` for a publish stored without one.
    pub(super) fn read(self, marker: Option<&str>) -> Committed {
        match self {
            Self::Published { marker: Some(kept) } => Committed::Published { marker: kept },
            Self::Published { marker: None } => Committed::Published { marker: marker.map(str::to_owned) },
            Self::Rejected { failed_checks } => Committed::Rejected { failed_checks },
        }
    }
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
    use crate::domain::batch::BatchState;
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
    fn started(residue: &[&str], cleaned: &[&str], advice: RetryAdvice) -> Started {
        let residue = residue
            .iter()
            .map(|b| Residue {
                batch_id: (*b).to_owned(),
                state: BatchState::Failed,
                partitions: vec!["dt=2026-01-01".into()],
            })
            .collect();
        Started {
            trigger: Trigger::Scheduled,
            run_ref: None,
            lease_expires_at: "2026-01-01T01:00:00.123456789Z".parse().unwrap(),
            residue,
            retry: Some(advice),
            cleaned_batch_ids: Some(cleaned.iter().map(|c| (*c).to_owned()).collect()),
        }
    }

    #[test]
    fn a_started_detail_is_stored_short_with_its_advice_as_a_number_and_reads_back_exactly() {
        use crate::domain::policy::WriteMode;
        let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let overwrite = retry::advise(WriteMode::OverwritePartition, "ds", false, &[], &[]).unwrap();
        let append = retry::advise(WriteMode::Append, "ds", false, &ids(&["t-1"]), &ids(&["t-1"])).unwrap();
        let retried =
            Started { trigger: Trigger::Retry, run_ref: Some("run-7".into()), ..started(&[], &[], overwrite.clone()) };
        for detail in [started(&[], &[], overwrite.clone()), started(&["t-1"], &["t-1"], append), retried] {
            let stored = serde_json::to_value(detail.stored()).unwrap();
            assert!(stored["r"].is_u64(), "{stored}");
            let shown = serde_json::to_value(&detail).unwrap();
            let (stored_len, shown_len) = (stored.to_string().len(), shown.to_string().len());
            assert!(stored_len + 60 < shown_len, "{stored} is not much smaller than {shown}");
            assert_eq!(serde_json::from_value::<Started>(stored).unwrap(), detail);
        }
        // An ordinary start: its lease and advice, nothing else.
        let ordinary = serde_json::to_value(started(&[], &[], overwrite.clone()).stored()).unwrap();
        assert_eq!(ordinary, json!({"l": "2026-01-01T01:00:00.123456789Z", "r": 0}));
        // The form stored from issue 14 until the short one reads the same.
        let keyed = json!({"trigger": "scheduled", "run_ref": null, "lease_expires_at": "2026-01-01T01:00:00.123456789Z",
            "residue": [], "cleaned_batch_ids": [], "retry": 0});
        assert_eq!(serde_json::from_value::<Started>(keyed).unwrap(), started(&[], &[], overwrite.clone()));
        let shown = json!({"trigger": "scheduled", "run_ref": null, "lease_expires_at": "2026-01-01T01:00:00.123456789Z",
            "residue": [], "cleaned_batch_ids": [], "retry": {"safe": true, "cleanup": {},
            "reason": "overwrite_partition: the rewrite replaces every earlier row of the partitions"}});
        let read: Started = serde_json::from_value(shown.clone()).unwrap();
        assert_eq!(read, started(&[], &[], overwrite), "the form stored before issue 14 reads");
        assert_eq!(serde_json::to_value(&read).unwrap(), shown, "and is shown as it was");
    }

    #[test]
    fn only_an_ordinary_start_is_kept_by_its_row_which_gives_it_back_exactly() {
        use crate::domain::policy::WriteMode;
        let at: DateTime<Utc> = "2026-01-01T00:00:00.123456789Z".parse().unwrap();
        let overwrite = retry::advise(WriteMode::OverwritePartition, "ds", false, &[], &[]).unwrap();
        let keyed = retry::advise(WriteMode::Merge, "ds", true, &[], &[]).unwrap();
        let run = Started { trigger: Trigger::Backfill, run_ref: Some("run-7".into()), ..started(&[], &[], keyed) };
        for ordinary in [started(&[], &[], overwrite.clone()), run] {
            let number = ordinary.row_number(at, 3600).expect("an ordinary start");
            let back = Started::in_row(number, ordinary.trigger, ordinary.run_ref.clone(), at, 3600);
            assert_eq!(back.as_ref(), Some(&ordinary));
        }
        // What the row cannot give back is stored: residue, cleaned ids, a
        // lease that is not the start's plus its length, no advice, an
        // advice naming its dataset.
        let append = retry::advise(WriteMode::Append, "ds", false, &["t-1".into()], &["t-1".into()]).unwrap();
        assert_eq!(started(&["t-1"], &["t-1"], append).row_number(at, 3600), None);
        let cleaned = retry::advise(WriteMode::OverwritePartition, "ds", false, &[], &["t-1".into()]).unwrap();
        assert_eq!(started(&[], &["t-1"], cleaned).row_number(at, 3600), None);
        assert_eq!(started(&[], &[], overwrite.clone()).row_number(at, 60), None);
        assert_eq!(Started { retry: None, ..started(&[], &[], overwrite.clone()) }.row_number(at, 3600), None);
        assert_eq!(Started { cleaned_batch_ids: None, ..started(&[], &[], overwrite) }.row_number(at, 3600), None);
        let named = retry::advise(WriteMode::DeleteInsertByBatch, "ds", false, &["t-1".into()], &[]).unwrap();
        assert_eq!(started(&[], &[], named).row_number(at, 3600), None);
        // A number that stands for no advice gives nothing back.
        assert_eq!(Started::in_row(99, Trigger::Scheduled, None, at, 3600), None);
    }

    #[test]
    fn an_advice_with_a_statement_is_stored_whole_and_an_unknown_number_is_an_error() {
        use crate::domain::policy::WriteMode;
        let residue = vec!["t-1".to_owned()];
        let advice = retry::advise(WriteMode::DeleteInsertByBatch, "ds", false, &residue, &[]).unwrap();
        let detail = started(&["t-1"], &[], advice);
        let stored = serde_json::to_value(detail.stored()).unwrap();
        assert_eq!(stored["retry"], serde_json::to_value(&detail.retry).unwrap(), "{stored}");
        assert_eq!(serde_json::from_value::<Started>(stored.clone()).unwrap(), detail);
        let mut unknown = stored;
        unknown["retry"] = json!(99);
        assert!(serde_json::from_value::<Started>(unknown).is_err());
    }
    #[test]
    fn a_publish_is_stored_without_its_marker_and_reads_it_from_the_batch() {
        // As stored from issue 14 until migration 0013.
        let stored = json!({"state": "published"});
        let read = |v: serde_json::Value, marker| serde_json::from_value::<StoredCommitted>(v).unwrap().read(marker);
        let published = |m: Option<&str>| Committed::Published { marker: m.map(str::to_owned) };
        assert_eq!(read(stored, Some("s3://m")), published(Some("s3://m")));
        // Rows stored before issue 14 keep theirs, a null one included.
        assert_eq!(read(json!({"state": "published", "marker": "old"}), Some("s3://m")), published(Some("old")));
        assert_eq!(read(json!({"state": "published", "marker": null}), Some("s3://m")), published(None));
        let rejected = json!({"state": "rejected", "failed_checks": ["non_empty"]});
        assert_eq!(read(rejected, Some("s3://m")), Committed::Rejected { failed_checks: vec![CheckName::NonEmpty] });
    }
}
