//! `/v1/alerts`: what went wrong, for whom, and what to do about it.

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};

use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::api::schemas::DatasetNameText;
use crate::api::AlertPage;
use crate::domain::alerts::{AlertKind, Severity};
use crate::error::{Error, Result};
use crate::store::AlertQuery;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/alerts", get(list))
}

#[utoipa::path(
    get,
    path = "/v1/alerts",
    tag = "alerts",
    operation_id = "listAlerts",
    summary = "List alerts, newest first",
    params(
        ("state" = Option<crate::domain::alerts::AlertState>, Query, description = "open or resolved"),
        ("dataset" = Option<DatasetNameText>, Query),
        ("severity" = Option<crate::domain::alerts::Severity>, Query),
        ("kind" = Option<crate::domain::alerts::AlertKind>, Query),
        crate::api::PageQuery,
    ),
    responses(
        (status = 200, description = "A page of alerts.", body = crate::api::AlertPage),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, description = "A malformed parameter (`details.field` names it).", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn list(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<AlertPage>> {
    let mut p = Params::parse(raw.as_deref());
    let state = p.one("state")?;
    if let Some(s) = &state {
        if s != "open" && s != "resolved" {
            return Err(Error::invalid("state", format!("state must be open or resolved, got {s:?}")));
        }
    }
    let severity = p.one("severity")?;
    if let Some(s) = &severity {
        s.parse::<Severity>().map_err(|e| Error::invalid("severity", e))?;
    }
    let kind = p.one("kind")?;
    if let Some(k) = &kind {
        k.parse::<AlertKind>().map_err(|e| Error::invalid("kind", e))?;
    }
    let q = AlertQuery {
        state,
        dataset: p.one("dataset")?,
        severity,
        kind,
        limit: p.limit(100, 500)?,
        after_id: p.one("cursor")?.map(|c| decode_cursor::<(i64,)>(&c).map(|(id,)| id)).transpose()?,
    };
    p.finish()?;
    let page = app.store.list_alerts(&q).await?;
    Ok(Json(AlertPage { items: page.items, next_cursor: page.next.as_ref().map(encode_cursor) }))
}
