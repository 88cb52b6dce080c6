//! `/healthz` and `/openapi.json`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::AppState;

/// The spec in `openapi/`, compiled in; a test proves it matches the routes.
pub const OPENAPI: &str = include_str!("../../openapi/openapi.json");

pub fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/openapi.json", get(openapi))
}

async fn healthz(State(app): State<AppState>) -> Response {
    match app.store.health().await {
        Ok(()) => Json(json!({"status": "ok", "database": "ok", "backend": app.store.backend()})).into_response(),
        Err(e) => {
            tracing::error!(error = ?e, "health check failed");
            let body = json!({"status": "unavailable", "database": "unreachable", "backend": app.store.backend(),
                "error": {"code": "storage_unavailable", "message": "the database does not answer", "details": {}}});
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}
