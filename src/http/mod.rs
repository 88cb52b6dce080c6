//! HTTP: the router, its layers, and one module per resource.

mod alerts;
mod batches;
mod datasets;
pub mod error;
mod lineage;
mod openlineage;
mod partitions;
mod query;
mod ready;
mod repairs;
mod service;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::MatchedPath;
use axum::http::{HeaderName, Request, StatusCode};
use axum::{middleware, Router};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::changes::ChangeHub;
use crate::store::Store;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 1 << 20;

/// Longest `/ready?wait=`.
pub const MAX_WAIT_SECONDS: f64 = 300.0;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub hub: Arc<ChangeHub>,
}

pub fn router(state: AppState) -> Router {
    let request_id = HeaderName::from_static("x-request-id");
    let api = Router::new()
        .merge(alerts::router())
        .merge(batches::router())
        .merge(datasets::router())
        .merge(lineage::router())
        .merge(openlineage::router())
        .merge(partitions::router())
        .merge(ready::router())
        .merge(repairs::router())
        .merge(service::router())
        .with_state(state);
    // Outermost last: every response, even a panic or a timeout, passes the
    // JSON error mapping, the 5xx log and the request id.
    api.layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        // Long-polls may take MAX_WAIT_SECONDS; nothing else comes close.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(MAX_WAIT_SECONDS as u64 + 30),
        ))
        .layer(CatchPanicLayer::new())
        .layer(middleware::map_response(error::json_errors))
        .layer(middleware::map_response(error::log_server_errors))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
            let path = req.extensions().get::<MatchedPath>().map(MatchedPath::as_str).unwrap_or("unmatched");
            let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("-");
            tracing::info_span!("request", method = %req.method(), path, request_id = id)
        }))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}
