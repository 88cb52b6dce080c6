//! `/v1/partitions`: every partition of a dataset with its standing.

use super::error::AppJson;
use axum::extract::Path;
use axum::extract::{RawQuery, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::NaiveDate;

use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::api::schemas::{DatasetNameText, PartitionNameText};
use crate::api::{InvalidateRequest, Invalidated, PartitionPage};
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::error::{Error, Result};
use crate::store::PartitionQuery;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/partitions", get(list))
        .route("/v1/partitions/{dataset}/{partition}/invalidate", post(invalidate))
}

#[utoipa::path(
    get,
    path = "/v1/partitions",
    tag = "partitions",
    operation_id = "listPartitions",
    summary = "List a dataset's partitions",
    description = "One row per partition of the dataset with its standing (state, version, deciding batch, published row count), newest dt first, with keyset pagination. An unknown or repeated query parameter is 422.",
    params(
        ("dataset" = DatasetNameText, Query, description = "The dataset."),
        ("from" = Option<chrono::NaiveDate>, Query, description = "Only partitions of data dates on or after this (`YYYY-MM-DD`)."),
        ("to" = Option<chrono::NaiveDate>, Query, description = "Only partitions of data dates on or before this (`YYYY-MM-DD`)."),
        crate::api::PageQuery,
    ),
    responses(
        (status = 200, description = "One page of partitions.", body = crate::api::PartitionPage),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn list(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<PartitionPage>> {
    let mut p = Params::parse(raw.as_deref());
    let dataset = p.required("dataset")?;
    DatasetName::parse(&dataset).map_err(|e| Error::invalid("dataset", e.to_string()))?;
    let q = PartitionQuery {
        dataset,
        from: p.date("from")?,
        to: p.date("to")?,
        limit: p.limit(100, 500)?,
        after: p.one("cursor")?.map(|c| decode_cursor::<(NaiveDate, String)>(&c)).transpose()?,
    };
    p.finish()?;
    let page = app.store.list_partitions(&q).await?;
    Ok(Json(PartitionPage { items: page.items, next_cursor: page.next.as_ref().map(encode_cursor) }))
}

/// Takes a partition out of service (`/ready` answers 404 `invalidated`)
/// until a new batch publishes it; downstream partitions go stale. The
/// partition is one path segment, URL-encoded: `dt%3D2026-08-24%2Fhh%3D01`.
#[utoipa::path(
    post,
    path = "/v1/partitions/{dataset}/{partition}/invalidate",
    tag = "lineage",
    operation_id = "invalidatePartition",
    summary = "Take a partition out of service",
    description = "`/ready` answers 404 `invalidated` until a new batch publishes the partition; every partition built on it goes stale. Recorded with its reason in the change feed.",
    params(
        ("dataset" = DatasetNameText, Path),
        ("partition" = PartitionNameText, Path, description = "One URL-encoded path segment, e.g. `dt%3D2026-08-24%2Fhh%3D01`."),
    ),
    request_body = crate::api::InvalidateRequest,
    responses(
        (status = 200, description = "Invalidated.", body = crate::api::Invalidated),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, description = "`partition_not_found`: no batch ever wrote it.", body = crate::api::ErrorBody),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, description = "Missing reason or malformed partition.", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn invalidate(
    State(app): State<AppState>,
    Path((dataset, partition)): Path<(String, String)>,
    body: AppJson<InvalidateRequest>,
) -> Result<Json<Invalidated>> {
    DatasetName::parse(&dataset).map_err(|e| Error::invalid("dataset", e.to_string()))?;
    PartitionSpec::parse(&partition)
        .map_err(|e| Error::invalid_code("invalid_partition", "partition", e.to_string()))?;
    let reason = body.value.reason.trim().to_owned();
    if reason.is_empty() {
        return Err(Error::invalid("reason", "say why the partition is taken out of service"));
    }
    app.store.invalidate_partition(&dataset, &partition, &reason).await?;
    Ok(Json(Invalidated { dataset, partition, invalidated: true, reason }))
}
