//! `/v1/batches`: start, heartbeat, commit, fail, read, list.

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::DateTime;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::AppJson;
use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::domain::batch::{BatchState, FailCategory, FailStage, Trigger};
use crate::domain::checks::{CommitEvidence, PartitionEvidence, SourceEvidence};
use crate::domain::names::{parse_dt, DatasetName, PartitionSpec, TaskName};
use crate::error::{Error, Result};
use crate::store::{BatchQuery, Decision, FailReport, StartBatch};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/batches", post(start).get(list))
        .route("/v1/batches/{batch_id}", get(read))
        .route("/v1/batches/{batch_id}/heartbeat", post(heartbeat))
        .route("/v1/batches/{batch_id}/written", post(written))
        .route("/v1/batches/{batch_id}/commit", post(commit))
        .route("/v1/batches/{batch_id}/fail", post(fail))
}

const DEFAULT_LEASE_SECONDS: i64 = 3600;
/// A week: longer than any batch should run without a heartbeat.
const MAX_LEASE_SECONDS: i64 = 7 * 24 * 3600;
const MAX_IDEMPOTENCY_KEY: usize = 200;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    task: String,
    dataset: String,
    dt: String,
    partitions: Vec<String>,
    scope: Option<Value>,
    trigger: Option<Trigger>,
    run_ref: Option<String>,
    lease_seconds: Option<i64>,
    /// Residue batches whose rows the task deleted before this start.
    cleaned_batch_ids: Option<Vec<String>>,
    /// Partitions of other datasets the batch reads.
    inputs: Option<Vec<InputRef>>,
    allow_unready_inputs: Option<bool>,
    repair_id: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputRef {
    dataset: String,
    partition: String,
}

fn input_refs(raw: Vec<InputRef>) -> Result<Vec<(String, String)>> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        DatasetName::parse(&r.dataset).map_err(|e| Error::invalid(format!("inputs[{i}].dataset"), e.to_string()))?;
        PartitionSpec::parse(&r.partition)
            .map_err(|e| Error::invalid_code("invalid_partition", format!("inputs[{i}].partition"), e.to_string()))?;
        let pair = (r.dataset, r.partition);
        if out.contains(&pair) {
            return Err(Error::invalid(format!("inputs[{i}]"), "this input is listed twice"));
        }
        out.push(pair);
    }
    Ok(out)
}

fn check_scope(scope: &Value) -> Result<()> {
    let Some(obj) = scope.as_object() else {
        return Err(Error::invalid("scope", "scope must be an object"));
    };
    if let Some(tz) = obj.get("timezone") {
        let ok = tz.as_str().is_some_and(|s| s.parse::<chrono_tz::Tz>().is_ok());
        if !ok {
            return Err(Error::invalid("scope.timezone", format!("scope.timezone {tz} is not an IANA time zone")));
        }
    }
    for key in ["business_start", "business_end"] {
        if let Some(v) = obj.get(key) {
            if v.as_str().is_none_or(|s| DateTime::parse_from_rfc3339(s).is_err()) {
                return Err(Error::invalid(format!("scope.{key}"), format!("scope.{key} {v} is not an RFC 3339 time")));
            }
        }
    }
    Ok(())
}

/// Parses the declared partitions. A wildcard (`dt=*`) is set aside rather
/// than refused here: whether it is a malformed spec or an overwrite that is
/// too wide depends on the dataset's write mode, which the store knows.
/// Concrete partitions, and wildcards by position.
type Declared = (Vec<PartitionSpec>, Vec<(usize, String)>);

fn partition_specs(raw: &[String]) -> Result<Declared> {
    let mut out: Vec<PartitionSpec> = Vec::with_capacity(raw.len());
    let mut wildcards = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        let field = || format!("partitions[{i}]");
        match PartitionSpec::parse(p) {
            Ok(spec) if out.contains(&spec) => {
                return Err(Error::invalid_code(
                    "invalid_partition",
                    field(),
                    format!("partition {p:?} is listed twice"),
                ));
            }
            Ok(spec) => out.push(spec),
            Err(_) if p.contains('*') && PartitionSpec::parse(&p.replace('*', "x")).is_ok() => {
                wildcards.push((i, p.clone()))
            }
            Err(e) => return Err(Error::invalid_code("invalid_partition", field(), e.to_string())),
        }
    }
    Ok((out, wildcards))
}

async fn start(State(app): State<AppState>, headers: HeaderMap, body: AppJson<StartBody>) -> Result<Response> {
    let b = body.value;
    let task = TaskName::parse(&b.task).map_err(|e| Error::invalid("task", e.to_string()))?;
    let dataset = DatasetName::parse(&b.dataset).map_err(|e| Error::invalid("dataset", e.to_string()))?;
    let dt = parse_dt(&b.dt).map_err(|e| Error::invalid("dt", e.to_string()))?;
    if b.partitions.is_empty() {
        return Err(Error::invalid(
            "partitions",
            "partitions must name at least one partition: an overwrite must name what it replaces",
        ));
    }
    let (partitions, wildcard_partitions) = partition_specs(&b.partitions)?;
    if let Some(scope) = &b.scope {
        check_scope(scope)?;
    }
    let lease_seconds = b.lease_seconds.unwrap_or(DEFAULT_LEASE_SECONDS);
    if !(1..=MAX_LEASE_SECONDS).contains(&lease_seconds) {
        return Err(Error::invalid("lease_seconds", format!("lease_seconds must be from 1 to {MAX_LEASE_SECONDS}")));
    }
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => {
            let key = v.to_str().ok().filter(|k| !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY).ok_or_else(|| {
                Error::invalid(
                    "Idempotency-Key",
                    format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"),
                )
            })?;
            Some(key.to_owned())
        }
    };
    let started = app
        .store
        .start_batch(StartBatch {
            task,
            dataset,
            dt,
            partitions,
            scope: b.scope,
            trigger: b.trigger.unwrap_or(Trigger::Scheduled),
            run_ref: b.run_ref,
            lease_seconds,
            idempotency_key,
            fingerprint: body.canonical,
            wildcard_partitions,
            cleaned_batch_ids: b.cleaned_batch_ids.unwrap_or_default(),
            inputs: input_refs(b.inputs.unwrap_or_default())?,
            allow_unready_inputs: b.allow_unready_inputs.unwrap_or(false),
            repair_id: b.repair_id,
        })
        .await?;
    let status = if started.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(started)).into_response())
}

async fn heartbeat(State(app): State<AppState>, Path(batch_id): Path<String>) -> Result<Response> {
    Ok(Json(app.store.heartbeat(&batch_id).await?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenPartition {
    partition: String,
    rows_written: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenBody {
    partitions: Vec<WrittenPartition>,
}

/// The task's write to the target committed (before verification): history
/// can then tell "never wrote" from "wrote, then died".
async fn written(
    State(app): State<AppState>,
    Path(batch_id): Path<String>,
    body: AppJson<WrittenBody>,
) -> Result<Response> {
    let mut parts = Vec::new();
    for (i, p) in body.value.partitions.into_iter().enumerate() {
        let spec = PartitionSpec::parse(&p.partition).map_err(|e| {
            Error::invalid_code("invalid_partition", format!("partitions[{i}].partition"), e.to_string())
        })?;
        parts.push((spec, count(format!("partitions[{i}].rows_written"), p.rows_written)?));
    }
    Ok(Json(app.store.record_written(&batch_id, parts).await?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionStats {
    partition: String,
    rows_written: u64,
    row_count: u64,
    distinct_keys: Option<u64>,
    null_keys: Option<u64>,
    #[serde(default)]
    metrics: BTreeMap<String, f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceStats {
    row_count: Option<u64>,
    #[serde(default)]
    metrics: BTreeMap<String, f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    /// Absent is the same as empty: the `marker_present` check rejects it.
    #[serde(default)]
    marker: String,
    partitions: Vec<PartitionStats>,
    source: Option<SourceStats>,
}

fn count(field: String, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(field, "count is too large"))
}

fn evidence(b: CommitBody) -> Result<CommitEvidence> {
    let mut partitions = Vec::with_capacity(b.partitions.len());
    for (i, p) in b.partitions.into_iter().enumerate() {
        let at = |f: &str| format!("partitions[{i}].{f}");
        let partition = PartitionSpec::parse(&p.partition)
            .map_err(|e| Error::invalid_code("invalid_partition", at("partition"), e.to_string()))?;
        partitions.push(PartitionEvidence {
            partition,
            rows_written: count(at("rows_written"), p.rows_written)?,
            row_count: count(at("row_count"), p.row_count)?,
            distinct_keys: p.distinct_keys.map(|v| count(at("distinct_keys"), v)).transpose()?,
            null_keys: p.null_keys.map(|v| count(at("null_keys"), v)).transpose()?,
            metrics: p.metrics,
        });
    }
    let source = b
        .source
        .map(|s| -> Result<SourceEvidence> {
            Ok(SourceEvidence {
                row_count: s.row_count.map(|v| count("source.row_count".into(), v)).transpose()?,
                metrics: s.metrics,
            })
        })
        .transpose()?;
    Ok(CommitEvidence { marker: b.marker, partitions, source })
}

fn decision(d: Decision) -> Response {
    (StatusCode::from_u16(d.status).unwrap_or(StatusCode::OK), Json(d.body)).into_response()
}

async fn commit(
    State(app): State<AppState>,
    Path(batch_id): Path<String>,
    body: AppJson<CommitBody>,
) -> Result<Response> {
    let ev = evidence(body.value)?;
    Ok(decision(app.store.commit_batch(&batch_id, ev, body.canonical).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailBody {
    stage: FailStage,
    category: Option<FailCategory>,
    message: Option<String>,
}

async fn fail(State(app): State<AppState>, Path(batch_id): Path<String>, body: AppJson<FailBody>) -> Result<Response> {
    let b = body.value;
    let report =
        FailReport { stage: b.stage, category: b.category.unwrap_or(FailCategory::Unknown), message: b.message };
    Ok(decision(app.store.fail_batch(&batch_id, report, body.canonical).await?))
}

async fn read(State(app): State<AppState>, Path(batch_id): Path<String>) -> Result<Response> {
    match app.store.get_batch(&batch_id).await? {
        Some(rec) => Ok(Json(rec).into_response()),
        None => Err(Error::not_found("batch_not_found", format!("no batch {batch_id:?}"))),
    }
}

const MAX_PAGE: i64 = 500;

async fn list(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<Value>> {
    let mut p = Params::parse(raw.as_deref());
    let q = BatchQuery {
        task: p.one("task")?,
        dataset: p.one("dataset")?,
        dt: p.date("dt")?,
        state: p.one("state")?.map(|s| s.parse::<BatchState>().map_err(|e| Error::invalid("state", e))).transpose()?,
        since: p.time("since")?,
        until: p.time("until")?,
        limit: p.limit(100, MAX_PAGE)?,
        after_id: p.one("cursor")?.map(|c| decode_cursor::<(i64,)>(&c).map(|(id,)| id)).transpose()?,
    };
    p.finish()?;
    let page = app.store.list_batches(&q).await?;
    Ok(Json(json!({"items": page.items, "next_cursor": page.next.as_ref().map(encode_cursor)})))
}
