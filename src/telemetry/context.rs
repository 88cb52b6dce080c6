//! The request a piece of work is done for, so that a decision taken deep in
//! the store can name it in its log line without every store call carrying
//! it. Work outside a request (the background scans) has none.

use std::future::Future;
use std::sync::OnceLock;

use axum::http::HeaderValue;

/// Who acts in a request whose caller was not named.
pub const ANONYMOUS: &str = "anonymous";
/// Who acts in the background scans.
pub const SCANNER: &str = "scanner";

#[derive(Debug, Default)]
pub struct RequestContext {
    /// The `x-request-id` of the request (cheap to clone: shared bytes).
    pub request_id: Option<HeaderValue>,
    /// Who made the request, once the front end knows.
    actor: OnceLock<String>,
}

impl RequestContext {
    pub fn new(request_id: Option<HeaderValue>) -> Self {
        Self { request_id, actor: OnceLock::new() }
    }
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

/// Names the caller of the current request (the first name given stands);
/// outside a request it does nothing.
pub fn set_actor(name: &str) {
    let _ = REQUEST.try_with(|c| c.actor.set(name.to_owned()));
}

/// Who the current work is done for: the request's caller, [`ANONYMOUS`]
/// when it was not named, [`SCANNER`] outside any request.
pub fn actor() -> String {
    REQUEST
        .try_with(|c| c.actor.get().map_or(ANONYMOUS, String::as_str).to_owned())
        .unwrap_or_else(|_| SCANNER.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_actor_is_the_named_caller_else_anonymous_else_the_scanner() {
        assert_eq!(actor(), SCANNER);
        let id = HeaderValue::from_static("r-1");
        scope(RequestContext::new(Some(id.clone())), async {
            assert_eq!(actor(), ANONYMOUS);
            assert_eq!(request_id().as_deref(), Some("r-1"));
            set_actor("etl-bot");
            set_actor("someone-else");
            assert_eq!(actor(), "etl-bot");
        })
        .await;
        set_actor("ignored");
        assert_eq!((actor().as_str(), request_id()), (SCANNER, None));
    }
}
