//! `/healthz` and `/openapi.json`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::AppState;
use crate::api::{ErrorBody, Health};

/// The OpenAPI document, generated once from the types ([`crate::api::openapi`]).
fn openapi_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(crate::api::openapi::json)
}

pub fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/openapi.json", get(openapi))
}

#[utoipa::path(
    get,
    path = "/healthz",
    tag = "service",
    operation_id = "getHealth",
    summary = "Health check",
    description = "Checks that the database answers.",
    responses(
        (status = 200, description = "The service and its database are up.", body = crate::api::Health),
        (status = 503, description = "The database does not answer (`storage_unavailable` in `error`).", body = crate::api::Health),
        (status = 422, response = crate::api::Invalid),
        (status = 503, description = "The database does not answer; `error.code` is `storage_unavailable`.", body = crate::api::Health),
    ),
)]
async fn healthz(State(app): State<AppState>) -> Response {
    match app.store.health().await {
        Ok(()) => Json(Health {
            status: "ok".into(),
            database: "ok".into(),
            backend: app.store.backend().into(),
            error: None,
        })
        .into_response(),
        Err(e) => {
            tracing::error!(error = ?e, "health check failed");
            let body = Health {
                status: "unavailable".into(),
                database: "unreachable".into(),
                backend: app.store.backend().into(),
                error: Some(ErrorBody::new("storage_unavailable", "the database does not answer", json!({})).error),
            };
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "service",
    operation_id = "getOpenApi",
    summary = "This OpenAPI document",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document describing this API.", body = Object),
        (status = 422, response = crate::api::Invalid),
    ),
)]
async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_text()).into_response()
}
