//! How errors look on the wire:
//! `{"error": {"code": "<stable_snake_case>", "message": "...", "details": {...}}}`.
//!
//! [`AppJson`] replaces axum's `Json` extractor so that a malformed body, a
//! field of the wrong type or an unknown field comes back in that shape,
//! naming the field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::Error;

/// The full text of a 5xx, kept in the response's extensions for the
/// logging middleware (the client sees only the code).
#[derive(Clone, Debug)]
pub struct LoggedError(pub String);

pub fn error_body(code: &str, message: &str, details: Value) -> Value {
    serde_json::to_value(crate::api::ErrorBody::new(code, message, details)).expect("an error body serialises")
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let (message, details) = match &self {
            Error::Invalid { message, details, .. } | Error::Conflict { message, details, .. } => {
                (message.clone(), details.clone())
            }
            Error::NotFound { message, .. } | Error::Request { message, .. } | Error::Unanswered { message, .. } => {
                (message.clone(), json!({}))
            }
            Error::Database(_) if status == StatusCode::SERVICE_UNAVAILABLE => {
                ("the database is unavailable; nothing was changed".to_owned(), json!({}))
            }
            Error::Database(_) => ("the database failed; nothing was changed".to_owned(), json!({})),
            Error::Internal(_) => ("internal error; nothing was changed".to_owned(), json!({})),
        };
        let mut resp = (status, Json(error_body(self.code(), &message, details))).into_response();
        if status.is_server_error() {
            resp.extensions_mut().insert(LoggedError(format!("{self:?}")));
        }
        resp
    }
}

/// A JSON body, parsed with the field path kept for errors, and the
/// canonical form of the body (object keys sorted) for idempotency checks.
pub struct AppJson<T> {
    pub value: T,
    pub canonical: String,
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AppJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            let status = rejection.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                payload_too_large()
            } else {
                Error::Request { status: 400, code: "unreadable_body", message: rejection.body_text() }
            }
        })?;
        parse_json(&bytes)
    }
}

pub fn payload_too_large() -> Error {
    Error::Request { status: 413, code: "payload_too_large", message: "the request body is larger than 1 MiB".into() }
}

/// Parses a request body: [`super::strict_json`] first (repeated keys, NUL,
/// numbers beyond a double), then the typed fields.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<AppJson<T>, Error> {
    let raw: Value = super::strict_json::read(bytes)?;
    let canonical = raw.to_string();
    let value = serde_path_to_error::deserialize(raw).map_err(|e| field_error(&e))?;
    Ok(AppJson { value, canonical })
}

/// Turns serde's complaint into a 422 that names the field by its path
/// (`partitions[0].rows_written`).
fn field_error(e: &serde_path_to_error::Error<serde_json::Error>) -> Error {
    let inner = e.inner().to_string();
    let path = e.path().to_string();
    let path = if path == "." { String::new() } else { path };
    let backticked = inner.split('`').nth(1).unwrap_or_default().to_owned();
    let join = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    let (code, field) = if inner.starts_with("unknown field") {
        // The path already ends at the unknown key.
        ("unknown_field", if path.is_empty() { backticked } else { path.clone() })
    } else if inner.starts_with("missing field") {
        ("missing_field", join(&backticked))
    } else if inner.starts_with("invalid type") {
        ("invalid_type", path.clone())
    } else {
        ("invalid_field", path.clone())
    };
    let message = match code {
        "unknown_field" => {
            format!("unknown field {field:?} (a typo would silently drop evidence, so it is refused): {inner}")
        }
        _ => format!("{field}: {inner}"),
    };
    Error::invalid_code(code, field, message)
}

/// Gives a JSON error body to error responses that did not come from a
/// handler (unknown route, wrong method, body limit, timeout).
pub async fn json_errors(resp: Response) -> Response {
    let mut out = with_json_body(resp);
    // A refused oversized body is left unread on the connection: say that the
    // connection closes, so that a client does not send its next request on
    // it and see a reset instead of an answer.
    if out.status() == StatusCode::PAYLOAD_TOO_LARGE {
        out.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    out
}

fn with_json_body(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    // The console's own error pages (HTML) are meant for the person reading them.
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (code, message) = match status {
        StatusCode::NOT_FOUND => ("route_not_found", "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "this route does not take that method"),
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "the request body is larger than 1 MiB"),
        StatusCode::REQUEST_TIMEOUT => ("request_timeout", "the request took too long"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("unsupported_media_type", "send a JSON body"),
        s if s.is_server_error() => ("internal_error", "internal error"),
        _ => ("bad_request", "the request was not understood"),
    };
    let mut out = (status, Json(error_body(code, message, json!({})))).into_response();
    if let Some(logged) = resp.extensions().get::<LoggedError>() {
        out.extensions_mut().insert(logged.clone());
    }
    out
}

/// Logs each 5xx once, inside the request's trace span.
pub async fn log_server_errors(resp: Response) -> Response {
    if resp.status().is_server_error() {
        let detail = resp.extensions().get::<LoggedError>().map(|e| e.0.as_str()).unwrap_or("no detail");
        tracing::error!(status = resp.status().as_u16(), error = detail, "request failed");
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Part {
        partition: String,
        rows_written: u64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        marker: String,
        partitions: Vec<Part>,
    }

    fn field_and_code(body: &str) -> (String, &'static str) {
        match parse_json::<Body>(body.as_bytes()) {
            Err(Error::Invalid { field, code, .. }) => (field.unwrap(), code),
            Err(other) => panic!("expected a field error, got {other:?}"),
            Ok(_) => panic!("expected an error"),
        }
    }

    #[test]
    fn errors_name_the_field_by_its_path() {
        assert_eq!(
            field_and_code(r#"{"marker": "m", "partitions": [{"partiton": "dt=1", "rows_written": 1}]}"#),
            ("partitions[0].partiton".into(), "unknown_field")
        );
        assert_eq!(field_and_code(r#"{"marker": "m", "partitons": []}"#), ("partitons".into(), "unknown_field"));
        assert_eq!(
            field_and_code(r#"{"marker": "m", "partitions": [{"partition": "dt=1", "rows_written": "many"}]}"#),
            ("partitions[0].rows_written".into(), "invalid_type")
        );
        assert_eq!(field_and_code(r#"{"partitions": []}"#), ("marker".into(), "missing_field"));
        assert_eq!(
            field_and_code(r#"{"marker": "m", "partitions": [{"partition": "dt=1"}]}"#),
            ("partitions[0].rows_written".into(), "missing_field")
        );
    }

    #[test]
    fn malformed_json_is_a_400() {
        assert!(matches!(
            parse_json::<Body>(b"{not json"),
            Err(Error::Request { status: 400, code: "malformed_json", .. })
        ));
    }
}
