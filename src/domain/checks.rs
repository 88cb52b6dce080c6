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
// 14) and from [`Compact`]'s; checks stored without what their batch's
// record gives back ([`Stored`]) read as [`StoredCheck`]s and are rebuilt
// with the record ([`rebuild`]).
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

/// The checks as the registry stored them after issue 14 first made them
/// smaller (and as [`Stored`] still stores a check it cannot leave
/// anything out of): each one an array `[code, observed, expected, message, partition]`,
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
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Pass(String),
    Fail(String),
    Skipped(String),
}

impl Outcome {
    fn message(&self) -> &str {
        match self {
            Outcome::Pass(m) | Outcome::Fail(m) | Outcome::Skipped(m) => m,
        }
    }
}

/// What one check found: what it shows and how it came out, before the tier
/// says whether a failure blocks. Each check is one function below making
/// it from the evidence and what the check needs of the policy and the
/// history; [`evaluate`] runs them over a commit, and a stored check is
/// rebuilt with the same function from its batch's record ([`Stored`]).
#[derive(Debug, Clone, PartialEq)]
struct Found {
    observed: Value,
    expected: Value,
    outcome: Outcome,
}

struct Builder<'a> {
    policy: &'a DatasetPolicy,
    checks: Vec<CheckResult>,
}

impl Builder<'_> {
    fn push(&mut self, name: CheckName, partition: Option<&PartitionSpec>, found: Found) {
        let blocking = self.policy.tier.blocks(name);
        let Found { observed, expected, outcome } = found;
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
    b.push(CheckName::MarkerPresent, None, marker_present(&evidence.marker));
    let reported: Vec<&PartitionSpec> = evidence.partitions.iter().map(|p| &p.partition).collect();
    b.push(CheckName::PartitionsComplete, None, partitions_complete(declared, &reported));
    for p in &evidence.partitions {
        let spec = Some(&p.partition);
        let hist = history.get(&p.partition).cloned().unwrap_or_default();
        b.push(CheckName::RowsMatchWritten, spec, rows_match_written(p, policy.write_mode, hist.published_row_count));
        b.push(CheckName::UniqueKeys, spec, unique_keys(p));
        b.push(CheckName::NullKeys, spec, null_keys(p));
        b.push(CheckName::NonEmpty, spec, non_empty(p, policy.allow_empty));
        let baseline = median(&hist.baseline);
        let volume = volume_vs_baseline(p.row_count, baseline, hist.baseline.len(), policy.max_volume_change);
        b.push(CheckName::VolumeVsBaseline, spec, volume);
    }
    b.push(
        CheckName::SourceReconciliation,
        None,
        source_reconciliation(evidence.source.as_ref(), &evidence.partitions),
    );
    let passed = !b.checks.iter().any(|c| c.status == CheckStatus::Fail);
    Verdict { passed, checks: b.checks }
}

// What each check finds. Stored checks are rebuilt with these functions
// (see [`Stored`]): what one of them makes of given inputs must not change
// without keeping how rows stored before read.

/// Check 1, `marker_present`: a non-blank completion marker.
fn marker_present(marker: &str) -> Found {
    Found {
        observed: json!(marker),
        expected: json!("a non-empty completion marker"),
        outcome: if marker.trim().is_empty() {
            Outcome::Fail("no completion marker was given".into())
        } else {
            Outcome::Pass("completion marker present".into())
        },
    }
}

/// Check 2, `partitions_complete`: every declared partition reported, once, and
/// nothing else.
fn partitions_complete(declared: &[PartitionSpec], reported: &[&PartitionSpec]) -> Found {
    let declared_set: BTreeSet<&PartitionSpec> = declared.iter().collect();
    let mut seen = BTreeSet::new();
    let duplicated: Vec<String> = reported.iter().filter(|p| !seen.insert(**p)).map(|p| p.to_string()).collect();
    let missing: Vec<String> = declared_set.difference(&seen).map(|p| p.to_string()).collect();
    let unexpected: Vec<String> = seen.difference(&declared_set).map(|p| p.to_string()).collect();
    let complete = missing.is_empty() && unexpected.is_empty() && duplicated.is_empty();
    let outcome = if complete {
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
    };
    Found {
        observed: json!({"reported": reported.len(), "missing": missing, "unexpected": unexpected, "duplicated": duplicated}),
        expected: json!({"declared": declared.len()}),
        outcome,
    }
}

/// Check 3, `rows_match_written`: the partition holds the rows the batch accounts
/// for under the write mode (`published`: the published version's count).
fn rows_match_written(p: &PartitionEvidence, write_mode: WriteMode, published: Option<i64>) -> Found {
    let observed = json!(p.row_count);
    // `Some(None)`: the rows the batch accounts for exceed i64.
    let expected_rows = match write_mode {
        WriteMode::OverwritePartition | WriteMode::DeleteInsertByBatch => Some(Some(p.rows_written)),
        WriteMode::Append => Some(published.unwrap_or(0).checked_add(p.rows_written)),
        WriteMode::Merge => None,
    };
    match expected_rows {
        Some(None) => Found {
            observed,
            expected: Value::Null,
            outcome: Outcome::Fail(format!(
                "the published {} rows plus the {} rows written exceed {} and cannot be represented",
                published.unwrap_or(0),
                p.rows_written,
                i64::MAX
            )),
        },
        None => Found {
            observed,
            expected: Value::Null,
            outcome: Outcome::Skipped(
                "merge writes update rows in place; row_count is not derived from rows_written".into(),
            ),
        },
        Some(Some(exp)) => Found {
            observed,
            expected: json!(exp),
            outcome: if p.row_count == exp {
                Outcome::Pass(format!("partition holds the {exp} rows the batch accounts for"))
            } else {
                Outcome::Fail(format!(
                    "partition holds {} rows but the batch accounts for {exp} ({}): {} rows are {}",
                    p.row_count,
                    write_mode,
                    (p.row_count - exp).abs(),
                    if p.row_count > exp { "extra (leftovers of an earlier attempt?)" } else { "missing" }
                ))
            },
        },
    }
}

/// Check 4, `unique_keys`: as many distinct keys as rows.
fn unique_keys(p: &PartitionEvidence) -> Found {
    match p.distinct_keys {
        None => Found {
            observed: Value::Null,
            expected: json!(p.row_count),
            outcome: Outcome::Skipped("distinct_keys not reported".into()),
        },
        Some(d) => Found {
            observed: json!(d),
            expected: json!(p.row_count),
            outcome: if d == p.row_count {
                Outcome::Pass("every row has its own key".into())
            } else {
                Outcome::Fail(format!(
                    "{d} distinct keys over {} rows: {} duplicate rows",
                    p.row_count,
                    p.row_count - d
                ))
            },
        },
    }
}

/// Check 5, `null_keys`: no row without a key.
fn null_keys(p: &PartitionEvidence) -> Found {
    match p.null_keys {
        None => Found {
            observed: Value::Null,
            expected: json!(0),
            outcome: Outcome::Skipped("null_keys not reported".into()),
        },
        Some(n) => Found {
            observed: json!(n),
            expected: json!(0),
            outcome: if n == 0 {
                Outcome::Pass("no null keys".into())
            } else {
                Outcome::Fail(format!("{n} rows have a null key"))
            },
        },
    }
}

/// Check 6, `non_empty`: rows, unless the dataset allows empty partitions.
fn non_empty(p: &PartitionEvidence, allow_empty: bool) -> Found {
    if allow_empty {
        return Found {
            observed: json!(p.row_count),
            expected: Value::Null,
            outcome: Outcome::Skipped("the dataset allows empty partitions".into()),
        };
    }
    Found {
        observed: json!(p.row_count),
        expected: json!("> 0"),
        outcome: if p.row_count > 0 {
            Outcome::Pass("partition has rows".into())
        } else {
            Outcome::Fail("partition is empty".into())
        },
    }
}

/// Check 7, `volume_vs_baseline`: the row count within `max_change` of the
/// median (`baseline`) of the same partition's counts on `periods` earlier
/// dates.
fn volume_vs_baseline(row_count: i64, baseline: Option<f64>, periods: usize, max_change: f64) -> Found {
    match baseline {
        None => Found {
            observed: json!(row_count),
            expected: Value::Null,
            outcome: Outcome::Skipped("no published history on earlier dates".into()),
        },
        Some(0.0) => Found {
            observed: json!(row_count),
            expected: json!({"baseline": 0, "periods": periods}),
            outcome: if row_count == 0 {
                Outcome::Pass("empty, as the baseline".into())
            } else {
                Outcome::Fail(format!("{row_count} rows against an empty baseline"))
            },
        },
        Some(base) => {
            let change = (row_count as f64 - base) / base;
            Found {
                observed: json!({"row_count": row_count, "change": change}),
                expected: json!({"baseline": base, "periods": periods, "max_change": max_change}),
                outcome: if change.abs() <= max_change {
                    Outcome::Pass(format!("{:+.1}% against the median of {periods} earlier dates", change * 100.0))
                } else {
                    Outcome::Fail(format!(
                        "{:+.1}% against the median {base} of {periods} earlier dates; at most ±{:.1}% allowed",
                        change * 100.0,
                        max_change * 100.0
                    ))
                },
            }
        }
    }
}

/// Check 8, `source_reconciliation`: the partitions' rows written and metric sums
/// against the source's counts.
fn source_reconciliation(source: Option<&SourceEvidence>, partitions: &[PartitionEvidence]) -> Found {
    let Some(src) = source else {
        return Found {
            observed: Value::Null,
            expected: Value::Null,
            outcome: Outcome::Skipped("no source counts given".into()),
        };
    };
    // Checked: four partitions of 2^62 rows must not wrap to 0 and match an
    // empty source.
    let written = partitions.iter().try_fold(0i64, |sum, p| sum.checked_add(p.rows_written));
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
        let reported: Vec<f64> = partitions.iter().filter_map(|p| p.metrics.get(metric).copied()).collect();
        expected.insert(metric.clone(), json!(want));
        if reported.len() != partitions.len() {
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
    Found {
        observed: Value::Object(observed),
        expected: Value::Object(expected),
        outcome: if problems.is_empty() {
            Outcome::Pass("target reconciles with the source".into())
        } else {
            Outcome::Fail(problems.join("; "))
        },
    }
}

/// What a batch's record keeps of its commit's evidence, never changed
/// after the decision: the marker, the source counts and each declared
/// partition's counts (`None` when they are not all there), in
/// partition-name order. Checks are stored without what this gives back
/// ([`Stored`]) and rebuilt from it ([`rebuild`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recorded {
    marker: Option<String>,
    source: Option<SourceEvidence>,
    partitions: Vec<(PartitionSpec, Option<PartitionEvidence>)>,
}

impl Recorded {
    /// The record as a batch's row and its partitions' rows keep it.
    pub fn new(
        marker: Option<String>,
        source: Option<SourceEvidence>,
        partitions: impl IntoIterator<Item = (PartitionSpec, Option<PartitionEvidence>)>,
    ) -> Self {
        let mut partitions: Vec<_> = partitions.into_iter().collect();
        partitions.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        Self { marker, source, partitions }
    }

    /// The record a commit leaves: its marker and source, and for each
    /// declared partition the counts the commit reported for it (the last
    /// ones, as the rows are updated in turn).
    pub fn of_commit(declared: &[PartitionSpec], evidence: &CommitEvidence) -> Self {
        let counts = |d: &PartitionSpec| evidence.partitions.iter().rev().find(|p| p.partition == *d).cloned();
        Self::new(
            Some(evidence.marker.clone()),
            evidence.source.clone(),
            declared.iter().map(|d| (d.clone(), counts(d))),
        )
    }

    fn counts(&self, position: usize) -> Option<&PartitionEvidence> {
        self.partitions.get(position)?.1.as_ref()
    }
}

impl PartitionEvidence {
    /// A partition's counts as its row keeps them; `None` unless the
    /// commit reported them all (rows written, row count, metrics).
    pub fn recorded(
        partition: PartitionSpec,
        rows_written: Option<i64>,
        row_count: Option<i64>,
        distinct_keys: Option<i64>,
        null_keys: Option<i64>,
        metrics: Option<&Value>,
    ) -> Option<Self> {
        Some(Self {
            partition,
            rows_written: rows_written?,
            row_count: row_count?,
            distinct_keys,
            null_keys,
            metrics: BTreeMap::<String, f64>::deserialize(metrics?).ok()?,
        })
    }
}

/// What a check needed at decision time that its batch's record does not
/// keep: the dataset's policy and the registry's history then.
#[derive(Debug, Clone, PartialEq)]
enum Given {
    Nothing,
    /// `rows_match_written`: the write mode and the published row count.
    Accounting {
        write_mode: WriteMode,
        published: Option<i64>,
    },
    /// `non_empty`: whether the dataset allowed empty partitions.
    Empty {
        allowed: bool,
    },
    /// `volume_vs_baseline`: the baseline's median, how many dates it has
    /// and the largest change allowed.
    Baseline {
        median: Option<f64>,
        periods: usize,
        max_change: f64,
    },
}

impl Given {
    /// What is given unless stored: what the check's status says, else
    /// the most common.
    fn usual(name: CheckName, status: CheckStatus) -> Self {
        let skipped = status == CheckStatus::Skipped;
        match name {
            CheckName::RowsMatchWritten => Given::Accounting {
                write_mode: if skipped { WriteMode::Merge } else { WriteMode::OverwritePartition },
                published: None,
            },
            CheckName::NonEmpty => Given::Empty { allowed: skipped },
            CheckName::VolumeVsBaseline => Given::Baseline { median: None, periods: 0, max_change: 0.0 },
            _ => Given::Nothing,
        }
    }

    /// What may have been given for `c`, the usual first.
    fn candidates(c: &CheckResult, counts: Option<&PartitionEvidence>) -> Vec<Self> {
        let mut out = vec![Self::usual(c.name, c.status)];
        match c.name {
            CheckName::RowsMatchWritten => {
                let published = counts.zip(c.expected.as_i64()).and_then(|(p, e)| e.checked_sub(p.rows_written));
                for (write_mode, published) in [
                    (WriteMode::Append, published),
                    (WriteMode::DeleteInsertByBatch, None),
                    (WriteMode::OverwritePartition, None),
                    (WriteMode::Merge, None),
                ] {
                    out.push(Given::Accounting { write_mode, published });
                }
            }
            CheckName::NonEmpty => out.push(Given::Empty { allowed: c.status != CheckStatus::Skipped }),
            CheckName::VolumeVsBaseline => {
                let e = &c.expected;
                if let (Some(median), Some(periods)) = (e["baseline"].as_f64(), e["periods"].as_u64()) {
                    let max_change = e["max_change"].as_f64().unwrap_or(0.0);
                    out.push(Given::Baseline { median: Some(median), periods: periods as usize, max_change });
                }
            }
            _ => {}
        }
        out
    }

    fn to_json(&self) -> Value {
        match self {
            Given::Nothing => json!([]),
            Given::Accounting { write_mode, published } => json!([write_mode, published]),
            Given::Empty { allowed } => json!([allowed]),
            Given::Baseline { median, periods, max_change } => json!([median, max_change, periods]),
        }
    }

    fn from_json(name: CheckName, given: &[Value]) -> Option<Self> {
        Some(match (name, given) {
            (CheckName::RowsMatchWritten, [mode, published]) => Given::Accounting {
                write_mode: mode.as_str()?.parse().ok()?,
                published: if published.is_null() { None } else { Some(published.as_i64()?) },
            },
            (CheckName::NonEmpty, [allowed]) => Given::Empty { allowed: allowed.as_bool()? },
            (CheckName::VolumeVsBaseline, [median, max_change, periods]) => Given::Baseline {
                median: Some(median.as_f64()?),
                periods: usize::try_from(periods.as_u64()?).ok()?,
                max_change: max_change.as_f64()?,
            },
            _ => return None,
        })
    }
}

/// Whether a check is about one partition.
fn per_partition(name: CheckName) -> bool {
    !matches!(name, CheckName::MarkerPresent | CheckName::PartitionsComplete | CheckName::SourceReconciliation)
}

/// What check `name` finds over a batch's record, given `given`; the
/// partition's `position` in the record for a per-partition check. `None`
/// when the record lacks what it needs.
fn refind(name: CheckName, given: &Given, position: usize, record: &Recorded) -> Option<Found> {
    let counts = || record.counts(position);
    Some(match (name, given) {
        (CheckName::MarkerPresent, Given::Nothing) => marker_present(record.marker.as_deref()?),
        (CheckName::PartitionsComplete, Given::Nothing) => {
            let declared: Vec<PartitionSpec> = record.partitions.iter().map(|(p, _)| p.clone()).collect();
            partitions_complete(&declared, &declared.iter().collect::<Vec<_>>())
        }
        (CheckName::RowsMatchWritten, Given::Accounting { write_mode, published }) => {
            rows_match_written(counts()?, *write_mode, *published)
        }
        (CheckName::UniqueKeys, Given::Nothing) => unique_keys(counts()?),
        (CheckName::NullKeys, Given::Nothing) => null_keys(counts()?),
        (CheckName::NonEmpty, Given::Empty { allowed }) => non_empty(counts()?, *allowed),
        (CheckName::VolumeVsBaseline, Given::Baseline { median, periods, max_change }) => {
            volume_vs_baseline(counts()?.row_count, *median, *periods, *max_change)
        }
        (CheckName::SourceReconciliation, Given::Nothing) => {
            let partitions: Option<Vec<PartitionEvidence>> = record.partitions.iter().map(|(_, c)| c.clone()).collect();
            source_reconciliation(record.source.as_ref(), &partitions?)
        }
        _ => return None,
    })
}

/// The place of a check's name and status in [`CheckName`] and
/// [`CheckStatus`], and whether it blocks, as one number below 64.
fn code(c: &CheckResult) -> usize {
    let name = NAMES.iter().position(|n| *n == c.name).unwrap_or_default();
    let status = STATUSES.iter().position(|n| *n == c.status).unwrap_or_default();
    name * 8 + status * 2 + usize::from(c.blocking)
}

/// A batch's checks as the registry stores them (`batches.checks`): each
/// check without what its batch's record gives back. A check whose
/// `observed` and `expected` (and partition) are what its function finds
/// over the record ([`Recorded`]) is the number `code + 64 × position`
/// (`code` as in [`Compact`], `position` its partition's in the record's
/// partitions, 0 for a batch-wide check), or, when it needed more than the
/// record keeps or its message is not the one found, `[number, given,
/// message]` (`given` what it needed of policy and history, `[]` for the
/// usual; `message` left out when found). Any other check is stored as
/// [`Compact`] stores it. [`rebuild`] reads every form back exactly.
pub struct Stored<'a> {
    pub checks: &'a [CheckResult],
    pub record: &'a Recorded,
}

impl Serialize for Stored<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|c| stored(c, self.record))
            .collect::<Result<_, _>>()
            .map_err(serde::ser::Error::custom)?;
        s.collect_seq(checks)
    }
}

/// One check as [`Stored`] writes it.
fn stored(c: &CheckResult, record: &Recorded) -> Result<Value, serde_json::Error> {
    // The same text too: JSON values equal as numbers (-0.0 and 0.0) may be written apart.
    let same = |a: &Value, b: &Value| a == b && serde_json::to_string(a).ok() == serde_json::to_string(b).ok();
    let position = match &c.partition {
        None if !per_partition(c.name) => Some(0),
        Some(p) if per_partition(c.name) => record.partitions.iter().position(|(q, _)| q.as_str() == p),
        _ => None,
    };
    let usual = Given::usual(c.name, c.status);
    let found = position.and_then(|position| {
        let counts = record.counts(position);
        let mut matching = Given::candidates(c, counts).into_iter().filter_map(|given| {
            let found = refind(c.name, &given, position, record)?;
            let partition = per_partition(c.name).then(|| record.partitions[position].0.to_string());
            let shown = same(&found.observed, &c.observed) && same(&found.expected, &c.expected);
            (shown && partition == c.partition).then_some((given, found))
        });
        let first = matching.next()?;
        let said = std::iter::once(first.clone()).chain(matching).find(|(_, f)| f.outcome.message() == c.message);
        Some((position, said.unwrap_or(first)))
    });
    let Some((position, (given, found))) = found else {
        return serde_json::to_value(Compact(std::slice::from_ref(c))).map(|mut v| v[0].take());
    };
    let number = code(c) + 64 * position;
    Ok(match (given == usual, found.outcome.message() == c.message) {
        (true, true) => json!(number),
        (true, false) => json!([number, [], c.message]),
        (false, true) => json!([number, given.to_json()]),
        (false, false) => json!([number, given.to_json(), c.message]),
    })
}

/// A stored check as read from `batches.checks`, before the batch's record
/// rebuilds what [`Stored`] left out.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredCheck {
    /// Stored whole: shown, or as [`Compact`] stores it.
    Whole(CheckResult),
    /// Stored without what the record gives back.
    Found { number: u64, given: Vec<Value>, message: Option<String> },
}

impl<'de> Deserialize<'de> for StoredCheck {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let stored = Value::deserialize(d)?;
        let found = match &stored {
            Value::Number(n) => Some((n.as_u64(), Some(Vec::new()), None)),
            Value::Array(a) if matches!(a.len(), 2 | 3) => {
                Some((a[0].as_u64(), a[1].as_array().cloned(), a.get(2).map(|m| m.as_str().map(str::to_owned))))
            }
            _ => None,
        };
        match found {
            None => CheckResult::deserialize(stored).map(StoredCheck::Whole).map_err(D::Error::custom),
            Some((Some(number), Some(given), None)) => Ok(StoredCheck::Found { number, given, message: None }),
            Some((Some(number), Some(given), Some(Some(m)))) => {
                Ok(StoredCheck::Found { number, given, message: Some(m) })
            }
            _ => Err(D::Error::custom(format!("{stored} is not a stored check"))),
        }
    }
}

/// A batch's checks from their stored form and, for the checks stored
/// without what it gives back, the batch's record (asked for only then).
pub fn rebuild<E: std::fmt::Display>(
    stored: Vec<StoredCheck>,
    record: impl FnOnce() -> Result<Recorded, E>,
) -> Result<Vec<CheckResult>, String> {
    let mut record = Some(record);
    let mut recorded = None;
    let mut out = Vec::with_capacity(stored.len());
    for check in stored {
        let (number, given, message) = match check {
            StoredCheck::Whole(c) => {
                out.push(c);
                continue;
            }
            StoredCheck::Found { number, given, message } => (number, given, message),
        };
        let bad = |why: &str| format!("{} is not a stored check: {why}", stored_text(number, &given, &message));
        if recorded.is_none() {
            let make = record.take().ok_or_else(|| bad("no record"))?;
            recorded = Some(make().map_err(|e| bad(&format!("its batch's record cannot be read: {e}")))?);
        }
        let recorded = recorded.as_ref().ok_or_else(|| bad("no record"))?;
        let code = usize::try_from(number % 64).map_err(|_| bad("code"))?;
        let position = usize::try_from(number / 64).map_err(|_| bad("position"))?;
        let (Some(&name), Some(&status)) = (NAMES.get(code / 8), STATUSES.get(code / 2 % 4)) else {
            return Err(bad("unknown code"));
        };
        if !per_partition(name) && position != 0 {
            return Err(bad("a batch-wide check has no partition"));
        }
        let given = if given.is_empty() {
            Given::usual(name, status)
        } else {
            Given::from_json(name, &given).ok_or_else(|| bad("not what the check is given"))?
        };
        let found = refind(name, &given, position, recorded).ok_or_else(|| bad("its batch's record lacks it"))?;
        let Found { observed, expected, outcome } = found;
        out.push(CheckResult {
            name,
            partition: per_partition(name).then(|| recorded.partitions[position].0.to_string()),
            status,
            observed,
            expected,
            message: message.unwrap_or_else(|| outcome.message().to_owned()),
            blocking: code % 2 == 1,
        });
    }
    Ok(out)
}

fn stored_text(number: u64, given: &[Value], message: &Option<String>) -> String {
    json!([number, given, message]).to_string()
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
        commits().into_iter().map(|(_, _, v)| v).collect()
    }

    /// [`verdicts`] with the declared partitions and the evidence of each.
    fn commits() -> Vec<(Vec<PartitionSpec>, CommitEvidence, Verdict)> {
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
        let mut unexpected = clean.clone();
        unexpected.partitions[1].partition = spec("dt=2026-08-24/hh=02");
        let mut out = Vec::new();
        for tier in [Tier::Core, Tier::Standard, Tier::Scratch] {
            for write_mode in [WriteMode::OverwritePartition, WriteMode::Append, WriteMode::Merge] {
                for allow_empty in [false, true] {
                    let policy = DatasetPolicy { tier, write_mode, allow_empty, ..DatasetPolicy::default() };
                    for baseline in [vec![], vec![0, 0], vec![10, 11, 40], vec![1, 2]] {
                        for ev in [&clean, &bad, &unsourced, &unexpected] {
                            let verdict = evaluate(&policy, &declared, &history(baseline.clone()), ev);
                            out.push((declared.to_vec(), ev.clone(), verdict));
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

    /// The record a commit leaves as a reader gets it back: each declared
    /// partition's last reported counts, and the source and metrics through
    /// their stored JSON text.
    fn as_read(declared: &[PartitionSpec], ev: &CommitEvidence) -> Recorded {
        fn text<T: Serialize>(v: &T) -> Value {
            serde_json::from_str(&serde_json::to_string(v).unwrap()).unwrap()
        }
        let source = ev.source.as_ref().map(|s| serde_json::from_value(text(s)).unwrap());
        let partitions = declared.iter().map(|d| {
            let p = ev.partitions.iter().rev().find(|p| p.partition == *d);
            let counts = p.and_then(|p| {
                let metrics = text(&p.metrics);
                PartitionEvidence::recorded(
                    d.clone(),
                    Some(p.rows_written),
                    Some(p.row_count),
                    p.distinct_keys,
                    p.null_keys,
                    Some(&metrics),
                )
            });
            (d.clone(), counts)
        });
        Recorded::new(Some(ev.marker.clone()), source, partitions)
    }

    /// Stores `checks` for the record `ev` leaves and reads them back as a
    /// reader does; the stored text too.
    fn round_trip(
        declared: &[PartitionSpec],
        ev: &CommitEvidence,
        checks: &[CheckResult],
    ) -> (String, Vec<CheckResult>) {
        let record = Recorded::of_commit(declared, ev);
        let text = serde_json::to_string(&Stored { checks, record: &record }).unwrap();
        let stored: Vec<StoredCheck> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let read = rebuild(stored, || Ok::<_, String>(as_read(declared, ev))).unwrap_or_else(|e| panic!("{text}: {e}"));
        (text, read)
    }

    /// Pass, warn, fail and skipped; one and two partitions; with and
    /// without source counts; rejected commits with missing, duplicated and
    /// unexpected partitions.
    #[test]
    fn checks_stored_without_their_record_read_back_exactly_and_much_smaller() {
        // Bytes stored, and the compact form's, of all and of published batches.
        let (mut all, mut published) = ([0, 0], [0, 0]);
        for (declared, ev, v) in commits() {
            let (text, read) = round_trip(&declared, &ev, &v.checks);
            assert_eq!(read, v.checks, "{text}");
            let sizes = [text.len(), serde_json::to_string(&Compact(&v.checks)).unwrap().len()];
            if v.passed {
                assert!(!text.contains("dt=2026-08-24/hh=0"), "a declared partition is named by its place: {text}");
                (published[0], published[1]) = (published[0] + sizes[0], published[1] + sizes[1]);
            }
            (all[0], all[1]) = (all[0] + sizes[0], all[1] + sizes[1]);
        }
        assert!(all[0] * 2 < all[1], "stored {all:?}");
        assert!(published[0] * 5 < published[1], "stored {published:?}");
    }

    /// The bench's batch: one partition, published over a week of history.
    /// The registry bench's commit: one partition of 1000 rows, no key counts.
    fn bench_commit() -> (Vec<PartitionSpec>, CommitEvidence) {
        let declared = vec![spec("dt=2022-09-26")];
        let ev = CommitEvidence {
            marker: "hdfs://warehouse/dsx/dt=2022-09-26/_SUCCESS".into(),
            partitions: vec![PartitionEvidence {
                partition: declared[0].clone(),
                rows_written: 1000,
                row_count: 1000,
                distinct_keys: None,
                null_keys: None,
                metrics: BTreeMap::new(),
            }],
            source: None,
        };
        (declared, ev)
    }

    #[test]
    fn a_published_one_partition_batch_stores_its_checks_in_a_few_bytes() {
        let (declared, ev) = bench_commit();
        let history = BTreeMap::from([(
            declared[0].clone(),
            PartitionHistory { published_row_count: Some(1000), baseline: vec![1000; 7] },
        )]);
        let v = evaluate(&DatasetPolicy::default(), &declared, &history, &ev);
        assert!(v.passed, "{v:?}");
        let (text, read) = round_trip(&declared, &ev, &v.checks);
        assert_eq!(read, v.checks);
        assert_eq!(text, "[1,9,17,31,39,41,[48,[1000.0,0.3,7]],63]");
        // With source counts, on a merge dataset that allows empty partitions.
        let mut ev = ev;
        ev.source = Some(SourceEvidence { row_count: Some(1000), metrics: BTreeMap::new() });
        let merge = DatasetPolicy { write_mode: WriteMode::Merge, allow_empty: true, ..DatasetPolicy::default() };
        let v = evaluate(&merge, &declared, &history, &ev);
        let (text, read) = round_trip(&declared, &ev, &v.checks);
        assert_eq!(read, v.checks);
        assert_eq!(text, "[1,9,23,31,39,47,[48,[1000.0,0.3,7]],57]");
    }

    /// Rows stored in this form keep reading as they were answered: the
    /// values and messages a check gives back from its record are part of
    /// the stored format. A change to any of them (a message's wording
    /// included) fails here, and needs a new stored form that keeps this
    /// one readable as it is.
    #[test]
    fn stored_checks_read_as_they_were_answered() {
        let (declared, ev) = bench_commit();
        let record = Recorded::of_commit(&declared, &ev);
        let stored: Vec<StoredCheck> = serde_json::from_str("[1,9,17,31,39,41,[48,[1000.0,0.3,7]],63]").unwrap();
        let read = rebuild(stored, || Ok::<_, String>(record)).unwrap();
        let shown = serde_json::to_string(&read.iter().map(Sorted).collect::<Vec<_>>()).unwrap();
        assert_eq!(shown, GOLDEN, "{shown}");
    }

    const GOLDEN: &str = concat!(
        "[",
        r#"{"blocking":true,"expected":"a non-empty completion marker","message":"completion marker present","name":"marker_present","observed":"hdfs://warehouse/dsx/dt=2022-09-26/_SUCCESS","status":"pass"}"#,
        ",",
        r#"{"blocking":true,"expected":{"declared":1},"message":"all 1 declared partitions reported","name":"partitions_complete","observed":{"duplicated":[],"missing":[],"reported":1,"unexpected":[]},"status":"pass"}"#,
        ",",
        r#"{"blocking":true,"expected":1000,"message":"partition holds the 1000 rows the batch accounts for","name":"rows_match_written","observed":1000,"partition":"dt=2022-09-26","status":"pass"}"#,
        ",",
        r#"{"blocking":true,"expected":1000,"message":"distinct_keys not reported","name":"unique_keys","observed":null,"partition":"dt=2022-09-26","status":"skipped"}"#,
        ",",
        r#"{"blocking":true,"expected":0,"message":"null_keys not reported","name":"null_keys","observed":null,"partition":"dt=2022-09-26","status":"skipped"}"#,
        ",",
        r#"{"blocking":true,"expected":"> 0","message":"partition has rows","name":"non_empty","observed":1000,"partition":"dt=2022-09-26","status":"pass"}"#,
        ",",
        r#"{"blocking":false,"expected":{"baseline":1000.0,"max_change":0.3,"periods":7},"message":"+0.0% against the median of 7 earlier dates","name":"volume_vs_baseline","observed":{"change":0.0,"row_count":1000},"partition":"dt=2022-09-26","status":"pass"}"#,
        ",",
        r#"{"blocking":true,"expected":null,"message":"no source counts given","name":"source_reconciliation","observed":null,"status":"skipped"}"#,
        "]"
    );

    #[test]
    fn per_partition_checks_name_their_partition_by_its_place() {
        let (declared, ev, v) = commits().remove(0);
        assert!(v.passed);
        let (text, read) = round_trip(&declared, &ev, &v.checks);
        assert_eq!(read, v.checks);
        let numbers: Vec<Value> = serde_json::from_str(&text).unwrap();
        let unique: Vec<u64> = numbers.iter().filter_map(Value::as_u64).filter(|n| n % 64 == 25).collect();
        assert_eq!(unique, [25, 64 + 25], "{text}");
        assert_eq!(read[8].partition.as_deref(), Some("dt=2026-08-24/hh=01"));
    }

    #[test]
    fn values_and_messages_other_than_found_are_stored_as_they_are() {
        let (declared, ev, v) = commits().remove(0);
        let mut odd = v.checks.clone();
        odd[0].message = "said otherwise".into();
        odd[2].observed = json!(11);
        odd[3].partition = Some("dt=2026-08-24/hh=07".into());
        let (text, read) = round_trip(&declared, &ev, &odd);
        assert_eq!(read, odd, "{text}");
        let stored: Vec<Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(stored[0], json!([1, [], "said otherwise"]));
        assert_eq!(stored[2].as_array().map(Vec::len), Some(5), "stored whole: {}", stored[2]);
        assert_eq!(stored[3].as_array().map(Vec::len), Some(5), "stored whole: {}", stored[3]);
        // A failure's message that follows from what the check was given is found again.
        let append = DatasetPolicy { write_mode: WriteMode::Append, ..DatasetPolicy::default() };
        let history = BTreeMap::from([(
            declared[0].clone(),
            PartitionHistory { published_row_count: Some(10), baseline: vec![] },
        )]);
        let one = CommitEvidence { partitions: ev.partitions[..1].to_vec(), ..ev };
        let v = evaluate(&append, &declared[..1], &history, &one);
        assert_eq!(v.checks[2].status, CheckStatus::Fail, "{v:?}");
        let (text, read) = round_trip(&declared[..1], &one, &v.checks);
        assert_eq!(read, v.checks, "{text}");
        assert!(text.contains(r#"["append",10]"#) && !text.contains("accounts for"), "{text}");
    }

    #[test]
    fn stored_checks_that_their_record_cannot_give_back_are_errors() {
        let (declared, ev, v) = commits().remove(0);
        let record = Recorded::of_commit(&declared, &ev);
        let text = serde_json::to_string(&Stored { checks: &v.checks, record: &record }).unwrap();
        let stored: Vec<StoredCheck> = serde_json::from_str(&text).unwrap();
        assert!(rebuild(stored.clone(), || Ok::<_, String>(Recorded::default())).is_err(), "no partitions, no marker");
        assert!(rebuild(stored, || Err("unreadable")).is_err());
        for wrong in ["[-1]", "[[1]]", "[[1,2]]", "[[1,[],3]]", "[1.5]"] {
            assert!(serde_json::from_str::<Vec<StoredCheck>>(wrong).is_err(), "{wrong}");
        }
        for wrong in ["[4096]", "[65]", "[[48,[1]]]", "[[17,[\"sideways\",null]]]"] {
            let stored: Vec<StoredCheck> = serde_json::from_str(wrong).unwrap();
            assert!(rebuild(stored, || Ok::<_, String>(record.clone())).is_err(), "{wrong}");
        }
        // Checks stored whole, as before, need no record.
        for whole in [serde_json::to_string(&Compact(&v.checks)).unwrap(), serde_json::to_string(&v.checks).unwrap()] {
            let stored: Vec<StoredCheck> = serde_json::from_str(&whole).unwrap();
            assert_eq!(rebuild(stored, || Err("not asked")).unwrap(), v.checks);
        }
    }
}
