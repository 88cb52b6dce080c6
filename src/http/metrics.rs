//! `/metrics` (Prometheus text format) and the layer that counts and logs
//! every request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::AppState;
use crate::telemetry::context::{self, RequestContext};
use crate::telemetry::{self, Metrics};

/// Longest a scrape waits for the database gauges before it answers with
/// the values of the previous scrape.
const GAUGE_TIMEOUT: Duration = Duration::from_secs(5);

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape))
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "service",
    operation_id = "getMetrics",
    summary = "Prometheus metrics",
    description = "This instance's metrics in the Prometheus text format (version 0.0.4): HTTP requests by route template and status, `/ready` answers by outcome, long-poll waiters, decided batches and failed checks by dataset tier, commit duration, late partitions, the webhook outbox, the readiness cache and the database pool. The gauges that need the database are read at each scrape. See the README for the full list.",
    responses(
        (status = 200, description = "The metrics.", body = String, content_type = "text/plain; version=0.0.4; charset=utf-8"),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, response = crate::api::Invalid),
    ),
)]
async fn scrape(State(app): State<AppState>) -> Response {
    match tokio::time::timeout(GAUGE_TIMEOUT, app.store.gauges()).await {
        Ok(Ok(g)) => app.metrics.set_store_gauges(&g),
        Ok(Err(e)) => tracing::warn!(error = ?e, "cannot read the database gauges; serving the previous values"),
        Err(_) => tracing::warn!("the database gauges took too long; serving the previous values"),
    }
    ([(header::CONTENT_TYPE, telemetry::CONTENT_TYPE)], app.metrics.render()).into_response()
}

/// Counts each request under its route template (never the raw path, so the
/// label set stays bounded), logs it (`/ready`, the sensors' hot path, at
/// debug; the rest at info), and runs it in its [`RequestContext`] so that
/// decisions can name the request.
pub async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let began = Instant::now();
    let route = req.extensions().get::<MatchedPath>().cloned();
    let method = req.method().clone();
    let ctx = RequestContext::new(req.headers().get("x-request-id").cloned());
    let resp = context::scope(ctx, next.run(req)).await;
    let took = began.elapsed();
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let status = resp.status().as_u16();
    metrics.http_request(route, status, took.as_secs_f64());
    let duration_ms = took.as_secs_f64() * 1000.0;
    if route == "/ready" {
        tracing::debug!(%method, route, status, duration_ms, "request");
    } else {
        tracing::info!(%method, route, status, duration_ms, "request");
    }
    resp
}
