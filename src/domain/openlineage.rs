//! OpenLineage `RunEvent`s (what Airflow's and Spark's OpenLineage
//! integrations post to `OPENLINEAGE_URL`) turned into registry requests.
//!
//! A run's `START` starts one batch per output dataset, its `COMPLETE`
//! commits them with the evidence the event's facets carry, and its `FAIL` or
//! `ABORT` fails them. Reading is lenient: an OpenLineage client does not read
//! the answer, so whatever is missing or unusable becomes a warning, never an
//! error. Everything here is pure; a dataset's policy (timezone, unique key)
//! comes in as an argument.

mod wire;

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use serde_json::{json, Value};

use super::batch::{FailCategory, FailStage};
use super::checks::{CommitEvidence, PartitionEvidence};
use super::names::{DatasetName, PartitionSpec, TaskName};
use super::policy::DatasetPolicy;

/// Longest failure message taken from an `errorMessage` facet; the stored
/// event keeps all of it, stack trace included.
const MAX_MESSAGE_CHARS: usize = 2000;

/// `RunEvent.eventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Start,
    Running,
    Complete,
    Abort,
    Fail,
    Other,
}

impl EventType {
    const ALL: [(&'static str, EventType); 6] = [
        ("START", EventType::Start),
        ("RUNNING", EventType::Running),
        ("COMPLETE", EventType::Complete),
        ("ABORT", EventType::Abort),
        ("FAIL", EventType::Fail),
        ("OTHER", EventType::Other),
    ];

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(name, _)| *name == s).map(|(_, t)| *t)
    }

    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, t)| *t == self).map_or("OTHER", |(name, _)| name)
    }
}

/// A `nominalTime`: an instant with an offset, as the spec requires, or a
/// wall-clock time without one, read in the dataset's timezone.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Moment {
    Aware(DateTime<FixedOffset>),
    Local(NaiveDateTime),
}

impl Moment {
    fn parse(s: &str) -> Option<Self> {
        DateTime::parse_from_rfc3339(s)
            .map(Moment::Aware)
            .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").map(Moment::Local))
            .ok()
    }

    fn date_in(self, tz: Tz) -> NaiveDate {
        match self {
            Moment::Aware(t) => t.with_timezone(&tz).date_naive(),
            Moment::Local(t) => t.date(),
        }
    }

    /// `None` for a wall-clock time that `tz` skips (a DST gap).
    fn in_tz(self, tz: Tz) -> Option<DateTime<Tz>> {
        match self {
            Moment::Aware(t) => Some(t.with_timezone(&tz)),
            Moment::Local(t) => tz.from_local_datetime(&t).earliest(),
        }
    }
}

/// `job.namespace` and `job.name` as sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Job {
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// What the intake reads from one event.
#[derive(Debug, Clone)]
pub struct RunEvent {
    /// The event as received, stored whole.
    pub body: Value,
    /// `eventType` as sent.
    pub event_type: Option<String>,
    /// `eventType`, when it is one the spec defines.
    pub kind: Option<EventType>,
    pub run_id: Option<String>,
    pub job: Job,
    nominal_start: Option<Moment>,
    nominal_end: Option<Moment>,
    error_message: Option<String>,
    /// The input datasets the intake can name: a START records them as the
    /// batch's inputs.
    pub inputs: Vec<Input>,
    /// The output datasets the intake can name.
    pub outputs: Vec<Output>,
    /// What could not be read, in words for whoever runs the producer.
    pub warnings: Vec<String>,
}

/// One input dataset of an event.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// The dataset in the registry, named as outputs are.
    pub dataset: DatasetName,
    /// The partitions its subset facet names, when it names some; else the
    /// run read `dt=<dt>`.
    partitions: Option<Vec<PartitionSpec>>,
}

impl Input {
    fn read(i: wire::InputDataset, warnings: &mut Vec<String>) -> Result<Self, String> {
        let name = i.name.filter(|n| !n.is_empty()).ok_or("it has no name")?;
        let facets = i.facets.unwrap_or_default();
        let dataset = dataset_name(&name, facets.symlinks)?;
        let partitions = match i.input_facets.and_then(|f| f.subset) {
            Some(subset) => subset_partitions(&dataset, subset, warnings)?,
            None => None,
        };
        Ok(Self { dataset, partitions })
    }

    /// The partitions read for data date `dt`: the subset facet's, else `dt=<dt>`.
    pub fn partitions(&self, dt: NaiveDate) -> Result<Vec<PartitionSpec>, String> {
        match &self.partitions {
            Some(p) => Ok(p.clone()),
            None => Ok(vec![PartitionSpec::parse(&format!("dt={dt}")).map_err(|e| e.to_string())?]),
        }
    }
}

/// One output dataset of an event.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The dataset in the registry: the output's `name`, or, for a table
    /// named by its location (as Spark does), its `TABLE` symlink.
    pub dataset: DatasetName,
    pub namespace: Option<String>,
    /// `name` as sent.
    pub name: String,
    /// `outputStatistics.rowCount`: the rows this run wrote.
    rows_written: Option<i64>,
    /// `dataQualityMetrics`: the dataset as measured after the write.
    quality: Option<Quality>,
    /// The partitions the subset facet names, when it names some.
    partitions: Option<Vec<PartitionSpec>>,
}

#[derive(Debug, Clone, PartialEq)]
struct Quality {
    row_count: Option<i64>,
    columns: BTreeMap<String, wire::ColumnMetrics>,
}

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl RunEvent {
    /// Reads an event. Only a body that is not JSON at all is an error.
    pub fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        let body: Value = serde_json::from_slice(bytes)?;
        let mut warnings = Vec::new();
        let text =
            |pointer: &str| body.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let event_type = text("/eventType");
        let kind = event_type.as_deref().and_then(EventType::parse);
        match &event_type {
            None => warnings.push("no eventType: not a RunEvent (a DatasetEvent or JobEvent changes no batch)".into()),
            Some(t) if kind.is_none() => {
                warnings.push(format!("eventType {t:?} is not one of START, RUNNING, COMPLETE, ABORT, FAIL, OTHER"))
            }
            Some(_) => {}
        }
        let run_id = text("/run/runId");
        if run_id.is_none() {
            warnings.push("run.runId is missing: the event cannot be tied to a batch".into());
        }
        let job = Job { namespace: text("/job/namespace"), name: text("/job/name") };

        // The facets are read typed, from the bytes: a Value would lose the
        // order of a partition's dimensions.
        let parts: wire::Body = if body.is_object() {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            serde_path_to_error::deserialize(&mut de).unwrap_or_else(|e| {
                warnings.push(format!(
                    "{} does not follow the RunEvent schema ({}); the run facets and outputs are ignored",
                    e.path(),
                    e.inner()
                ));
                wire::Body::default()
            })
        } else {
            warnings.push("the event is not a JSON object".into());
            wire::Body::default()
        };
        let facets = parts.run.and_then(|r| r.facets).unwrap_or_default();
        let nominal = facets.nominal_time.unwrap_or_default();
        let mut moment = |field: &str, value: Option<String>| {
            let value = value?;
            let parsed = Moment::parse(&value);
            if parsed.is_none() {
                warnings.push(format!("run.facets.nominalTime.{field} {value:?} is not an ISO 8601 date-time"));
            }
            parsed
        };
        let nominal_start = moment("nominalStartTime", nominal.nominal_start_time);
        let nominal_end = moment("nominalEndTime", nominal.nominal_end_time);

        let mut inputs = Vec::new();
        for (i, o) in parts.inputs.unwrap_or_default().into_iter().enumerate() {
            match Input::read(o, &mut warnings) {
                Ok(input) => inputs.push(input),
                Err(e) => warnings.push(format!("inputs[{i}] is not recorded as an input: {e}")),
            }
        }
        let mut outputs = Vec::new();
        for (i, o) in parts.outputs.unwrap_or_default().into_iter().enumerate() {
            match Output::read(o, &mut warnings) {
                Ok(out) => outputs.push(out),
                Err(e) => warnings.push(format!("outputs[{i}] is ignored: {e}")),
            }
        }

        Ok(Self {
            body,
            event_type,
            kind,
            run_id,
            job,
            nominal_start,
            nominal_end,
            error_message: facets.error_message.and_then(|e| e.message),
            inputs,
            outputs,
            warnings,
        })
    }

    /// The batch a `START` starts for `output`.
    pub fn start_plan(&self, output: &Output, policy: &DatasetPolicy) -> Result<StartPlan, String> {
        let run_id = self.run_id.as_deref().ok_or("run.runId is missing")?;
        let job_name = self.job.name.as_deref().ok_or("job.name is missing: there is no task to start a batch for")?;
        let task = task_name(job_name)?;
        let start =
            self.nominal_start.ok_or("run.facets.nominalTime.nominalStartTime is missing: there is no data date")?;
        let tz: Tz = policy
            .timezone
            .parse()
            .map_err(|_| format!("the dataset's timezone {:?} is not an IANA time zone", policy.timezone))?;
        let dt = start.date_in(tz);
        let partitions = match &output.partitions {
            Some(p) => p.clone(),
            None => vec![PartitionSpec::parse(&format!("dt={dt}")).map_err(|e| e.to_string())?],
        };
        let mut scope = json!({
            "timezone": policy.timezone,
            "openlineage": {
                "run_id": run_id,
                "job": {"namespace": self.job.namespace, "name": job_name},
                "dataset": {"namespace": output.namespace, "name": output.name},
            },
        });
        if let Some(t) = start.in_tz(tz) {
            scope["business_start"] = json!(t.to_rfc3339());
        }
        if let Some(t) = self.nominal_end.and_then(|e| e.in_tz(tz)) {
            scope["business_end"] = json!(t.to_rfc3339());
        }
        // What the run read, less the output itself (a run that reads what it
        // rewrites is not its own upstream).
        let mut inputs = Vec::new();
        for input in self.inputs.iter().filter(|i| i.dataset != output.dataset) {
            for p in input.partitions(dt)? {
                let pair = (input.dataset.to_string(), p.as_str().to_owned());
                if !inputs.contains(&pair) {
                    inputs.push(pair);
                }
            }
        }
        let fingerprint = json!({
            "task": task.as_str(),
            "dataset": output.dataset.as_str(),
            "dt": dt,
            "partitions": partitions.iter().map(PartitionSpec::as_str).collect::<Vec<_>>(),
            "scope": scope,
            "inputs": inputs,
        })
        .to_string();
        Ok(StartPlan {
            task,
            dataset: output.dataset.clone(),
            dt,
            partitions,
            scope,
            run_ref: run_id.to_owned(),
            idempotency_key: idempotency_key(run_id, &output.dataset),
            fingerprint,
            inputs,
        })
    }

    /// The failure a `FAIL` or `ABORT` reports for each of the run's batches.
    /// The stage is `write`: the event does not say how far the run got, so
    /// the partitions must not stay ready on an earlier version that the run
    /// may have overwritten in part.
    pub fn fail_plan(&self) -> FailPlan {
        let message = match &self.error_message {
            Some(m) => m.chars().take(MAX_MESSAGE_CHARS).collect(),
            None => format!(
                "OpenLineage {} event without an errorMessage facet",
                self.kind.map_or("FAIL", EventType::as_str)
            ),
        };
        let (stage, category) = (FailStage::Write, FailCategory::Unknown);
        let fingerprint = json!({"stage": stage, "category": category, "message": message}).to_string();
        FailPlan { stage, category, message, fingerprint }
    }
}

/// The `Idempotency-Key` of the batch a run starts for a dataset.
pub fn idempotency_key(run_id: &str, dataset: &DatasetName) -> String {
    format!("openlineage:{run_id}:{dataset}")
}

/// The task a job runs as: `job.name` with every character outside
/// `[A-Za-z0-9_.-]` replaced by `_`. Airflow's `dag_id.task_id` passes as is.
pub fn task_name(job_name: &str) -> Result<TaskName, String> {
    let sanitised: String = job_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
        .collect();
    TaskName::parse(&sanitised).map_err(|e| format!("job.name {job_name:?} gives no task name: {e}"))
}

/// A batch to start for one output of a `START` event.
#[derive(Debug, Clone, PartialEq)]
pub struct StartPlan {
    pub task: TaskName,
    pub dataset: DatasetName,
    pub dt: NaiveDate,
    pub partitions: Vec<PartitionSpec>,
    /// Recorded on the batch: the business window in the dataset's timezone
    /// and the OpenLineage names the batch comes from.
    pub scope: Value,
    /// `run.runId`, the batch's `run_ref`.
    pub run_ref: String,
    /// `openlineage:<runId>:<dataset>`: a repeated `START` gets the same batch.
    pub idempotency_key: String,
    /// The canonical request: the same key with another request is refused.
    pub fingerprint: String,
    /// `(dataset, partition)` of each input the run read: the batch's lineage.
    pub inputs: Vec<(String, String)>,
}

/// The commit a `COMPLETE` event makes for one output's batch.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitPlan {
    pub evidence: CommitEvidence,
    /// The canonical evidence: the same commit again replays the decision.
    pub fingerprint: String,
    /// Checks the event's facets cannot support, in words.
    pub warnings: Vec<String>,
}

/// The failure a `FAIL` or `ABORT` event reports.
#[derive(Debug, Clone, PartialEq)]
pub struct FailPlan {
    pub stage: FailStage,
    pub category: FailCategory,
    pub message: String,
    pub fingerprint: String,
}

impl Output {
    fn read(o: wire::OutputDataset, warnings: &mut Vec<String>) -> Result<Self, String> {
        let name = o.name.filter(|n| !n.is_empty()).ok_or("it has no name")?;
        let facets = o.facets.unwrap_or_default();
        let output_facets = o.output_facets.unwrap_or_default();
        let dataset = dataset_name(&name, facets.symlinks)?;
        let partitions = match output_facets.subset {
            Some(subset) => subset_partitions(&dataset, subset, warnings)?,
            None => None,
        };
        let quality = facets
            .data_quality_metrics
            .or(output_facets.data_quality_metrics)
            .map(|q| Quality { row_count: q.row_count.map(count), columns: q.column_metrics.unwrap_or_default() });
        Ok(Self {
            dataset,
            namespace: o.namespace,
            name,
            rows_written: output_facets.output_statistics.and_then(|s| s.row_count).map(count),
            quality,
            partitions,
        })
    }

    /// The evidence a `COMPLETE` event gives for this output's batch, which
    /// was started on `declared`.
    ///
    /// `outputStatistics.rowCount` is what the run wrote and
    /// `dataQualityMetrics.rowCount` what the partition holds afterwards;
    /// either stands in for the other when only one is sent. The counts are
    /// the dataset's as a whole, so they prove something only about a batch
    /// of one partition.
    pub fn commit_plan(
        &self,
        run_id: &str,
        declared: &[PartitionSpec],
        policy: &DatasetPolicy,
    ) -> Result<CommitPlan, String> {
        let partitions = self.partitions.as_deref().unwrap_or(declared);
        let [partition] = partitions else {
            return Err(format!(
                "the event's counts cover {} partitions as a whole and cannot be split among them",
                partitions.len()
            ));
        };
        let quality = self.quality.as_ref();
        let measured = quality.and_then(|q| q.row_count);
        let (Some(rows_written), Some(row_count)) = (self.rows_written.or(measured), measured.or(self.rows_written))
        else {
            return Err(
                "neither outputStatistics nor dataQualityMetrics gives a rowCount: there is no evidence to check"
                    .into(),
            );
        };
        let mut warnings = Vec::new();
        let (distinct_keys, null_keys) = key_counts(&policy.unique_key, quality, &mut warnings);
        let metrics: BTreeMap<String, f64> = quality
            .map(|q| q.columns.iter().filter_map(|(column, m)| Some((column.clone(), m.sum?))).collect())
            .unwrap_or_default();
        let marker = format!("openlineage:{run_id}");
        let fingerprint = json!({
            "marker": marker,
            "partitions": [{"partition": partition.as_str(), "rows_written": rows_written, "row_count": row_count,
                "distinct_keys": distinct_keys, "null_keys": null_keys, "metrics": metrics}],
        })
        .to_string();
        Ok(CommitPlan {
            evidence: CommitEvidence {
                marker,
                partitions: vec![PartitionEvidence {
                    partition: partition.clone(),
                    rows_written,
                    row_count,
                    distinct_keys,
                    null_keys,
                    metrics,
                }],
                source: None,
            },
            fingerprint,
            warnings,
        })
    }
}

fn dataset_name(name: &str, symlinks: Option<wire::Symlinks>) -> Result<DatasetName, String> {
    let err = match DatasetName::parse(name) {
        Ok(d) => return Ok(d),
        Err(e) => e,
    };
    symlinks
        .and_then(|s| s.identifiers)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.kind.as_deref() == Some("TABLE"))
        .find_map(|s| DatasetName::parse(s.name.as_deref()?).ok())
        .ok_or_else(|| format!("name {name:?} is not a dataset name ({err}) and no TABLE symlink gives one"))
}

/// The partitions a subset facet names: `Ok(None)` when its condition is of
/// a kind that names none, so the batch covers `dt=<dt>`.
fn subset_partitions(
    dataset: &DatasetName,
    subset: wire::Subset,
    warnings: &mut Vec<String>,
) -> Result<Option<Vec<PartitionSpec>>, String> {
    let condition = subset
        .output_condition
        .or(subset.input_condition)
        .or(subset.condition)
        .ok_or("its subset facet has no outputCondition or inputCondition")?;
    if condition.kind.as_deref() != Some("partition") {
        warnings.push(format!(
            "{dataset}: a subset condition of type {:?} names no partitions; the batch covers dt=<dt>",
            condition.kind.as_deref().unwrap_or("")
        ));
        return Ok(None);
    }
    let listed = condition.partitions.unwrap_or_default();
    if listed.is_empty() {
        return Err("its partition subset lists no partitions".into());
    }
    let mut out: Vec<PartitionSpec> = Vec::with_capacity(listed.len());
    for (j, p) in listed.into_iter().enumerate() {
        let spec = partition_spec(p).map_err(|e| format!("subset partition [{j}]: {e}"))?;
        if out.contains(&spec) {
            return Err(format!("subset partition {spec} is listed twice"));
        }
        out.push(spec);
    }
    Ok(Some(out))
}

/// `k1=v1/k2=v2` from a partition's dimensions, in their order; a partition
/// with no dimensions may name itself by its `identifier`.
fn partition_spec(p: wire::SubsetPartition) -> Result<PartitionSpec, String> {
    let dimensions = p.dimensions.map(|d| d.0).unwrap_or_default();
    let raw = if dimensions.is_empty() {
        p.identifier.ok_or("it has neither dimensions nor an identifier")?
    } else {
        let mut pairs = Vec::with_capacity(dimensions.len());
        for (key, value) in dimensions {
            let value = match value {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => return Err(format!("dimension {key:?} has the value {other}, not a scalar")),
            };
            pairs.push(format!("{key}={value}"));
        }
        pairs.join("/")
    };
    PartitionSpec::parse(&raw).map_err(|e| e.to_string())
}

/// `(distinct_keys, null_keys)` from the unique key's column metrics.
fn key_counts(key: &[String], quality: Option<&Quality>, warnings: &mut Vec<String>) -> (Option<i64>, Option<i64>) {
    if key.is_empty() {
        return (None, None);
    }
    let columns: Option<Vec<&wire::ColumnMetrics>> =
        key.iter().map(|k| quality.and_then(|q| q.columns.get(k))).collect();
    let Some(columns) = columns else {
        warnings.push(format!(
            "dataQualityMetrics has no columnMetrics for the unique key {key:?}: unique_keys and null_keys are not checked"
        ));
        return (None, None);
    };
    if let [one] = columns.as_slice() {
        return (one.distinct_count.map(count), one.null_count.map(count));
    }
    warnings.push(format!(
        "per-column distinctCount cannot show duplicates of the composite key {key:?}: unique_keys is not checked"
    ));
    // The largest per-column null count is a lower bound on the rows with a
    // null key part: exact when it is 0, which is all the check asks.
    let nulls: Option<Vec<u64>> = columns.iter().map(|c| c.null_count).collect();
    (None, nulls.map(|n| count(n.into_iter().max().unwrap_or(0))))
}

#[cfg(test)]
mod tests;
