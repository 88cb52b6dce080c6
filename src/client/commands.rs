//! The `batchgate batch …` commands: one request each, the answer printed for
//! a shell script (the batch id or a summary on stdout, diagnostics on
//! stderr), and an [`Exit`] status that says how it went.

use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::{
    BatchRecord, Client, ClientError, CommitRequest, Exit, FailRequest, PartitionStats, SourceStats, StartRequest,
    WrittenRequest,
};
use crate::domain::batch::BatchState;

/// How a successful answer is printed on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A line for people (for `start`, the bare batch id).
    Text,
    /// The service's answer as it came, one JSON document.
    Json,
}

/// `batch start`: prints the new batch's id, and the residue of earlier
/// attempts to stderr.
pub async fn start(client: &Client, req: &StartRequest, idempotency_key: Option<&str>, output: Output) -> Exit {
    let answer = match client.start_batch(req, idempotency_key).await {
        Ok(a) => a,
        Err(e) => return failed(&format!("cannot start a batch of {} for {}", req.task, req.dt), &e),
    };
    let started = &answer.value;
    if started.state != BatchState::Running {
        eprintln!("batchgate: Idempotency-Key replay: batch {} is already {}", started.batch_id, started.state);
    }
    for r in &started.residue {
        eprintln!(
            "batchgate: residue: batch {} ({}) may have left rows in {}; delete them before writing",
            r.batch_id,
            r.state,
            r.partitions.join(", ")
        );
    }
    print(output, &answer.body, || started.batch_id.clone());
    Exit::Success
}

/// `batch heartbeat`: extends the lease.
pub async fn heartbeat(client: &Client, batch_id: &str, output: Output) -> Exit {
    match client.heartbeat(batch_id).await {
        Ok(answer) => {
            print(output, &answer.body, || {
                format!("batch {} leased until {}", answer.value.batch_id, answer.value.lease_expires_at)
            });
            Exit::Success
        }
        Err(e) => failed(&format!("cannot heartbeat batch {batch_id}"), &e),
    }
}

/// `batch commit`: exit 0 when the batch published; 3, with the failed
/// checks on stderr, when it was rejected.
pub async fn commit(client: &Client, batch_id: &str, req: &CommitRequest, output: Output) -> Exit {
    let answer = match client.commit(batch_id, req).await {
        Ok(a) => a,
        Err(e) => return failed(&format!("cannot commit batch {batch_id}"), &e),
    };
    let record = &answer.value;
    for c in record.checks.iter().filter(|c| c.status == "warn") {
        eprintln!("batchgate: warning: {}", describe_check(c));
    }
    if record.state == BatchState::Published {
        print(output, &answer.body, || published(record));
        return Exit::Success;
    }
    if output == Output::Json {
        println!("{}", answer.body);
    }
    let failed: Vec<_> = record.checks.iter().filter(|c| c.status == "fail").collect();
    eprintln!(
        "batchgate: batch {} {}: {} check{} failed",
        record.batch_id,
        record.state,
        failed.len(),
        if failed.len() == 1 { "" } else { "s" }
    );
    for c in failed {
        eprintln!("  {}", describe_check(c));
    }
    Exit::Refused
}

/// `batch written`: reports the rows written so far.
pub async fn written(client: &Client, batch_id: &str, req: &WrittenRequest, output: Output) -> Exit {
    match client.written(batch_id, req).await {
        Ok(answer) => {
            print(output, &answer.body, || {
                let parts: Vec<String> =
                    req.partitions.iter().map(|p| format!("{} {} rows", p.partition, p.rows_written)).collect();
                format!("batch {batch_id} wrote {}", parts.join(", "))
            });
            Exit::Success
        }
        Err(e) => failed(&format!("cannot report rows written by batch {batch_id}"), &e),
    }
}

/// `batch fail`: reports the failure.
pub async fn fail(client: &Client, batch_id: &str, req: &FailRequest, output: Output) -> Exit {
    match client.fail(batch_id, req).await {
        Ok(answer) => {
            print(output, &answer.body, || {
                let record = &answer.value;
                match &record.failure {
                    Some(f) => format!(
                        "batch {} failed at {} ({})",
                        record.batch_id,
                        f.stage,
                        f.category.map_or("unknown", |c| c.as_str())
                    ),
                    None => format!("batch {} is {}", record.batch_id, record.state),
                }
            });
            Exit::Success
        }
        Err(e) => failed(&format!("cannot report batch {batch_id} as failed"), &e),
    }
}

/// The partition statistics of a commit, as the `--partition-stats` file
/// holds them.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub partitions: Vec<PartitionStats>,
    pub source: Option<SourceStats>,
}

/// The object form of the statistics: the commit body without `marker`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvidenceObject {
    partitions: Vec<PartitionStats>,
    #[serde(default)]
    source: Option<SourceStats>,
}

impl Evidence {
    /// Parses a JSON array of partition statistics, or an object with
    /// `partitions` and an optional `source`. The error names the field at
    /// fault (`partitions[0].rows_written`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let field = |e: serde_path_to_error::Error<serde_json::Error>| format!("{}: {}", e.path(), e.inner());
        match value {
            Value::Array(_) => Ok(Self {
                partitions: serde_path_to_error::deserialize(value).map_err(field)?,
                source: None,
            }),
            Value::Object(_) => {
                let o: EvidenceObject = serde_path_to_error::deserialize(value).map_err(field)?;
                Ok(Self {
                    partitions: o.partitions,
                    source: o.source,
                })
            }
            _ => Err(
                "expected a JSON array of partition statistics, or an object with \"partitions\" and an optional \"source\"".into(),
            ),
        }
    }

    /// Reads and parses `path`, or standard input for `-`.
    pub async fn read(path: &str) -> Result<Self, String> {
        let (name, text) = if path == "-" {
            let mut text = String::new();
            tokio::io::stdin()
                .read_to_string(&mut text)
                .await
                .map_err(|e| format!("cannot read partition stats from standard input: {e}"))?;
            ("standard input", text)
        } else {
            let text = tokio::fs::read_to_string(path)
                .await
                .map_err(|e| format!("cannot read partition stats from {path}: {e}"))?;
            (path, text)
        };
        Self::parse(&text).map_err(|e| format!("partition stats in {name}: {e}"))
    }
}

/// Prints the answer: its JSON, or the text line `text` makes.
pub(super) fn print(output: Output, body: &Value, text: impl FnOnce() -> String) {
    match output {
        Output::Json => println!("{body}"),
        Output::Text => println!("{}", text()),
    }
}

/// Reports a failed request on stderr and picks the exit status.
pub(super) fn failed(what: &str, e: &ClientError) -> Exit {
    eprintln!("batchgate: {what}: {e}");
    Exit::for_error(e)
}

fn published(record: &BatchRecord) -> String {
    let parts: Vec<String> = record
        .partitions
        .iter()
        .map(|p| {
            let version = p.version.map_or("-".into(), |v| v.to_string());
            let rows = p.row_count.map_or("?".into(), |r| r.to_string());
            format!("{} version {version} ({rows} rows)", p.partition)
        })
        .collect();
    format!("batch {} published: {}", record.batch_id, parts.join(", "))
}

/// `unique_keys dt=2026-08-24: observed 97, expected 100: 3 duplicate keys`.
pub(super) fn describe_check(c: &super::CheckResult) -> String {
    let place = c.partition.as_ref().map(|p| format!(" {p}")).unwrap_or_default();
    format!("{}{place}: observed {}, expected {}: {}", c.name, c.observed, c.expected, c.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_come_as_an_array_or_as_the_commit_body_without_marker() {
        let list = Evidence::parse(r#"[{"partition": "dt=1", "rows_written": 5, "row_count": 5}]"#).unwrap();
        assert_eq!(list.partitions[0].row_count, 5);
        assert_eq!(list.source, None);
        let object = Evidence::parse(
            r#"{"partitions": [{"partition": "dt=1", "rows_written": 5, "row_count": 5}],
                "source": {"row_count": 5, "metrics": {"amount": 1.5}}}"#,
        )
        .unwrap();
        assert_eq!(object.partitions, list.partitions);
        assert_eq!(object.source.unwrap().metrics["amount"], 1.5);
    }

    #[test]
    fn bad_statistics_name_the_field_at_fault() {
        let e = Evidence::parse(r#"[{"partition": "dt=1", "rows_written": -1, "row_count": 5}]"#).unwrap_err();
        assert!(e.starts_with("[0].rows_written: "), "{e}");
        let e = Evidence::parse(r#"{"partitions": [{"partiton": "dt=1", "rows_written": 1, "row_count": 1}]}"#)
            .unwrap_err();
        assert!(e.contains("partiton"), "{e}");
        let e = Evidence::parse(r#"{"partitions": [], "marker": "m"}"#).unwrap_err();
        assert!(e.contains("marker"), "{e}");
        assert!(Evidence::parse("42").unwrap_err().contains("JSON array"));
        assert!(Evidence::parse("{").unwrap_err().starts_with("not valid JSON"));
    }
}
