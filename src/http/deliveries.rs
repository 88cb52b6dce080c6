//! `/v1/deliveries`: what the outbox sent, what is pending, and the last
//! error of each: alert webhooks, Airflow asset events, CloudEvents.

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};

use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::api::schemas::DatasetNameText;
use crate::api::DeliveryPage;
use crate::domain::push::Target;
use crate::error::{Error, Result};
use crate::store::DeliveryQuery;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/deliveries", get(list))
}

const STATES: &[&str] = &["pending", "delivered", "given_up"];

#[utoipa::path(
    get,
    path = "/v1/deliveries",
    tag = "deliveries",
    operation_id = "listDeliveries",
    summary = "List outbox deliveries (webhooks, Airflow asset events, CloudEvents), newest first",
    description = "What was sent, what is pending, and the last error of each.",
    params(
        ("target" = Option<crate::domain::push::Target>, Query),
        ("state" = Option<crate::api::schemas::DeliveryState>, Query),
        ("dataset" = Option<DatasetNameText>, Query),
        ("limit" = Option<i64>, Query, description = "1 to 500 Default 100.", minimum = 1, maximum = 500),
        ("cursor" = Option<String>, Query, description = "opaque; from next_cursor"),
    ),
    responses(
        (status = 200, description = "A page of deliveries.", body = crate::api::DeliveryPage),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, description = "A malformed parameter (`details.field` names it).", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
pub(crate) async fn list(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<DeliveryPage>> {
    let mut p = Params::parse(raw.as_deref());
    let target = p.one("target")?.map(|t| t.parse::<Target>().map_err(|e| Error::invalid("target", e))).transpose()?;
    let state = p.one("state")?;
    if let Some(s) = &state {
        if !STATES.contains(&s.as_str()) {
            return Err(Error::invalid("state", format!("{s:?} is not one of {}", STATES.join(", "))));
        }
    }
    let q = DeliveryQuery {
        target,
        state,
        dataset: p.one("dataset")?,
        limit: p.limit(100, 500)?,
        after_id: p.one("cursor")?.map(|c| decode_cursor::<(i64,)>(&c).map(|(id,)| id)).transpose()?,
    };
    p.finish()?;
    let page = app.store.list_deliveries(&q).await?;
    Ok(Json(DeliveryPage { items: page.items, next_cursor: page.next.as_ref().map(encode_cursor) }))
}
