//! `/v1/repairs`: a repair plan answers the four questions before the
//! button (scope, identity, retry boundary, downstream) from the registry's
//! evidence, and then shows whether the repair worked.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::error::AppJson;
use super::AppState;
use crate::api::RepairRequest;
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::domain::repair::RepairAction;
use crate::error::{Error, Result};
use crate::store::NewRepair;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/repairs", post(create)).route("/v1/repairs/{id}", get(read))
}

#[utoipa::path(
    post,
    path = "/v1/repairs",
    tag = "lineage",
    operation_id = "createRepair",
    summary = "Plan a repair",
    request_body = crate::api::RepairRequest,
    responses(
        (status = 201, description = "The plan.", body = crate::domain::repair::RepairPlan),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, description = "`dataset_not_found`.", body = crate::api::ErrorBody),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, description = "A malformed field (`details.field`).", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn create(State(app): State<AppState>, body: AppJson<RepairRequest>) -> Result<Response> {
    let b = body.value;
    let dataset = DatasetName::parse(&b.dataset).map_err(|e| Error::invalid("dataset", e.to_string()))?;
    if b.partitions.is_empty() {
        return Err(Error::invalid("partitions", "name the partitions to repair"));
    }
    let mut partitions = Vec::new();
    for (i, p) in b.partitions.iter().enumerate() {
        let spec = PartitionSpec::parse(p)
            .map_err(|e| Error::invalid_code("invalid_partition", format!("partitions[{i}]"), e.to_string()))?;
        if !partitions.contains(&spec) {
            partitions.push(spec);
        }
    }
    let action = match b.action.parse::<RepairAction>() {
        Ok(a) if a != RepairAction::NothingToDo => a,
        _ => {
            return Err(Error::invalid(
                "action",
                format!("action must be rebuild, resume or compensate, got {:?}", b.action),
            ))
        }
    };
    let reason = b.reason.trim().to_owned();
    if reason.is_empty() {
        return Err(Error::invalid("reason", "say why the repair is needed"));
    }
    let plan = app.store.create_repair(NewRepair { dataset, partitions, action, reason }).await?;
    Ok((StatusCode::CREATED, Json(plan)).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/repairs/{id}",
    tag = "lineage",
    operation_id = "getRepair",
    summary = "A repair plan with its progress",
    params(
        ("id" = i64, Path),
    ),
    responses(
        (status = 200, description = "The plan and `progress`.", body = crate::domain::repair::RepairPlan),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, description = "`repair_not_found`.", body = crate::api::ErrorBody),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn read(State(app): State<AppState>, Path(id): Path<String>) -> Result<Response> {
    let not_found = || Error::not_found("repair_not_found", format!("no repair plan {id:?}"));
    let n: i64 = id.parse().map_err(|_| not_found())?;
    match app.store.get_repair(n).await? {
        Some(plan) => Ok(Json(plan).into_response()),
        None => Err(not_found()),
    }
}
