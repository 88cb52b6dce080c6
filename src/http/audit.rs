//! `GET /v1/audit`: every write, who made it and how it ended, newest
//! first. `admin` sees all; `operate:<glob>` sees a matching `dataset=`.

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::error::Result;
use crate::store::{AuditQuery, AuditRecord};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/audit", get(list))
}

#[derive(Serialize)]
struct AuditPage {
    items: Vec<AuditRecord>,
    next_cursor: Option<String>,
}

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
