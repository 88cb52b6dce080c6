//! Is it safe to retry, and what must be cleaned first? The answer depends on
//! how the dataset is written and on the residue earlier attempts left.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::policy::WriteMode;

/// The `retry` object of a start response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetryAdvice {
    pub safe: bool,
    /// What to clean before writing: `{}` when nothing.
    pub cleanup: Cleanup,
    pub reason: String,
}

/// What to clean before writing: `{}` when nothing needs cleaning.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Cleanup {
    /// The residue batches whose rows to delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_ids: Option<Vec<String>>,
    /// `DELETE FROM <dataset> WHERE batch_id IN (...)`, ready to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
}

/// Why a start is refused outright.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    pub details: Value,
}

/// The statement that removes the rows residue batches wrote.
pub fn delete_statement(dataset: &str, batch_ids: &[String]) -> String {
    let ids: Vec<String> = batch_ids.iter().map(|b| format!("'{}'", b.replace('\'', "''"))).collect();
    format!("DELETE FROM {dataset} WHERE batch_id IN ({})", ids.join(", "))
}

/// Decides whether a start may go ahead over `residue` (earlier batches that
/// may have left rows), and what the task must do first.
pub fn advise(
    mode: WriteMode,
    dataset: &str,
    has_unique_key: bool,
    residue: &[String],
    cleaned: &[String],
) -> Result<RetryAdvice, Refusal> {
    let cleanup = || Cleanup { batch_ids: Some(residue.to_vec()), statement: Some(delete_statement(dataset, residue)) };
    match mode {
        WriteMode::OverwritePartition => Ok(RetryAdvice {
            safe: true,
            cleanup: Cleanup::default(),
            reason: "overwrite_partition: the rewrite replaces every earlier row of the partitions".into(),
        }),
        WriteMode::DeleteInsertByBatch if residue.is_empty() => {
            Ok(RetryAdvice { safe: true, cleanup: Cleanup::default(), reason: "delete_insert_by_batch: no earlier attempt left rows".into() })
        }
        WriteMode::DeleteInsertByBatch => Ok(RetryAdvice {
            safe: true,
            cleanup: cleanup(),
            reason: format!("delete_insert_by_batch: safe after deleting the rows of {} earlier attempt(s)", residue.len()),
        }),
        WriteMode::Merge if has_unique_key => {
            Ok(RetryAdvice { safe: true, cleanup: Cleanup::default(), reason: "merge on the unique key: re-merging the same rows is idempotent".into() })
        }
        WriteMode::Merge if residue.is_empty() => Ok(RetryAdvice {
            safe: false,
            cleanup: Cleanup::default(),
            reason: "merge without a unique key: a retry after a partial write would duplicate rows".into(),
        }),
        WriteMode::Merge => Err(Refusal {
            code: "unsafe_retry",
            message: "the dataset merges without a unique key, so retrying over an earlier attempt's rows would duplicate them; set unique_key or clean the partitions by hand".into(),
            details: json!({"residue": residue, "write_mode": mode}),
        }),
        WriteMode::Append => {
            let missing: Vec<&String> = residue.iter().filter(|r| !cleaned.contains(r)).collect();
            if missing.is_empty() {
                let reason = if residue.is_empty() {
                    "append: no earlier attempt left rows".to_owned()
                } else {
                    format!("append: the rows of {} earlier attempt(s) were cleaned (acknowledged)", residue.len())
                };
                Ok(RetryAdvice { safe: true, cleanup: Cleanup::default(), reason })
            } else {
                Err(Refusal {
                    code: "cleanup_required",
                    message: format!(
                        "earlier attempts {} may have appended rows; delete them, then start again with cleaned_batch_ids naming every one",
                        missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                    details: json!({"residue": residue, "not_cleaned": missing, "statement": delete_statement(dataset, residue)}),
                })
            }
        }
    }
}

/// The inputs of [`advise`] that a start's stored advice does not repeat:
/// the write mode and whether the dataset has a unique key. A stored start
/// keeps its residue and the ids the task said it cleaned, so with these
/// the advice is rebuilt instead of kept as a second copy of its text.
const MODES: [WriteMode; 4] =
    [WriteMode::OverwritePartition, WriteMode::DeleteInsertByBatch, WriteMode::Merge, WriteMode::Append];

/// The number that stands for `advice` in a stored start: the first inputs
/// ([`MODES`] index times two, plus one with a unique key) from which
/// [`rebuild`] makes exactly `advice` again. `None` when none does (a cleanup
/// statement names its dataset, which the number does not carry): then the
/// advice is stored whole.
pub fn compact(advice: &RetryAdvice, residue: &[String], cleaned: &[String]) -> Option<u8> {
    (0..2 * MODES.len() as u8).find(|&code| rebuild(code, residue, cleaned).as_ref() == Some(advice))
}

/// The advice [`compact`] stored as `code`, from the start's residue and
/// cleaned ids; `None` for a code that stands for no inputs, or for inputs
/// that refused the start (no advice was ever stored for them).
pub fn rebuild(code: u8, residue: &[String], cleaned: &[String]) -> Option<RetryAdvice> {
    let mode = *MODES.get(usize::from(code / 2))?;
    // The dataset's name only appears in a cleanup statement, and an advice
    // with one is never stored as a number.
    advise(mode, "", code % 2 == 1, residue, cleaned).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn overwrite_is_always_safe() {
        let a = advise(WriteMode::OverwritePartition, "d", false, &ids(&["b-1"]), &[]).unwrap();
        assert!(a.safe);
        assert_eq!(a.cleanup, Cleanup::default());
        assert_eq!(serde_json::to_string(&a.cleanup).unwrap(), "{}");
    }

    #[test]
    fn delete_insert_lists_the_cleanup_statement() {
        let a =
            advise(WriteMode::DeleteInsertByBatch, "dws.x", false, &ids(&["t-20260824-002", "t-20260824-003"]), &[])
                .unwrap();
        assert!(a.safe);
        assert_eq!(
            a.cleanup.statement.as_deref().unwrap(),
            "DELETE FROM dws.x WHERE batch_id IN ('t-20260824-002', 't-20260824-003')"
        );
    }

    #[test]
    fn merge_needs_a_unique_key() {
        assert!(advise(WriteMode::Merge, "d", true, &ids(&["b"]), &[]).unwrap().safe);
        assert!(!advise(WriteMode::Merge, "d", false, &[], &[]).unwrap().safe);
        assert_eq!(advise(WriteMode::Merge, "d", false, &ids(&["b"]), &[]).unwrap_err().code, "unsafe_retry");
    }

    #[test]
    fn append_requires_every_residue_batch_to_be_acknowledged() {
        let residue = ids(&["b1", "b2"]);
        assert_eq!(advise(WriteMode::Append, "d", true, &residue, &ids(&["b1"])).unwrap_err().code, "cleanup_required");
        assert!(advise(WriteMode::Append, "d", true, &residue, &residue).unwrap().safe);
        assert!(advise(WriteMode::Append, "d", true, &[], &[]).unwrap().safe);
    }
    #[test]
    fn every_advice_without_a_statement_is_rebuilt_from_its_number() {
        let (none, one, two) = (ids(&[]), ids(&["t-1"]), ids(&["t-1", "t-2"]));
        let cases = [(&none, &none), (&one, &none), (&two, &one), (&two, &two), (&one, &one)];
        let mut numbered = 0;
        for mode in MODES {
            for unique_key in [false, true] {
                for (residue, cleaned) in cases {
                    let Ok(advice) = advise(mode, "dws.x", unique_key, residue, cleaned) else { continue };
                    match compact(&advice, residue, cleaned) {
                        Some(code) => {
                            assert_eq!(rebuild(code, residue, cleaned).as_ref(), Some(&advice), "{mode} {unique_key}");
                            numbered += 1;
                        }
                        None => assert!(advice.cleanup.statement.is_some(), "{advice:?} was not numbered"),
                    }
                }
            }
        }
        assert!(numbered > 20, "only {numbered} advices numbered");
    }

    #[test]
    fn an_advice_naming_its_dataset_is_not_numbered() {
        let residue = ids(&["t-1"]);
        let advice = advise(WriteMode::DeleteInsertByBatch, "dws.x", false, &residue, &[]).unwrap();
        assert_eq!(compact(&advice, &residue, &[]), None);
        assert_eq!(rebuild(2 * MODES.len() as u8, &[], &[]), None, "a number past the modes stands for nothing");
    }
}
