//! `/v1/datasets`: a dataset's policy.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::error::AppJson;
use super::AppState;
use crate::api::{DatasetList, PolicyRequest};
use crate::domain::names::DatasetName;
use crate::domain::outbound::{AllowList, Refusal};
use crate::domain::policy::DatasetPolicy;
use crate::domain::push::PartitionKeyTemplate;
use crate::error::{Error, Result};
use crate::store::PartitionQuery;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/datasets", get(list)).route("/v1/datasets/{dataset}", get(read).put(put))
}

/// A PUT replaces the whole policy: a field left out takes its default.
/// A receiver URL the allow-list must accept (`webhook_url`, `events_url`).
fn allowed_url(field: &str, url: &str, allow: &AllowList) -> Result<()> {
    match allow.check(url) {
        Ok(()) => Ok(()),
        Err(Refusal::NotAUrl(why)) => Err(Error::invalid(field, why)),
        Err(refused @ Refusal::NotAllowed { .. }) => {
            Err(Error::invalid_code("webhook_not_allowed", field, refused.to_string()))
        }
    }
}

fn policy(b: PolicyRequest, webhook_allow: &AllowList) -> Result<DatasetPolicy> {
    let d = DatasetPolicy::default();
    let unique_key = b.unique_key.unwrap_or_default();
    for (i, col) in unique_key.iter().enumerate() {
        if col.is_empty() || col.len() > 200 || col.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::invalid(format!("unique_key[{i}]"), format!("{col:?} is not a column name")));
        }
    }
    let timezone = b.timezone.unwrap_or(d.timezone);
    if timezone.parse::<chrono_tz::Tz>().is_err() {
        return Err(Error::invalid("timezone", format!("{timezone:?} is not an IANA time zone")));
    }
    let max_volume_change = b.max_volume_change.unwrap_or(d.max_volume_change);
    if !(max_volume_change.is_finite() && max_volume_change >= 0.0) {
        return Err(Error::invalid("max_volume_change", "max_volume_change must be a fraction ≥ 0, e.g. 0.3"));
    }
    let baseline_periods = b.baseline_periods.unwrap_or(d.baseline_periods);
    if !(1..=366).contains(&baseline_periods) {
        return Err(Error::invalid("baseline_periods", "baseline_periods must be from 1 to 366"));
    }
    let max_partitions_per_batch = b.max_partitions_per_batch.unwrap_or(d.max_partitions_per_batch);
    if max_partitions_per_batch == 0 {
        return Err(Error::invalid("max_partitions_per_batch", "max_partitions_per_batch must be at least 1"));
    }
    if let Some(dl) = &b.deadline {
        dl.validate().map_err(|e| Error::invalid("deadline", e))?;
    }
    if let Some(url) = &b.webhook_url {
        allowed_url("webhook_url", url, webhook_allow)?;
    }
    if let Some(url) = &b.events_url {
        allowed_url("events_url", url, webhook_allow)?;
    }
    let airflow_asset = b.airflow_asset.filter(|a| !a.is_empty());
    if let Some(asset) = &airflow_asset {
        if asset.chars().count() > 1500 || asset.chars().any(char::is_control) || asset.trim() != asset {
            return Err(Error::invalid(
                "airflow_asset",
                "airflow_asset must be an Airflow asset name or URI: at most 1500 characters, no control characters \
                 or surrounding blanks",
            ));
        }
    }
    if let Some(t) = &b.partition_key {
        PartitionKeyTemplate::parse(t).map_err(|e| Error::invalid("partition_key", e))?;
    }
    Ok(DatasetPolicy {
        max_partitions_per_batch,
        deadline: b.deadline,
        webhook_url: b.webhook_url,
        airflow_asset,
        partition_key: b.partition_key,
        events_url: b.events_url,
        tier: b.tier.unwrap_or(d.tier),
        write_mode: b.write_mode.unwrap_or(d.write_mode),
        unique_key,
        timezone,
        max_volume_change,
        baseline_periods,
        allow_empty: b.allow_empty.unwrap_or(d.allow_empty),
        owner: b.owner.filter(|o| !o.is_empty()),
    })
}

/// The partitions the dataset already has must have every key the
/// partition key template names (a batch naming one without is refused at
/// start).
async fn keys_in_partitions(app: &AppState, name: &DatasetName, policy: &DatasetPolicy) -> Result<()> {
    let template = policy.partition_key_template().map_err(|e| Error::invalid("partition_key", e))?;
    let q = PartitionQuery { dataset: name.as_str().to_owned(), from: None, to: None, limit: 100, after: None };
    for p in app.store.list_partitions(&q).await?.items {
        if let Some(key) = template.missing_key(&p.partition) {
            return Err(Error::invalid(
                "partition_key",
                format!(
                    "partition_key names {{{key}}}, which partition {:?} of this dataset does not have",
                    p.partition
                ),
            ));
        }
    }
    Ok(())
}

fn dataset_name(raw: &str) -> Result<DatasetName> {
    DatasetName::parse(raw).map_err(|e| Error::invalid("dataset", e.to_string()))
}

#[utoipa::path(
    put,
    path = "/v1/datasets/{dataset}",
    tag = "datasets",
    operation_id = "putDataset",
    summary = "Set a dataset's policy",
    description = "Creates the dataset or replaces its whole policy: a field left out takes its default (each field's `default` in the schema; `unique_key` none).",
    params(
        crate::api::DatasetPath,
    ),
    request_body = crate::api::PolicyRequest,
    responses(
        (status = 200, description = "The dataset's policy was replaced.", body = crate::store::DatasetRecord),
        (status = 201, description = "The dataset was created.", body = crate::store::DatasetRecord),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, description = "An invalid field (`invalid_field`, `unknown_field`, …; `details.field` names it), or `webhook_not_allowed`: `webhook_url` or `events_url` names a host the service may not call (`--webhook-allow`).", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn put(State(app): State<AppState>, Path(name): Path<String>, body: AppJson<PolicyRequest>) -> Result<Response> {
    let name = dataset_name(&name)?;
    let policy = policy(body.value, &app.webhook_allow)?;
    if policy.airflow_asset.is_some() {
        keys_in_partitions(&app, &name, &policy).await?;
    }
    let (record, created) = app.store.put_dataset(&name, &policy).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(record)).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/datasets/{dataset}",
    tag = "datasets",
    operation_id = "getDataset",
    summary = "Read a dataset's policy",
    params(
        crate::api::DatasetPath,
    ),
    responses(
        (status = 200, description = "The dataset.", body = crate::store::DatasetRecord),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, description = "No such dataset (`dataset_not_found`).", body = crate::api::ErrorBody),
        (status = 422, description = "The dataset name is invalid (`invalid_field`).", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn read(State(app): State<AppState>, Path(name): Path<String>) -> Result<Response> {
    let name = dataset_name(&name)?;
    match app.store.get_dataset(name.as_str()).await? {
        Some(d) => Ok(Json(d).into_response()),
        None => Err(Error::not_found("dataset_not_found", format!("no dataset {:?}", name.as_str()))),
    }
}

#[utoipa::path(
    get,
    path = "/v1/datasets",
    tag = "datasets",
    operation_id = "listDatasets",
    summary = "List datasets",
    description = "Every dataset with its policy, by name.",
    responses(
        (status = 200, description = "All datasets.", body = crate::api::DatasetList),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn list(State(app): State<AppState>) -> Result<Json<DatasetList>> {
    Ok(Json(DatasetList { items: app.store.list_datasets().await? }))
}
