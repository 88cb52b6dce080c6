//! `/v1/partitions`: every partition of a dataset with its standing.

use axum::extract::Path;
use axum::extract::{RawQuery, State};
use axum::routing::{get, post};
use serde::Deserialize;

use super::error::AppJson;
use axum::{Json, Router};
use chrono::NaiveDate;
use serde_json::{json, Value};

use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::error::{Error, Result};
use crate::store::PartitionQuery;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/partitions", get(list))
        .route("/v1/partitions/{dataset}/{partition}/invalidate", post(invalidate))
}

async fn list(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<Value>> {
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
    Ok(Json(json!({"items": page.items, "next_cursor": page.next.as_ref().map(encode_cursor)})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InvalidateBody {
    reason: String,
}

/// Takes a partition out of service (`/ready` answers 404 `invalidated`)
/// until a new batch publishes it; downstream partitions go stale. The
/// partition is one path segment, URL-encoded: `dt%3D2026-08-24%2Fhh%3D01`.
async fn invalidate(
    State(app): State<AppState>,
    Path((dataset, partition)): Path<(String, String)>,
    body: AppJson<InvalidateBody>,
) -> Result<Json<Value>> {
    DatasetName::parse(&dataset).map_err(|e| Error::invalid("dataset", e.to_string()))?;
    PartitionSpec::parse(&partition)
        .map_err(|e| Error::invalid_code("invalid_partition", "partition", e.to_string()))?;
    let reason = body.value.reason.trim().to_owned();
    if reason.is_empty() {
        return Err(Error::invalid("reason", "say why the partition is taken out of service"));
    }
    app.store.invalidate_partition(&dataset, &partition, &reason).await?;
    Ok(Json(json!({"dataset": dataset, "partition": partition, "invalidated": true, "reason": reason})))
}
