//! HTTP: the router, its layers, and one module per resource.

pub(crate) mod alerts;
pub(crate) mod audit;
pub(crate) mod batches;
pub(crate) mod datasets;
pub(crate) mod deliveries;
pub mod error;
pub(crate) mod lineage;
pub(crate) mod metrics;
pub(crate) mod openlineage;
pub(crate) mod partitions;
mod query;
pub(crate) mod ready;
pub(crate) mod repairs;
pub(crate) mod service;
mod strict_json;
mod strict_url;
pub(crate) mod tokens;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::MatchedPath;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode};
use axum::{middleware, Router};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::auth::Gate;
use crate::changes::ChangeHub;
use crate::domain::outbound::AllowList;
use crate::server::Stopping;
use crate::store::SqlStore;
use crate::telemetry::Metrics;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 1 << 20;

/// Longest `/ready?wait=`.
pub const MAX_WAIT_SECONDS: f64 = 300.0;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<SqlStore>,
    pub hub: Arc<ChangeHub>,
    /// Who may do what; see [`crate::auth`].
    pub auth: Arc<Gate>,
    /// The hosts a dataset's `webhook_url` may name.
    pub webhook_allow: Arc<AllowList>,
    pub metrics: Arc<Metrics>,
    /// Long-polls answer `shutting_down` when this fires.
    pub stopping: Stopping,
}

/// Longest any request but a `/ready` long-poll may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

pub fn router(state: AppState) -> Router {
    let counted = state.metrics.clone();
    let request_id = HeaderName::from_static("x-request-id");
    let api = Router::new()
        .merge(alerts::router())
        .merge(audit::router())
        .merge(batches::router())
        .merge(datasets::router())
        .merge(deliveries::router())
        .merge(lineage::router())
        .merge(metrics::router())
        .merge(openlineage::router())
        .merge(partitions::router())
        .merge(repairs::router())
        .merge(service::router())
        .merge(tokens::router())
        .merge(crate::ui::router())
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, REQUEST_TIMEOUT))
        // `/ready` bounds its own long-poll (`wait` ≤ MAX_WAIT_SECONDS) and is
        // the hot path: it goes without a timer.
        .merge(ready::router())
        // Every route, before its handler: who is calling, may they.
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::auth::layer::gate))
        // Outside the gate: the gate looks the batch in the path up, and a
        // NUL must never reach the database.
        .route_layer(middleware::from_fn(strict_url::refuse_nul))
        // Outside the gate: the console's sign-in, and its session lent to its pages.
        .layer(middleware::from_fn_with_state(state.clone(), crate::ui::session::layer))
        .with_state(state);
    // Outermost last: every response, even a panic or a timeout, passes the
    // JSON error mapping, the 5xx log and the request id.
    api.layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(CatchPanicLayer::new())
        .layer(middleware::map_response(error::json_errors))
        .layer(middleware::map_response(error::log_server_errors))
        .layer(middleware::from_fn_with_state(counted, metrics::track))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
            let path = req.extensions().get::<MatchedPath>().map(MatchedPath::as_str).unwrap_or("unmatched");
            let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("-");
            tracing::info_span!("request", method = %req.method(), path, request_id = id)
        }))
        .layer(SetRequestIdLayer::new(request_id, SequentialRequestId::new()))
}

/// `GET /ready` answered from the readiness cache ahead of the router and
/// its layers: the sensors' hot path. It answers only a query the full path
/// would answer `200` with the same bytes (every partition cached and ready,
/// no token needed, no body); anything else goes through the router. It
/// keeps what a client or an operator sees: the `x-request-id` header, the
/// request counters and duration, the cache and answer counters, the debug
/// log line.
#[derive(Clone)]
pub struct ReadyFastPath {
    state: AppState,
    ids: SequentialRequestId,
    memo: Arc<ready::AnswerMemo>,
}

impl ReadyFastPath {
    pub fn new(state: AppState) -> Self {
        Self { state, ids: SequentialRequestId::new(), memo: Arc::default() }
    }

    /// Whether the request is a `GET /ready` with no body: the only kind
    /// either path ahead of the router takes.
    fn is_plain_ready<B>(req: &Request<B>) -> bool {
        use axum::http::{header, Method};
        let headers = req.headers();
        req.method() == Method::GET
            && req.uri().path() == "/ready"
            && !headers.contains_key(header::CONTENT_LENGTH)
            && !headers.contains_key(header::TRANSFER_ENCODING)
    }

    /// The request's `x-request-id`, or a new one (as `SetRequestIdLayer` gives).
    fn request_id<B>(&self, req: &Request<B>) -> HeaderValue {
        match req.headers().get("x-request-id") {
            Some(id) => id.clone(),
            None => self.ids.next(),
        }
    }

    /// The response, if this request is one the fast path answers.
    pub fn answer<B>(&self, req: &Request<B>) -> Option<axum::response::Response> {
        use axum::http::header;
        use axum::response::IntoResponse;
        if !Self::is_plain_ready(req) || self.state.auth.ready_needs_token() {
            return None;
        }
        let began = std::time::Instant::now();
        let body = ready::ready_from_cache(&self.state, &self.memo, req.uri().query())?;
        let resp = (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        Some(counted(&self.state, resp, self.request_id(req), began))
    }

    /// A `/ready?wait=` long-poll, to be served ahead of the router and
    /// its layers: a waiter may sit for minutes, and inside the router it
    /// would hold every layer's boxed future (about 15 KB) all that time.
    /// It gets what the router would give it: the gate's check (a `read`
    /// token unless `/ready` is public), the request id, the request's log
    /// context and span, the request counters, the same answer. Only
    /// well-formed queries with nothing for another layer to refuse (a body,
    /// a NUL) are taken.
    pub fn long_poll<B>(&self, req: &Request<B>) -> Option<ReadyLongPoll> {
        if !Self::is_plain_ready(req) || strict_url::nul_field(None, req.uri().query()).is_some() {
            return None;
        }
        let poll = ready::LongPoll::parse(req.uri().query())?;
        let bearer = match self.state.auth.ready_needs_token() {
            true => Some(crate::auth::layer::bearer(req.headers())?),
            false => None,
        };
        Some(ReadyLongPoll {
            state: self.state.clone(),
            poll,
            bearer,
            actor: None,
            id: self.request_id(req),
            began: std::time::Instant::now(),
        })
    }
}

/// A long-poll taken by [`ReadyFastPath::long_poll`]. It holds nothing of
/// the request, so that the connection can let the request go (its head
/// keeps hyper's read buffer alive) while it waits.
pub struct ReadyLongPoll {
    state: AppState,
    poll: ready::LongPoll,
    /// The token to check, when `/ready` needs one.
    bearer: Option<String>,
    actor: Option<String>,
    id: HeaderValue,
    began: std::time::Instant,
}

impl ReadyLongPoll {
    /// Whether the caller passes the gate. If not, nothing was answered:
    /// the router serves the request (and gives the 401 or 403).
    pub async fn admit(&mut self) -> bool {
        let Some(secret) = self.bearer.take() else {
            return true;
        };
        match self.state.auth.authenticator.authenticate(&secret).await {
            Ok(actor) if actor.allows(crate::auth::Kind::Read, &[]).is_ok() => {
                self.actor = Some(actor.name);
                true
            }
            _ => false,
        }
    }

    /// Waits, and answers.
    pub async fn answer(self) -> axum::response::Response {
        use crate::telemetry::context;
        let Self { state, poll, actor, id, began, .. } = self;
        let span =
            tracing::info_span!("request", method = "GET", path = "/ready", request_id = id.to_str().unwrap_or("-"));
        let work = async {
            if let Some(name) = &actor {
                context::set_actor(name);
            }
            poll.answer(&state).await
        };
        let ctx = context::RequestContext::new(Some(id.clone()));
        let resp = tracing::Instrument::instrument(context::scope(ctx, work), span).await;
        counted(&state, resp, id, began)
    }
}

/// What the router's layers add to a `/ready` answer given ahead of them:
/// the `x-request-id` header, the request counters and the debug line.
fn counted(
    state: &AppState,
    mut resp: axum::response::Response,
    id: HeaderValue,
    began: std::time::Instant,
) -> axum::response::Response {
    resp.headers_mut().insert(HeaderName::from_static("x-request-id"), id);
    let took = began.elapsed().as_secs_f64();
    let status = resp.status().as_u16();
    state.metrics.http_request("/ready", status, took);
    tracing::debug!(method = "GET", route = "/ready", status, duration_ms = took * 1000.0, "request");
    resp
}

/// Request ids `<process prefix>-<counter>`: unique across replicas (the
/// prefix is random per process) without a system call per request, as a
/// random UUID would cost.
#[derive(Clone)]
struct SequentialRequestId {
    prefix: Arc<str>,
    next: Arc<AtomicU64>,
}

impl SequentialRequestId {
    fn new() -> Self {
        let prefix = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        Self { prefix: prefix.into(), next: Arc::new(AtomicU64::new(1)) }
    }
}

impl SequentialRequestId {
    fn next(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{}-{n:x}", self.prefix)).expect("hex digits and a dash are a header value")
    }
}

impl MakeRequestId for SequentialRequestId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        Some(RequestId::new(self.next()))
    }
}
