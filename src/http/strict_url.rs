//! The URL's half of [`super::strict_json`]: a NUL (`%00`) in a path
//! segment or a query parameter is `422 invalid_field` naming the parameter,
//! before any handler or the database sees it (PostgreSQL cannot store or
//! even compare text holding a NUL).

use axum::extract::{RawPathParams, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::Error;

/// Route middleware (it needs the matched route's parameter names).
pub async fn refuse_nul(
    path: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(field) = nul_field(path.ok().as_ref(), req.uri().query()) {
        let message = format!("{field}: contains a NUL character (%00), which is never data");
        return Error::invalid(field, message).into_response();
    }
    next.run(req).await
}

/// The first path parameter or query parameter holding a NUL.
pub(super) fn nul_field(path: Option<&RawPathParams>, query: Option<&str>) -> Option<String> {
    if let Some(name) = path.and_then(|p| p.iter().find(|(_, v)| v.contains('\0')).map(|(k, _)| k.to_owned())) {
        return Some(name);
    }
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        .map(|(k, _)| k.replace('\0', "\\u0000"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_in_the_query_names_its_parameter() {
        assert_eq!(nul_field(None, Some("dataset=a%00b&limit=1")), Some("dataset".into()));
        assert_eq!(nul_field(None, Some("limit=1&x%00=1")), Some("x\\u0000".into()));
        assert_eq!(nul_field(None, Some("dataset=ab&limit=1")), None);
        assert_eq!(nul_field(None, None), None);
    }
}
