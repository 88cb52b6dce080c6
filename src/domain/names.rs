//! Names that arrive from outside: parsed once at the edge, trusted afterwards.

use std::fmt;

use chrono::NaiveDate;

/// Why a name did not parse; the HTTP layer adds which field it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError(pub String);

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

const MAX_NAME_LEN: usize = 200;

/// Characters a reader cannot see or that reorder what is seen: controls,
/// bidirectional overrides and isolates, zero-width and other invisible
/// format characters. `dt=2026-08-24\u{200b}` would otherwise be a
/// look-alike of a real partition.
pub fn is_hidden_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// `.` and `..` name a directory, not a table or a partition.
fn is_dot_name(s: &str) -> bool {
    s == "." || s == ".."
}

fn parse_name(kind: &str, s: &str, extra: &[char]) -> Result<String, NameError> {
    if s.is_empty() {
        return Err(NameError(format!("{kind} must not be empty")));
    }
    if is_dot_name(s) {
        return Err(NameError(format!("{kind} {s:?} is a directory name, not a {kind} name")));
    }
    if s.len() > MAX_NAME_LEN {
        return Err(NameError(format!("{kind} is longer than {MAX_NAME_LEN} characters")));
    }
    if let Some(bad) = s.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || extra.contains(c))) {
        let allowed: String = extra.iter().collect();
        return Err(NameError(format!("{kind} contains {bad:?}; allowed are letters, digits, '_' and {allowed:?}")));
    }
    Ok(s.to_owned())
}

/// The producing task, e.g. an Airflow `dag_id.task_id`: `[A-Za-z0-9_.-]{1,200}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskName(String);

impl TaskName {
    pub fn parse(s: &str) -> Result<Self, NameError> {
        parse_name("task", s, &['.', '-']).map(Self)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A target table, e.g. `dws.order_detail`: `[A-Za-z0-9_.:-]{1,200}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DatasetName(String);

impl DatasetName {
    pub fn parse(s: &str) -> Result<Self, NameError> {
        parse_name("dataset", s, &['.', ':', '-']).map(Self)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DatasetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The data date of a batch, strictly `YYYY-MM-DD`.
pub fn parse_dt(s: &str) -> Result<NaiveDate, NameError> {
    let ok_shape = s.len() == 10
        && s.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
    if !ok_shape {
        return Err(NameError(format!("{s:?} is not a date in the form YYYY-MM-DD")));
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| NameError(format!("{s:?} is not a valid calendar date")))
}

const MAX_SPEC_LEN: usize = 1000;

/// A Hive-style partition spec, `k=v[/k=v…]`, e.g. `dt=2026-08-24/region=cn`.
///
/// Keys are `[A-Za-z0-9_]+`, values are non-empty and hold no `/`, `\\`, `=`,
/// white space, control, bidirectional or zero-width characters
/// ([`is_hidden_char`]), and are not `.` or `..`; a wildcard `*` is not a
/// partition. Keys may not
/// repeat. The spec is kept exactly as written: two specs name the same
/// partition only when they are equal byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionSpec {
    raw: String,
}

impl PartitionSpec {
    pub fn parse(s: &str) -> Result<Self, NameError> {
        if s.is_empty() {
            return Err(NameError("partition spec must not be empty".into()));
        }
        if s.len() > MAX_SPEC_LEN {
            return Err(NameError(format!("partition spec is longer than {MAX_SPEC_LEN} characters")));
        }
        let mut keys: Vec<&str> = Vec::new();
        for part in s.split('/') {
            let Some((k, v)) = part.split_once('=') else {
                return Err(NameError(format!("partition spec {s:?}: {part:?} is not of the form key=value")));
            };
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(NameError(format!("partition spec {s:?}: key {k:?} must be letters, digits and '_'")));
            }
            if v.is_empty() {
                return Err(NameError(format!("partition spec {s:?}: key {k:?} has no value")));
            }
            if v.contains('*') {
                return Err(NameError(format!("partition spec {s:?}: {k}={v} is a wildcard, not a partition")));
            }
            if let Some(bad) = v.chars().find(|c| *c == '=' || c.is_whitespace() || is_hidden_char(*c)) {
                return Err(NameError(format!(
                    "partition spec {s:?}: value of {k:?} contains {bad:?} (no white space, control, bidirectional \
                     or invisible characters)"
                )));
            }
            // A path separator or a directory name would let a value climb out
            // of its partition's directory (`..`, `..\..\x`).
            if v.contains('\\') {
                return Err(NameError(format!("partition spec {s:?}: value of {k:?} contains a backslash")));
            }
            if is_dot_name(v) {
                return Err(NameError(format!("partition spec {s:?}: value of {k:?} is the directory name {v:?}")));
            }
            if keys.contains(&k) {
                return Err(NameError(format!("partition spec {s:?}: key {k:?} repeats")));
            }
            keys.push(k);
        }
        Ok(Self { raw: s.to_owned() })
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }

    fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.raw.split('/').filter_map(|p| p.split_once('='))
    }

    /// The spec without its date component: what stays equal from one data date
    /// to the next (`dt=2026-08-24/region=cn` → `region=cn`). The date
    /// component is the key `dt`, or any key whose value is the batch's data
    /// date written `YYYY-MM-DD` or `YYYYMMDD`. Volume baselines compare
    /// partitions with equal keys.
    pub fn baseline_key(&self, dt: NaiveDate) -> String {
        let dashed = dt.format("%Y-%m-%d").to_string();
        let compact = dt.format("%Y%m%d").to_string();
        self.pairs()
            .filter(|(k, v)| *k != "dt" && *v != dashed && *v != compact)
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("/")
    }
}

impl fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// `{task}-{YYYYMMDD}-{NNN}`: which task, which data date, which attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchId {
    pub task: TaskName,
    pub dt: NaiveDate,
    pub seq: i64,
}

impl BatchId {
    pub fn new(task: TaskName, dt: NaiveDate, seq: i64) -> Self {
        Self { task, dt, seq }
    }

    /// Reads a batch id back. The task is everything before the last two
    /// dashes, so a task name that itself contains dashes still parses.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        let bad = || NameError(format!("{s:?} is not a batch id of the form {{task}}-{{YYYYMMDD}}-{{NNN}}"));
        let (rest, seq) = s.rsplit_once('-').ok_or_else(bad)?;
        let (task, date) = rest.rsplit_once('-').ok_or_else(bad)?;
        if seq.len() < 3 || !seq.bytes().all(|b| b.is_ascii_digit()) || date.len() != 8 {
            return Err(bad());
        }
        let seq: i64 = seq.parse().map_err(|_| bad())?;
        let dt = NaiveDate::parse_from_str(date, "%Y%m%d").map_err(|_| bad())?;
        let task = TaskName::parse(task).map_err(|_| bad())?;
        if seq < 1 {
            return Err(bad());
        }
        Ok(Self { task, dt, seq })
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{:03}", self.task.as_str(), self.dt.format("%Y%m%d"), self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        parse_dt(s).unwrap()
    }

    #[test]
    fn task_and_dataset_names_take_their_own_alphabets() {
        assert!(TaskName::parse("dws_order_detail_daily.load-1").is_ok());
        assert!(TaskName::parse("a:b").is_err());
        assert!(DatasetName::parse("hive:dws.order_detail").is_ok());
        assert!(DatasetName::parse("dws order").is_err());
        assert!(DatasetName::parse("").is_err());
        assert!(TaskName::parse(&"x".repeat(201)).is_err());
        assert!(TaskName::parse(&"x".repeat(200)).is_ok());
        for dots in [".", ".."] {
            assert!(TaskName::parse(dots).is_err(), "{dots}");
            assert!(DatasetName::parse(dots).is_err(), "{dots}");
        }
        assert!(TaskName::parse("a..b").is_ok());
        for hidden in ["a\u{200b}", "a\u{202e}b", "\u{feff}a", "a\u{0}"] {
            assert!(TaskName::parse(hidden).is_err(), "{hidden:?}");
            assert!(DatasetName::parse(hidden).is_err(), "{hidden:?}");
        }
    }

    #[test]
    fn dt_must_be_a_real_calendar_date() {
        assert_eq!(d("2026-08-24").to_string(), "2026-08-24");
        for bad in ["2026-8-24", "20260824", "2026-02-30", "2026-08-24T00:00", ""] {
            assert!(parse_dt(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn partition_specs_are_hive_style() {
        for ok in ["dt=2026-08-24", "dt=2026-08-24/region=cn", "dt=2026-08-24/hh=01", "v=1.5", "v=...", "city=Zürich"]
        {
            assert_eq!(PartitionSpec::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            "dt",
            "dt=",
            "=x",
            "dt=2026-08-24/",
            "dt=*",
            "dt=2026-08-24/region=*",
            "dt=a=b",
            "dt=1/dt=2",
            "d t=1",
            "dt=a b",
            "dt=2026-08-24//region=cn",
            "dt=..",
            "dt=.",
            "dt=2026-08-24/region=..",
            "dt=..\\..\\x",
            "dt=2026-08-24\u{200b}",
            "dt=2026-08-24\u{200c}",
            "dt=2026-08-24\u{200d}",
            "dt=2026-08-24\u{2060}",
            "dt=\u{feff}2026-08-24",
            "dt=2026-08-24/region=\u{202e}nc",
            "dt=2026-08-24/region=c\u{202a}n",
            "dt=2026-08-24/region=c\u{2066}n\u{2069}",
            "dt=2026-08-24/region=cn\u{0}",
            "dt=2026-08-24/region=cn\u{1b}",
        ] {
            assert!(PartitionSpec::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn baseline_key_drops_the_date_component() {
        let dt = d("2026-08-24");
        let key = |s: &str| PartitionSpec::parse(s).unwrap().baseline_key(dt);
        assert_eq!(key("dt=2026-08-24"), "");
        assert_eq!(key("dt=2026-08-24/region=cn"), "region=cn");
        assert_eq!(key("ds=20260824/hh=01"), "hh=01");
        assert_eq!(key("event_date=2026-08-24/region=us"), "region=us");
    }

    #[test]
    fn batch_ids_round_trip_even_with_dashes_in_the_task() {
        let id = BatchId::new(TaskName::parse("load-orders").unwrap(), d("2026-08-24"), 3);
        assert_eq!(id.to_string(), "load-orders-20260824-003");
        assert_eq!(BatchId::parse("load-orders-20260824-003").unwrap(), id);
        let big = BatchId::new(TaskName::parse("t").unwrap(), d("2026-08-24"), 1234);
        assert_eq!(big.to_string(), "t-20260824-1234");
        assert_eq!(BatchId::parse("t-20260824-1234").unwrap(), big);
        for bad in ["t-20260824-01", "t-2026082-001", "-20260824-001", "t-20260230-001", "t-20260824-000", "nope"] {
            assert!(BatchId::parse(bad).is_err(), "{bad}");
        }
    }
}
