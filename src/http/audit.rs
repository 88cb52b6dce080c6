//! `GET /v1/audit`: every write, who made it and how it ended, newest
//! first. `admin` sees all; `operate:<glob>` sees a matching `dataset=`.

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};

use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::api::schemas::DatasetNameText;
use crate::api::AuditPage;
use crate::error::Result;
use crate::store::AuditQuery;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/audit", get(list))
}

#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "auth",
    operation_id = "listAudit",
    summary = "Every write with its actor, request id and outcome, newest first (admin, or operate:<glob> for a matching dataset=)",
    params(
        ("actor" = Option<String>, Query, description = "a token name, jwt:<sub>, anonymous …"),
        ("dataset" = Option<DatasetNameText>, Query, description = "required for operate: scopes"),
        ("action" = Option<String>, Query, description = "e.g. batch.commit"),
        ("since" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "RFC 3339"),
        crate::api::PageQuery,
    ),
    responses(
        (status = 200, description = "A page of audit rows.", body = crate::api::AuditPage),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn list(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<AuditPage>> {
    let mut p = Params::parse(raw.as_deref());
    let q = AuditQuery {
        actor: p.one("actor")?,
        dataset: p.one("dataset")?,
        action: p.one("action")?,
        since: p.time("since")?,
        limit: p.limit(100, 500)?,
        before_id: p.one("cursor")?.map(|c| decode_cursor::<(i64,)>(&c).map(|(id,)| id)).transpose()?,
    };
    p.finish()?;
    let page = app.store.list_audit(&q).await?;
    Ok(Json(AuditPage { items: page.items, next_cursor: page.next.as_ref().map(encode_cursor) }))
}
