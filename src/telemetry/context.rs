//! The request a piece of work is done for, so that a decision taken deep in
//! the store can name it in its log line without every store call carrying
//! it. Work outside a request (the background scans) has none.

use std::future::Future;

use axum::http::HeaderValue;

/// Who acts when no one is authenticated (there is no authentication yet).
pub const ANONYMOUS: &str = "anonymous";
/// Who acts in the background scans.
pub const SCANNER: &str = "scanner";

#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The `x-request-id` of the request (cheap to clone: shared bytes).
    pub request_id: Option<HeaderValue>,
}

tokio::task_local! {
    static REQUEST: RequestContext;
}

/// Runs `work` as part of the request `ctx`.
pub async fn scope<F: Future>(ctx: RequestContext, work: F) -> F::Output {
    REQUEST.scope(ctx, work).await
}

/// The id of the request being served, if any.
pub fn request_id() -> Option<String> {
    REQUEST.try_with(|c| c.request_id.as_ref().and_then(|v| v.to_str().ok()).map(str::to_owned)).ok().flatten()
}

/// Who the current work is done for.
pub fn actor() -> &'static str {
    if REQUEST.try_with(|_| ()).is_ok() {
        ANONYMOUS
    } else {
        SCANNER
    }
}
