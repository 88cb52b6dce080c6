//! Why a call failed, in words that name what went wrong.

use std::error::Error as StdError;

use reqwest::{StatusCode, Url};
use serde_json::Value;

/// Why a call did not get the answer it wanted.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid service URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    /// The request could not be built (e.g. a token that is not a valid
    /// header value).
    #[error("cannot build the request: {0}")]
    BadRequest(String),
    /// No answer: connection refused or reset, or a timeout.
    #[error("cannot reach batchgate at {url}: {reason}")]
    Unreachable { url: Url, reason: String },
    /// The service answered with its error body.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The answer is not what the API promises: a wrong URL, a proxy's page.
    #[error("{url} answered {status} with a body that is not batchgate's: {reason}")]
    Protocol { url: Url, status: StatusCode, reason: String },
}

/// The service's error body: `{"error": {"code", "message", "details"}}`.
#[derive(Debug, thiserror::Error)]
#[error("batchgate answered {status} ({code}): {message}")]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable snake_case, e.g. `batch_in_progress`.
    pub code: String,
    pub message: String,
    pub details: Value,
}

/// An error and its causes on one line: reqwest's own message rarely says
/// what actually went wrong ("connection refused" is a cause).
pub(super) fn chain(e: &dyn StdError) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// The start of a body, for error messages.
pub(super) fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{:?}…", &text[..end]),
        None => format!("{text:?}"),
    }
}
