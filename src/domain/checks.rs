//! The commit checks. Evidence and history in, a verdict out: the same
//! function decides on every backend.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::names::PartitionSpec;
use super::policy::{string_enum, DatasetPolicy, WriteMode};

/// Counts a task reports for one partition after writing it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionEvidence {
    pub partition: PartitionSpec,
    pub rows_written: i64,
    pub row_count: i64,
    pub distinct_keys: Option<i64>,
    pub null_keys: Option<i64>,
    pub metrics: BTreeMap<String, f64>,
}

/// Counts taken from the source the batch read (stored as the batch's
/// `source`, and shown so: both fields always present).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SourceEvidence {
    /// Null when the commit's `source` gave no row count.
    #[schema(required = true)]
    pub row_count: Option<i64>,
    /// Named sums; empty when the commit's `source` gave none.
    pub metrics: BTreeMap<String, f64>,
}

/// Everything a commit claims.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitEvidence {
    pub marker: String,
    pub partitions: Vec<PartitionEvidence>,
    pub source: Option<SourceEvidence>,
}

/// What the registry already knows about one partition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionHistory {
    /// `row_count` of the currently published version, if any.
    pub published_row_count: Option<i64>,
    /// Published `row_count`s of the same partition (other keys equal) on the
    /// most recent earlier data dates, at most `baseline_periods` of them.
    pub baseline: Vec<i64>,
}

string_enum! {
    /// The commit checks, in the order they run.
    CheckName {
        MarkerPresent = "marker_present",
        PartitionsComplete = "partitions_complete",
        RowsMatchWritten = "rows_match_written",
        UniqueKeys = "unique_keys",
        NullKeys = "null_keys",
        NonEmpty = "non_empty",
        VolumeVsBaseline = "volume_vs_baseline",
        SourceReconciliation = "source_reconciliation",
    }
}

/// `fail` only when the check failed and blocks under the dataset's tier; a
/// failing non-blocking check is `warn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Pass,
    Warn,
    Fail,
    Skipped,
}

impl CheckStatus {
    /// The status as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skipped => "skipped",
        }
    }
}

/// One check's outcome, as the API reports it.
// It reads from the form the API shows (and the registry stored until issue
// 14) and from its stored form, [`Compact`].
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CheckResult {
    pub name: CheckName,
    /// The partition checked; absent for batch-wide checks (`marker_present`,
    /// `partitions_complete`, `source_reconciliation`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    pub status: CheckStatus,
    /// What the evidence shows (any JSON).
    pub observed: Value,
    /// What the check wanted (any JSON; null where nothing is expected).
    pub expected: Value,
    pub message: String,
    /// Whether a failure of this check blocks publication under the dataset's tier.
    pub blocking: bool,
}

/// A [`CheckResult`] in the form the API shows it.
#[derive(Deserialize)]
struct Shown {
    name: CheckName,
    partition: Option<String>,
    status: CheckStatus,
    observed: Value,
    expected: Value,
    message: String,
    blocking: bool,
}

impl<'de> Deserialize<'de> for CheckResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::Array(stored) => from_compact(stored).map_err(D::Error::custom),
            shown => {
                let Shown { name, partition, status, observed, expected, message, blocking } =
                    serde_json::from_value(shown).map_err(D::Error::custom)?;
                Ok(Self { name, partition, status, observed, expected, message, blocking })
            }
        }
    }
}

/// The checks as the registry stores them (`batches.checks`, since issue
/// 14): each one an array `[code, observed, expected, message, partition]`,
/// where `code` is the name's place in [`CheckName`] × 8 + the status's in
/// [`CheckStatus`] × 2 + 1 if it blocks, `message` is 0 when it is the one
/// [`usual_message`] writes for that outcome, and `partition` is left out
/// for a batch-wide check. About a quarter of the form the API shows, which
/// [`CheckResult`] reads back exactly.
pub struct Compact<'a>(pub &'a [CheckResult]);

const NAMES: [CheckName; 8] = [
    CheckName::MarkerPresent,
    CheckName::PartitionsComplete,
    CheckName::RowsMatchWritten,
    CheckName::UniqueKeys,
    CheckName::NullKeys,
    CheckName::NonEmpty,
    CheckName::VolumeVsBaseline,
    CheckName::SourceReconciliation,
];
const STATUSES: [CheckStatus; 4] = [CheckStatus::Pass, CheckStatus::Warn, CheckStatus::Fail, CheckStatus::Skipped];

impl Serialize for Compact<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for c in self.0 {
            let name = NAMES.iter().position(|n| *n == c.name).unwrap_or_default();
            let status = STATUSES.iter().position(|n| *n == c.status).unwrap_or_default();
            let code = name * 8 + status * 2 + usize::from(c.blocking);
            let message =
                if usual_message(c).as_deref() == Some(c.message.as_str()) { json!(0) } else { json!(c.message) };
            match &c.partition {
                Some(p) => seq.serialize_element(&(code, &c.observed, &c.expected, message, p))?,
                None => seq.serialize_element(&(code, &c.observed, &c.expected, message))?,
            }
        }
        seq.end()
    }
}

fn from_compact(stored: Vec<Value>) -> Result<CheckResult, String> {
    let bad = || format!("{} is not a stored check", Value::Array(stored.clone()));
    let code = stored.first().and_then(Value::as_u64).ok_or_else(bad)? as usize;
    let (Some(&name), Some(&status)) = (NAMES.get(code / 8), STATUSES.get(code / 2 % 4)) else {
        return Err(bad());
    };
    let partition = match stored.get(4) {
        None => None,
        Some(Value::String(p)) => Some(p.clone()),
        Some(_) => return Err(bad()),
    };
    let (Some(observed), Some(expected)) = (stored.get(1), stored.get(2)) else {
        return Err(bad());
    };
    let mut check = CheckResult {
        name,
        partition,
        status,
        observed: observed.clone(),
        expected: expected.clone(),
        message: String::new(),
        blocking: code % 2 == 1,
    };
    check.message = match stored.get(3) {
        Some(Value::String(m)) => m.clone(),
        Some(v) if v.as_u64() == Some(0) => usual_message(&check).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if stored.len() > 5 {
        return Err(bad());
    }
    Ok(check)
}

/// The message [`evaluate`] writes for a check's outcome, where it follows
/// from the rest of the check (every pass and skip, and the plainest
/// failures). Stored checks leave such a message out. What this writes for a
/// given check must never change: stored checks are read back with it.
fn usual_message(c: &CheckResult) -> Option<String> {
    use CheckName as N;
    use CheckStatus::{Fail, Pass, Skipped, Warn};
    let failed = matches!(c.status, Fail | Warn);
    Some(match (c.name, c.status) {
        (N::MarkerPresent, Pass) => "completion marker present".into(),
        (N::MarkerPresent, _) if failed => "no completion marker was given".into(),
        (N::PartitionsComplete, Pass) => format!("all {} declared partitions reported", c.expected.get("declared")?),
        (N::RowsMatchWritten, Pass) => {
            format!("partition holds the {} rows the batch accounts for", c.expected.as_i64()?)
        }
        (N::RowsMatchWritten, Skipped) => {
            "merge writes update rows in place; row_count is not derived from rows_written".into()
        }
        (N::UniqueKeys, Pass) => "every row has its own key".into(),
        (N::UniqueKeys, Skipped) => "distinct_keys not reported".into(),
        (N::NullKeys, Pass) => "no null keys".into(),
        (N::NullKeys, Skipped) => "null_keys not reported".into(),
        (N::NonEmpty, Pass) => "partition has rows".into(),
        (N::NonEmpty, Skipped) => "the dataset allows empty partitions".into(),
        (N::NonEmpty, _) if failed => "partition is empty".into(),
        (N::VolumeVsBaseline, Skipped) => "no published history on earlier dates".into(),
        (N::VolumeVsBaseline, Pass) if c.expected.get("baseline")?.as_f64()? == 0.0 => "empty, as the baseline".into(),
        (N::VolumeVsBaseline, Pass) => format!(
            "{:+.1}% against the median of {} earlier dates",
            c.observed.get("change")?.as_f64()? * 100.0,
            c.expected.get("periods")?.as_u64()?
        ),
        (N::SourceReconciliation, Pass) => "target reconciles with the source".into(),
        (N::SourceReconciliation, Skipped) => "no source counts given".into(),
        _ => return None,
    })
}

/// A check as a batch record shows it: the keys in sorted order, as they
/// were while records were served through a JSON value (the bytes of every
/// answer, replays included, stay the same). `observed` and `expected` are
/// JSON values, whose keys are sorted already.
pub struct Sorted<'a>(pub &'a CheckResult);

impl Serialize for Sorted<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let c = self.0;
        let mut m = s.serialize_map(Some(6 + usize::from(c.partition.is_some())))?;
        m.serialize_entry("blocking", &c.blocking)?;
        m.serialize_entry("expected", &c.expected)?;
        m.serialize_entry("message", &c.message)?;
        m.serialize_entry("name", &c.name)?;
        m.serialize_entry("observed", &c.observed)?;
        if let Some(p) = &c.partition {
            m.serialize_entry("partition", p)?;
        }
        m.serialize_entry("status", &c.status)?;
        m.end()
    }
}

/// The decision on a commit: publish when no blocking check failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub passed: bool,
    pub checks: Vec<CheckResult>,
}

impl Verdict {
    pub fn failed_checks(&self) -> impl Iterator<Item = &CheckResult> {
        failed(&self.checks)
    }
}

/// The checks that failed and block (a failing check that only warns is not
/// among them): why a commit was rejected.
pub fn failed(checks: &[CheckResult]) -> impl Iterator<Item = &CheckResult> {
    checks.iter().filter(|c| c.status == CheckStatus::Fail)
}

/// A check's raw outcome before the tier decides whether it blocks.
enum Outcome {
    Pass(String),
    Fail(String),
    Skipped(String),
}

struct Builder<'a> {
    policy: &'a DatasetPolicy,
    checks: Vec<CheckResult>,
}

impl Builder<'_> {
    fn push(
        &mut self,
        name: CheckName,
        partition: Option<&PartitionSpec>,
        observed: Value,
        expected: Value,
        outcome: Outcome,
    ) {
        let blocking = self.policy.tier.blocks(name);
        let (status, message) = match outcome {
            Outcome::Pass(m) => (CheckStatus::Pass, m),
            Outcome::Skipped(m) => (CheckStatus::Skipped, m),
            Outcome::Fail(m) if blocking => (CheckStatus::Fail, m),
            Outcome::Fail(m) => (CheckStatus::Warn, m),
        };
        self.checks.push(CheckResult {
            name,
            partition: partition.map(|p| p.to_string()),
            status,
            observed,
            expected,
            message,
            blocking,
        });
    }
}

/// Relative tolerance for metric sums: floating-point sums taken in a
/// different order by the source and the target differ in the last bits.
const METRIC_TOLERANCE: f64 = 1e-9;

fn metrics_agree(a: f64, b: f64) -> bool {
    (a - b).abs() <= METRIC_TOLERANCE * a.abs().max(b.abs())
}

/// The middle of the baseline; the mean of the two middle values for an even count.
pub fn median(values: &[i64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] as f64 } else { (v[mid - 1] as f64 + v[mid] as f64) / 2.0 })
}

/// Runs every check over a commit's evidence.
///
/// `declared` are the partitions named at start; `history` holds what the
/// registry knew of each declared partition before this commit.
pub fn evaluate(
    policy: &DatasetPolicy,
    declared: &[PartitionSpec],
    history: &BTreeMap<PartitionSpec, PartitionHistory>,
    evidence: &CommitEvidence,
) -> Verdict {
    let mut b = Builder { policy, checks: Vec::new() };

    // 1. marker_present
    let marker = evidence.marker.trim();
    b.push(
        CheckName::MarkerPresent,
        None,
        json!(evidence.marker),
        json!("a non-empty completion marker"),
        if marker.is_empty() {
            Outcome::Fail("no completion marker was given".into())
        } else {
            Outcome::Pass("completion marker present".into())
        },
    );

    // 2. partitions_complete
    let declared_set: BTreeSet<&PartitionSpec> = declared.iter().collect();
    let mut seen = BTreeSet::new();
    let duplicated: Vec<String> =
        evidence.partitions.iter().filter(|p| !seen.insert(&p.partition)).map(|p| p.partition.to_string()).collect();
    let missing: Vec<String> = declared_set.difference(&seen).map(|p| p.to_string()).collect();
    let unexpected: Vec<String> = seen.difference(&declared_set).map(|p| p.to_string()).collect();
    let complete = missing.is_empty() && unexpected.is_empty() && duplicated.is_empty();
    b.push(
        CheckName::PartitionsComplete,
        None,
        json!({"reported": evidence.partitions.len(), "missing": missing, "unexpected": unexpected, "duplicated": duplicated}),
        json!({"declared": declared.len()}),
        if complete {
            Outcome::Pass(format!("all {} declared partitions reported", declared.len()))
        } else {
            Outcome::Fail(format!(
                "{} of {} declared partitions reported; missing {:?}, unexpected {:?}, duplicated {:?}",
                declared_set.intersection(&seen).count(),
                declared.len(),
                missing,
                unexpected,
                duplicated
            ))
        },
    );

    for p in &evidence.partitions {
        let spec = Some(&p.partition);
        let hist = history.get(&p.partition).cloned().unwrap_or_default();

        // 3. rows_match_written
        // `Some(None)`: the rows the batch accounts for exceed i64.
        let expected_rows = match policy.write_mode {
            WriteMode::OverwritePartition | WriteMode::DeleteInsertByBatch => Some(Some(p.rows_written)),
            WriteMode::Append => Some(hist.published_row_count.unwrap_or(0).checked_add(p.rows_written)),
            WriteMode::Merge => None,
        };
        match expected_rows {
            Some(None) => b.push(
                CheckName::RowsMatchWritten,
                spec,
                json!(p.row_count),
                Value::Null,
                Outcome::Fail(format!(
                    "the published {} rows plus the {} rows written exceed {} and cannot be represented",
                    hist.published_row_count.unwrap_or(0),
                    p.rows_written,
                    i64::MAX
                )),
            ),
            None => b.push(
                CheckName::RowsMatchWritten,
                spec,
                json!(p.row_count),
                Value::Null,
                Outcome::Skipped(
                    "merge writes update rows in place; row_count is not derived from rows_written".into(),
                ),
            ),
            Some(Some(exp)) => b.push(
                CheckName::RowsMatchWritten,
                spec,
                json!(p.row_count),
                json!(exp),
                if p.row_count == exp {
                    Outcome::Pass(format!("partition holds the {exp} rows the batch accounts for"))
                } else {
                    Outcome::Fail(format!(
                        "partition holds {} rows but the batch accounts for {exp} ({}): {} rows are {}",
                        p.row_count,
                        policy.write_mode,
                        (p.row_count - exp).abs(),
                        if p.row_count > exp { "extra (leftovers of an earlier attempt?)" } else { "missing" }
                    ))
                },
            ),
        }

        // 4. unique_keys
        match p.distinct_keys {
            None => b.push(
                CheckName::UniqueKeys,
                spec,
                Value::Null,
                json!(p.row_count),
                Outcome::Skipped("distinct_keys not reported".into()),
            ),
            Some(d) => b.push(
                CheckName::UniqueKeys,
                spec,
                json!(d),
                json!(p.row_count),
                if d == p.row_count {
                    Outcome::Pass("every row has its own key".into())
                } else {
                    Outcome::Fail(format!(
                        "{d} distinct keys over {} rows: {} duplicate rows",
                        p.row_count,
                        p.row_count - d
                    ))
                },
            ),
        }

        // 5. null_keys
        match p.null_keys {
            None => b.push(
                CheckName::NullKeys,
                spec,
                Value::Null,
                json!(0),
                Outcome::Skipped("null_keys not reported".into()),
            ),
            Some(n) => b.push(
                CheckName::NullKeys,
                spec,
                json!(n),
                json!(0),
                if n == 0 {
                    Outcome::Pass("no null keys".into())
                } else {
                    Outcome::Fail(format!("{n} rows have a null key"))
                },
            ),
        }

        // 6. non_empty
        if policy.allow_empty {
            b.push(
                CheckName::NonEmpty,
                spec,
                json!(p.row_count),
                Value::Null,
                Outcome::Skipped("the dataset allows empty partitions".into()),
            );
        } else {
            b.push(
                CheckName::NonEmpty,
                spec,
                json!(p.row_count),
                json!("> 0"),
                if p.row_count > 0 {
                    Outcome::Pass("partition has rows".into())
                } else {
                    Outcome::Fail("partition is empty".into())
                },
            );
        }

        // 7. volume_vs_baseline
        match median(&hist.baseline) {
            None => b.push(
                CheckName::VolumeVsBaseline,
                spec,
                json!(p.row_count),
                Value::Null,
                Outcome::Skipped("no published history on earlier dates".into()),
            ),
            Some(0.0) => b.push(
                CheckName::VolumeVsBaseline,
                spec,
                json!(p.row_count),
                json!({"baseline": 0, "periods": hist.baseline.len()}),
                if p.row_count == 0 {
                    Outcome::Pass("empty, as the baseline".into())
                } else {
                    Outcome::Fail(format!("{} rows against an empty baseline", p.row_count))
                },
            ),
            Some(base) => {
                let change = (p.row_count as f64 - base) / base;
                b.push(
                    CheckName::VolumeVsBaseline,
                    spec,
                    json!({"row_count": p.row_count, "change": change}),
                    json!({"baseline": base, "periods": hist.baseline.len(), "max_change": policy.max_volume_change}),
                    if change.abs() <= policy.max_volume_change {
                        Outcome::Pass(format!(
                            "{:+.1}% against the median of {} earlier dates",
                            change * 100.0,
                            hist.baseline.len()
                        ))
                    } else {
                        Outcome::Fail(format!(
                            "{:+.1}% against the median {base} of {} earlier dates; at most ±{:.1}% allowed",
                            change * 100.0,
                            hist.baseline.len(),
                            policy.max_volume_change * 100.0
                        ))
                    },
                );
            }
        }
    }

    // 8. source_reconciliation
    match &evidence.source {
        None => b.push(
            CheckName::SourceReconciliation,
            None,
            Value::Null,
            Value::Null,
            Outcome::Skipped("no source counts given".into()),
        ),
        Some(src) => {
            // Checked: four partitions of 2^62 rows must not wrap to 0 and
            // match an empty source.
            let written = evidence.partitions.iter().try_fold(0i64, |sum, p| sum.checked_add(p.rows_written));
            let mut problems = Vec::new();
            let mut observed = serde_json::Map::new();
            let mut expected = serde_json::Map::new();
            if let Some(rc) = src.row_count {
                observed.insert("rows_written".into(), json!(written));
                expected.insert("row_count".into(), json!(rc));
                match written {
                    None => problems.push(format!(
                        "the partitions' rows_written add up to more than {} and cannot be represented",
                        i64::MAX
                    )),
                    Some(w) if w != rc => problems.push(format!("source has {rc} rows, the batch wrote {w}")),
                    Some(_) => {}
                }
            }
            for (metric, want) in &src.metrics {
                let reported: Vec<f64> =
                    evidence.partitions.iter().filter_map(|p| p.metrics.get(metric).copied()).collect();
                expected.insert(metric.clone(), json!(want));
                if reported.len() != evidence.partitions.len() {
                    observed.insert(metric.clone(), Value::Null);
                    problems.push(format!("metric {metric:?} is not reported for every partition"));
                    continue;
                }
                let got: f64 = reported.iter().sum();
                observed.insert(metric.clone(), json!(got));
                if !got.is_finite() || !want.is_finite() {
                    problems.push(format!(
                        "{metric}: the sum is too large to be represented as a finite number (source says {want})"
                    ));
                } else if !metrics_agree(got, *want) {
                    problems.push(format!("{metric}: partitions sum to {got}, source says {want}"));
                }
            }
            b.push(
                CheckName::SourceReconciliation,
                None,
                Value::Object(observed),
                Value::Object(expected),
                if problems.is_empty() {
                    Outcome::Pass("target reconciles with the source".into())
                } else {
                    Outcome::Fail(problems.join("; "))
                },
            );
        }
    }

    let passed = !b.checks.iter().any(|c| c.status == CheckStatus::Fail);
    Verdict { passed, checks: b.checks }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::policy::Tier;

    fn spec(s: &str) -> PartitionSpec {
        PartitionSpec::parse(s).unwrap()
    }

    fn part(s: &str, written: i64, count: i64) -> PartitionEvidence {
        PartitionEvidence {
            partition: spec(s),
            rows_written: written,
            row_count: count,
            distinct_keys: Some(count),
            null_keys: Some(0),
            metrics: BTreeMap::new(),
        }
    }

    fn commit(parts: Vec<PartitionEvidence>) -> CommitEvidence {
        CommitEvidence { marker: "_SUCCESS".into(), partitions: parts, source: None }
    }

    fn status_of(v: &Verdict, name: CheckName) -> CheckStatus {
        v.checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no check {name}")).status
    }

    fn run(
        policy: &DatasetPolicy,
        declared: &[&str],
        history: &[(&str, PartitionHistory)],
        ev: &CommitEvidence,
    ) -> Verdict {
        let declared: Vec<_> = declared.iter().map(|s| spec(s)).collect();
        let history = history.iter().map(|(p, h)| (spec(p), h.clone())).collect();
        evaluate(policy, &declared, &history, ev)
    }

    #[test]
    fn a_clean_commit_passes_every_check() {
        let v = run(&DatasetPolicy::default(), &["dt=2026-08-24"], &[], &commit(vec![part("dt=2026-08-24", 10, 10)]));
        assert!(v.passed, "{v:?}");
        assert_eq!(status_of(&v, CheckName::VolumeVsBaseline), CheckStatus::Skipped);
        assert_eq!(status_of(&v, CheckName::SourceReconciliation), CheckStatus::Skipped);
    }

    #[test]
    fn an_appended_second_copy_fails_rows_match_written() {
        let v = run(
            &DatasetPolicy::default(),
            &["dt=2026-08-24"],
            &[],
            &commit(vec![part("dt=2026-08-24", 1_000_000, 1_920_000)]),
        );
        assert!(!v.passed);
        assert_eq!(status_of(&v, CheckName::RowsMatchWritten), CheckStatus::Fail);
    }

    #[test]
    fn append_mode_adds_to_the_published_count_and_merge_skips() {
        let mut policy = DatasetPolicy { write_mode: WriteMode::Append, ..Default::default() };
        let hist = PartitionHistory { published_row_count: Some(100), baseline: vec![] };
        let v = run(
            &policy,
            &["dt=2026-08-24"],
            &[("dt=2026-08-24", hist.clone())],
            &commit(vec![part("dt=2026-08-24", 10, 110)]),
        );
        assert_eq!(status_of(&v, CheckName::RowsMatchWritten), CheckStatus::Pass);
        let v = run(
            &policy,
            &["dt=2026-08-24"],
            &[("dt=2026-08-24", hist.clone())],
            &commit(vec![part("dt=2026-08-24", 10, 10)]),
        );
        assert_eq!(status_of(&v, CheckName::RowsMatchWritten), CheckStatus::Fail);
        policy.write_mode = WriteMode::Merge;
        let v =
            run(&policy, &["dt=2026-08-24"], &[("dt=2026-08-24", hist)], &commit(vec![part("dt=2026-08-24", 10, 999)]));
        assert_eq!(status_of(&v, CheckName::RowsMatchWritten), CheckStatus::Skipped);
    }

    #[test]
    fn missing_and_unexpected_partitions_fail_completeness_even_on_scratch() {
        let policy = DatasetPolicy { tier: Tier::Scratch, ..Default::default() };
        let v = run(&policy, &["h=1", "h=2"], &[], &commit(vec![part("h=1", 1, 1), part("h=3", 1, 1)]));
        assert!(!v.passed);
        let c = v.checks.iter().find(|c| c.name == CheckName::PartitionsComplete).unwrap();
        assert_eq!(c.observed["missing"], json!(["h=2"]));
        assert_eq!(c.observed["unexpected"], json!(["h=3"]));
        let dup = run(&policy, &["h=1"], &[], &commit(vec![part("h=1", 1, 1), part("h=1", 1, 1)]));
        assert_eq!(status_of(&dup, CheckName::PartitionsComplete), CheckStatus::Fail);
    }

    #[test]
    fn duplicate_and_null_keys_fail() {
        let mut p = part("dt=2026-08-24", 10, 10);
        p.distinct_keys = Some(9);
        p.null_keys = Some(2);
        let v = run(&DatasetPolicy::default(), &["dt=2026-08-24"], &[], &commit(vec![p]));
        assert_eq!(status_of(&v, CheckName::UniqueKeys), CheckStatus::Fail);
        assert_eq!(status_of(&v, CheckName::NullKeys), CheckStatus::Fail);
        assert!(!v.passed);
    }

    #[test]
    fn empty_partitions_fail_unless_allowed() {
        let v = run(&DatasetPolicy::default(), &["dt=2026-08-24"], &[], &commit(vec![part("dt=2026-08-24", 0, 0)]));
        assert_eq!(status_of(&v, CheckName::NonEmpty), CheckStatus::Fail);
        let allow = DatasetPolicy { allow_empty: true, ..Default::default() };
        let v = run(&allow, &["dt=2026-08-24"], &[], &commit(vec![part("dt=2026-08-24", 0, 0)]));
        assert!(v.passed, "{v:?}");
    }

    #[test]
    fn a_volume_drop_warns_on_standard_and_blocks_on_core() {
        let hist = PartitionHistory {
            published_row_count: Some(1000),
            baseline: vec![1000, 990, 1010, 1000, 1005, 995, 1000],
        };
        let ev = commit(vec![part("dt=2026-08-24", 100, 100)]);
        let standard = run(&DatasetPolicy::default(), &["dt=2026-08-24"], &[("dt=2026-08-24", hist.clone())], &ev);
        assert_eq!(status_of(&standard, CheckName::VolumeVsBaseline), CheckStatus::Warn);
        assert!(standard.passed);
        let core = DatasetPolicy { tier: Tier::Core, ..Default::default() };
        let v = run(&core, &["dt=2026-08-24"], &[("dt=2026-08-24", hist.clone())], &ev);
        assert_eq!(status_of(&v, CheckName::VolumeVsBaseline), CheckStatus::Fail);
        assert!(!v.passed);
        let within = commit(vec![part("dt=2026-08-24", 800, 800)]);
        let v = run(&core, &["dt=2026-08-24"], &[("dt=2026-08-24", hist)], &within);
        assert_eq!(status_of(&v, CheckName::VolumeVsBaseline), CheckStatus::Pass);
    }

    #[test]
    fn source_sums_reconcile_within_a_relative_tolerance() {
        let mut p = part("dt=2026-08-24", 3, 3);
        p.metrics.insert("amount".into(), 98765432.10);
        let mut ev = commit(vec![p]);
        ev.source =
            Some(SourceEvidence { row_count: Some(3), metrics: [("amount".to_string(), 98765432.10 + 1e-8)].into() });
        let v = run(&DatasetPolicy::default(), &["dt=2026-08-24"], &[], &ev);
        assert_eq!(status_of(&v, CheckName::SourceReconciliation), CheckStatus::Pass);
        ev.source = Some(SourceEvidence { row_count: Some(3), metrics: [("amount".to_string(), 98765000.0)].into() });
        let v = run(&DatasetPolicy::default(), &["dt=2026-08-24"], &[], &ev);
        assert_eq!(status_of(&v, CheckName::SourceReconciliation), CheckStatus::Fail);
        ev.source = Some(SourceEvidence { row_count: Some(4), metrics: BTreeMap::new() });
        let v = run(&DatasetPolicy::default(), &["dt=2026-08-24"], &[], &ev);
        assert_eq!(status_of(&v, CheckName::SourceReconciliation), CheckStatus::Fail);
    }

    #[test]
    fn row_sums_that_overflow_fail_instead_of_wrapping() {
        // Four partitions of 2^62 rows wrap to 0 in unchecked arithmetic.
        let specs = ["dt=2026-08-24/p=1", "dt=2026-08-24/p=2", "dt=2026-08-24/p=3", "dt=2026-08-24/p=4"];
        let mut ev = commit(specs.iter().map(|s| part(s, 1 << 62, 1 << 62)).collect());
        ev.source = Some(SourceEvidence { row_count: Some(0), metrics: BTreeMap::new() });
        let v = run(&DatasetPolicy::default(), &specs, &[], &ev);
        assert_eq!(status_of(&v, CheckName::SourceReconciliation), CheckStatus::Fail);
        assert!(!v.passed);
        let check = v.checks.iter().find(|c| c.name == CheckName::SourceReconciliation).unwrap();
        assert!(check.message.contains("cannot be represented"), "{}", check.message);

        let append = DatasetPolicy { write_mode: WriteMode::Append, ..Default::default() };
        let hist = PartitionHistory { published_row_count: Some(i64::MAX), baseline: vec![] };
        let ev = commit(vec![part("dt=2026-08-24", 1, 0)]);
        let v = run(&append, &["dt=2026-08-24"], &[("dt=2026-08-24", hist)], &ev);
        assert_eq!(status_of(&v, CheckName::RowsMatchWritten), CheckStatus::Fail);
    }

    #[test]
    fn metric_sums_that_go_infinite_fail() {
        let parts: Vec<_> = ["dt=2026-08-24/p=1", "dt=2026-08-24/p=2"]
            .iter()
            .map(|s| {
                let mut p = part(s, 1, 1);
                p.metrics.insert("amount".into(), 1e308);
                p
            })
            .collect();
        let mut ev = commit(parts);
        ev.source = Some(SourceEvidence { row_count: Some(2), metrics: [("amount".to_string(), 1e308)].into() });
        let v = run(&DatasetPolicy::default(), &["dt=2026-08-24/p=1", "dt=2026-08-24/p=2"], &[], &ev);
        assert_eq!(status_of(&v, CheckName::SourceReconciliation), CheckStatus::Fail);
        let check = v.checks.iter().find(|c| c.name == CheckName::SourceReconciliation).unwrap();
        assert!(check.message.contains("too large"), "{}", check.message);
    }

    #[test]
    fn scratch_only_blocks_on_marker_and_completeness() {
        let scratch = DatasetPolicy { tier: Tier::Scratch, ..Default::default() };
        let v = run(&scratch, &["dt=2026-08-24"], &[], &commit(vec![part("dt=2026-08-24", 10, 20)]));
        assert!(v.passed);
        assert_eq!(status_of(&v, CheckName::RowsMatchWritten), CheckStatus::Warn);
        let mut no_marker = commit(vec![part("dt=2026-08-24", 10, 10)]);
        no_marker.marker = "  ".into();
        let v = run(&scratch, &["dt=2026-08-24"], &[], &no_marker);
        assert!(!v.passed);
        assert_eq!(status_of(&v, CheckName::MarkerPresent), CheckStatus::Fail);
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(&[3, 1, 2]), Some(2.0));
        assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}

#[cfg(test)]
mod stored {
    use super::*;
    use crate::domain::policy::Tier;

    fn spec(s: &str) -> PartitionSpec {
        PartitionSpec::parse(s).unwrap()
    }

    /// Verdicts over every outcome of every check: clean, each failing (as
    /// a failure and as a warning), skipped, with and without baselines and
    /// source counts, across write modes.
    fn verdicts() -> Vec<Verdict> {
        let declared = [spec("dt=2026-08-24/hh=00"), spec("dt=2026-08-24/hh=01")];
        let part =
            |p: &PartitionSpec, written: i64, count: i64, keys: Option<i64>, nulls: Option<i64>| PartitionEvidence {
                partition: p.clone(),
                rows_written: written,
                row_count: count,
                distinct_keys: keys,
                null_keys: nulls,
                metrics: BTreeMap::from([("amount".to_owned(), 98765432.10), ("n".to_owned(), 3.0)]),
            };
        let history = |baseline: Vec<i64>| -> BTreeMap<PartitionSpec, PartitionHistory> {
            declared
                .iter()
                .map(|p| (p.clone(), PartitionHistory { published_row_count: Some(10), baseline: baseline.clone() }))
                .collect()
        };
        let clean = CommitEvidence {
            marker: "hdfs://warehouse/x/_SUCCESS".into(),
            partitions: declared.iter().map(|p| part(p, 10, 10, Some(10), Some(0))).collect(),
            source: Some(SourceEvidence {
                row_count: Some(20),
                metrics: BTreeMap::from([("amount".to_owned(), 2.0 * 98765432.10)]),
            }),
        };
        let mut bad = clean.clone();
        bad.marker = " ".into();
        bad.partitions = vec![part(&declared[0], 10, 0, Some(3), Some(2)), part(&declared[0], 10, 12, None, None)];
        bad.source = Some(SourceEvidence { row_count: Some(7), metrics: BTreeMap::from([("x".to_owned(), 1.0)]) });
        let mut unsourced = clean.clone();
        unsourced.source = None;
        unsourced.partitions[1].distinct_keys = None;
        unsourced.partitions[1].null_keys = None;
        let mut out = Vec::new();
        for tier in [Tier::Core, Tier::Standard, Tier::Scratch] {
            for write_mode in [WriteMode::OverwritePartition, WriteMode::Append, WriteMode::Merge] {
                for allow_empty in [false, true] {
                    let policy = DatasetPolicy { tier, write_mode, allow_empty, ..DatasetPolicy::default() };
                    for baseline in [vec![], vec![0, 0], vec![10, 11, 40], vec![1, 2]] {
                        for ev in [&clean, &bad, &unsourced] {
                            out.push(evaluate(&policy, &declared, &history(baseline.clone()), ev));
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn stored_checks_read_back_exactly_and_smaller() {
        let (mut shown, mut stored) = (0, 0);
        for v in verdicts() {
            let text = serde_json::to_string(&Compact(&v.checks)).unwrap();
            let read: Vec<CheckResult> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(read, v.checks, "{text}");
            let full = serde_json::to_string(&v.checks).unwrap();
            let again: Vec<CheckResult> = serde_json::from_str(&full).unwrap();
            assert_eq!(again, v.checks, "the form shown (and stored before) reads too");
            (shown, stored) = (shown + full.len(), stored + text.len());
        }
        assert!(stored * 2 < shown, "stored {stored} bytes for {shown} shown");
    }

    #[test]
    fn a_usual_message_is_left_out_and_any_other_is_kept() {
        let v = verdicts().remove(0);
        assert!(v.passed);
        let text = serde_json::to_string(&Compact(&v.checks)).unwrap();
        let full = serde_json::to_string(&v.checks).unwrap();
        assert!(text.len() * 3 < full.len(), "a clean commit's checks: {text} for {full}");
        assert!(!text.contains("completion marker present"), "{text}");
        let mut odd = v.checks.clone();
        odd[0].message = "said otherwise".into();
        let text = serde_json::to_string(&Compact(&odd)).unwrap();
        assert!(text.contains("said otherwise"), "{text}");
        assert_eq!(serde_json::from_str::<Vec<CheckResult>>(&text).unwrap(), odd);
        for wrong in ["[[64,1,1,0]]", "[[0,1,1]]", "[[0,1,1,7]]", "[[0,1,1,0,5]]", "[[0,1,1,0,\"p\",1]]"] {
            assert!(serde_json::from_str::<Vec<CheckResult>>(wrong).is_err(), "{wrong}");
        }
    }

    /// [`Sorted`] writes what serialising through a JSON value wrote.
    #[test]
    fn sorted_is_the_json_value_form() {
        for v in verdicts() {
            for c in &v.checks {
                let direct = serde_json::to_string(&Sorted(c)).unwrap();
                let through = serde_json::to_string(&serde_json::to_value(c).unwrap()).unwrap();
                assert_eq!(direct, through);
            }
        }
    }
}
