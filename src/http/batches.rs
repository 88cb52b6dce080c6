//! `/v1/batches`: start, heartbeat, commit, fail, read, list.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::DateTime;
use serde_json::Value;

use super::error::AppJson;
use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::api::schemas::{DatasetNameText, TaskNameText};
use crate::api::{BatchPage, CommitRejected, CommitRequest, FailRequest, InputRef, StartRequest, WrittenRequest};
use crate::domain::batch::{BatchState, FailCategory, Trigger};
use crate::domain::checks::{CommitEvidence, PartitionEvidence, SourceEvidence};
use crate::domain::names::{parse_dt, DatasetName, PartitionSpec, TaskName};
use crate::error::{Error, Result};
use crate::store::{BatchQuery, Decided, Decision, FailReport, StartBatch};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/batches", post(start).get(list))
        .route("/v1/batches/{batch_id}", get(read))
        .route("/v1/batches/{batch_id}/heartbeat", post(heartbeat))
        .route("/v1/batches/{batch_id}/written", post(written))
        .route("/v1/batches/{batch_id}/commit", post(commit))
        .route("/v1/batches/{batch_id}/fail", post(fail))
}

use crate::domain::batch::{DEFAULT_LEASE_SECONDS, MAX_LEASE_SECONDS};
const MAX_IDEMPOTENCY_KEY: usize = 200;

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

#[utoipa::path(
    post,
    path = "/v1/batches",
    tag = "batches",
    operation_id = "startBatch",
    summary = "Start a batch",
    description = "Starts one attempt of a task to produce one data date of a dataset, covering the named partitions. The answer's `residue` lists earlier batches of these partitions that did not publish and may have left rows behind, so the task can delete them before writing. Starting over a running batch whose lease expired marks that batch `abandoned`.\n\nWith an `Idempotency-Key` header, the same key with the same body returns the same batch (201 the first time, then 200), never a second batch; the same key with a different body is 422 `idempotency_key_reused`.",
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Makes the start safe to retry: the same key and body return the same batch.", min_length = 1, max_length = 200),
    ),
    request_body = crate::api::StartRequest,
    responses(
        (status = 200, description = "An `Idempotency-Key` replay: the batch the first request started.", body = crate::store::Started),
        (status = 201, description = "The batch started.", body = crate::store::Started, links(
            ("heartbeat" = (operation_id = "heartbeatBatch", parameters(("batch_id" = "$response.body#/batch_id")), description = "Extend this batch's lease.")),
            ("written" = (operation_id = "batchWritten", parameters(("batch_id" = "$response.body#/batch_id")), description = "Report this batch's rows written.")),
            ("commit" = (operation_id = "commitBatch", parameters(("batch_id" = "$response.body#/batch_id")), description = "Commit this batch.")),
            ("fail" = (operation_id = "failBatch", parameters(("batch_id" = "$response.body#/batch_id")), description = "Report that this batch failed.")),
            ("record" = (operation_id = "getBatch", parameters(("batch_id" = "$response.body#/batch_id")), description = "This batch's record.")),
        )),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 409, description = "`batch_in_progress` (another batch's lease runs on one of the partitions), `unsafe_retry` (merge without unique_key over residue), `cleanup_required` (append over residue not acknowledged in cleaned_batch_ids). `upstream_not_ready`: an input is not ready; `details.inputs` names each with its reason.", body = crate::api::ErrorBody),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, description = "A missing or invalid field, an unknown field, an unknown trigger, an invalid date or partition spec, or `idempotency_key_reused`. `overwrite_scope_too_wide`: an overwrite_partition start with a wildcard partition or more than max_partitions_per_batch.", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn start(State(app): State<AppState>, headers: HeaderMap, body: AppJson<StartRequest>) -> Result<Response> {
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

#[utoipa::path(
    post,
    path = "/v1/batches/{batch_id}/heartbeat",
    tag = "batches",
    operation_id = "heartbeatBatch",
    summary = "Extend a batch's lease",
    description = "Extends the lease of a running batch by its `lease_seconds` from now. Takes no body.",
    params(
        crate::api::BatchPath,
    ),
    responses(
        (status = 200, description = "The new lease.", body = crate::store::Lease),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, response = crate::api::BatchNotFound),
        (status = 409, description = "`batch_not_running`: the batch is no longer running; `details` give its state and `superseded_by`.", body = crate::api::ErrorBody),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn heartbeat(State(app): State<AppState>, Path(batch_id): Path<String>) -> Result<Response> {
    Ok(Json(app.store.heartbeat(&batch_id).await?).into_response())
}

/// The task's write to the target committed (before verification): history
/// can then tell "never wrote" from "wrote, then died".
#[utoipa::path(
    post,
    path = "/v1/batches/{batch_id}/written",
    tag = "batches",
    operation_id = "batchWritten",
    summary = "Report that the write to the target committed",
    description = "Recorded before verification, so history tells a batch that never wrote from one that wrote and then died.",
    params(
        crate::api::BatchPath,
    ),
    request_body = crate::api::WrittenRequest,
    responses(
        (status = 200, description = "The batch record.", body = crate::store::BatchRecord),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, response = crate::api::BatchNotFound),
        (status = 409, description = "`batch_not_running`.", body = crate::api::ErrorBody),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, description = "`unknown_partition`: not a partition the batch declared; or a malformed body.", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn written(
    State(app): State<AppState>,
    Path(batch_id): Path<String>,
    body: AppJson<WrittenRequest>,
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

fn count(field: String, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(field, "count is too large"))
}

fn evidence(b: CommitRequest) -> Result<CommitEvidence> {
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

/// The answer to a commit or fail, first time or replayed: 200 with the
/// batch record, or for a rejection 422 `checks_failed` with the record and
/// an `error`. A replay carries the recorded record, so it is the same bytes.
fn answer(d: Decision) -> Response {
    match d.decided {
        Decided::Published | Decided::Failed => (StatusCode::OK, Json(d.record)).into_response(),
        Decided::Rejected { failed_checks } => {
            (StatusCode::UNPROCESSABLE_ENTITY, Json(CommitRejected::new(d.record, failed_checks))).into_response()
        }
    }
}

#[utoipa::path(
    post,
    path = "/v1/batches/{batch_id}/commit",
    tag = "batches",
    operation_id = "commitBatch",
    summary = "Commit a batch with evidence",
    description = "Runs the eight checks over the evidence: `marker_present`, `partitions_complete`, `rows_match_written`, `unique_keys`, `null_keys`, `non_empty`, `volume_vs_baseline`, `source_reconciliation`. Which failures block depends on the dataset's tier: `core` — every check blocks; `standard` — every check except `volume_vs_baseline`, which warns; `scratch` — only `marker_present` and `partitions_complete` block, the rest warn.\n\nAll blocking checks pass → 200, state `published`, each partition's version +1, and the previous publishing batch of those partitions becomes `superseded`. Otherwise → 422 `checks_failed`, state `rejected`, the partitions are not ready (their previous version stays in history); the body is the batch record with every check plus an `error`.\n\nA commit is idempotent: repeating the identical body returns the identical status and body (the \"write succeeded but the acknowledgement was lost\" retry); a different body for a decided batch is 409 `already_decided`. Committing a batch whose lease expired while a newer batch has started on its partitions is 409 `superseded`.",
    params(
        crate::api::BatchPath,
    ),
    request_body = crate::api::CommitRequest,
    responses(
        (status = 200, description = "Published (or the replay of an identical commit that published).", body = crate::store::BatchRecord),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, response = crate::api::BatchNotFound),
        (status = 409, description = "`already_decided` (the batch was decided by another request) or `superseded` (its lease expired and a newer batch started on its partitions). `lease_expired`: the lease scan abandoned the batch.", body = crate::api::ErrorBody),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, description = "Either the batch was rejected (`checks_failed`: the batch record with every check plus `error`; also the replay of an identical rejected commit), or the body is invalid (a field error, with `details.field`).", body = crate::api::CommitRefusal),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn commit(
    State(app): State<AppState>,
    Path(batch_id): Path<String>,
    body: AppJson<CommitRequest>,
) -> Result<Response> {
    let ev = evidence(body.value)?;
    Ok(answer(app.store.commit_batch(&batch_id, ev, body.canonical).await?))
}

#[utoipa::path(
    post,
    path = "/v1/batches/{batch_id}/fail",
    tag = "batches",
    operation_id = "failBatch",
    summary = "Report that a batch failed",
    description = "Marks the batch `failed`. A failure at stage `read` or `compute` (before any write) leaves the earlier version ready; at `write` or `verify` the partitions are not ready until a later batch publishes. Idempotent like commit: the identical body again returns the identical answer; a different decision is 409.",
    params(
        crate::api::BatchPath,
    ),
    request_body = crate::api::FailRequest,
    responses(
        (status = 200, description = "The failed batch (or the replay of an identical report).", body = crate::store::BatchRecord),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, response = crate::api::BatchNotFound),
        (status = 409, description = "`already_decided` or `superseded`. `lease_expired`: the lease scan abandoned the batch.", body = crate::api::ErrorBody),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn fail(
    State(app): State<AppState>,
    Path(batch_id): Path<String>,
    body: AppJson<FailRequest>,
) -> Result<Response> {
    let b = body.value;
    let report =
        FailReport { stage: b.stage, category: b.category.unwrap_or(FailCategory::Unknown), message: b.message };
    Ok(answer(app.store.fail_batch(&batch_id, report, body.canonical).await?))
}

#[utoipa::path(
    get,
    path = "/v1/batches/{batch_id}",
    tag = "batches",
    operation_id = "getBatch",
    summary = "Read a batch",
    description = "The whole record: request, state, timestamps, partitions, checks and the ordered event list (started, heartbeat, committed/failed, superseded).",
    params(
        crate::api::BatchPath,
    ),
    responses(
        (status = 200, description = "The batch.", body = crate::store::BatchRecord),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, response = crate::api::BatchNotFound),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn read(State(app): State<AppState>, Path(batch_id): Path<String>) -> Result<Response> {
    match app.store.get_batch(&batch_id).await? {
        Some(rec) => Ok(Json(rec).into_response()),
        None => Err(Error::not_found("batch_not_found", format!("no batch {batch_id:?}"))),
    }
}

const MAX_PAGE: i64 = 500;

#[utoipa::path(
    get,
    path = "/v1/batches",
    tag = "batches",
    operation_id = "listBatches",
    summary = "List batches",
    description = "Batches matching every given filter, newest first, with keyset pagination. Items leave out `events`. An unknown or repeated query parameter is 422.",
    params(
        ("task" = Option<TaskNameText>, Query, description = "Only this task's batches."),
        ("dataset" = Option<DatasetNameText>, Query, description = "Only batches of this dataset."),
        ("dt" = Option<chrono::NaiveDate>, Query, description = "Only batches of this data date (`YYYY-MM-DD`)."),
        ("state" = Option<crate::domain::batch::BatchState>, Query, description = "Only batches in this state."),
        ("since" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Only batches started at or after this RFC 3339 time."),
        ("until" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Only batches started before this RFC 3339 time."),
        crate::api::PageQuery,
    ),
    responses(
        (status = 200, description = "One page of batches.", body = crate::api::BatchPage),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn list(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<BatchPage>> {
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
    Ok(Json(BatchPage { items: page.items, next_cursor: page.next.as_ref().map(encode_cursor) }))
}
