//! `/v1/partitions`: every partition of a dataset with its standing.

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use chrono::NaiveDate;
use serde_json::{json, Value};

use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::domain::names::DatasetName;
use crate::error::{Error, Result};
use crate::store::PartitionQuery;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/partitions", get(list))
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
        after: p
            .one("cursor")?
            .map(|c| decode_cursor::<(NaiveDate, String)>(&c))
            .transpose()?,
    };
    p.finish()?;
    let page = app.store.list_partitions(&q).await?;
    Ok(Json(
        json!({"items": page.items, "next_cursor": page.next.as_ref().map(encode_cursor)}),
    ))
}
