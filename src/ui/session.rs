//! The console's login. With auth on, a person gives a token once, on
//! `/ui/login`; the console checks it with the API's own verification
//! ([`crate::auth::Authenticator`]) and keeps it in a session cookie
//! (`HttpOnly`, `SameSite=Strict`, `Path=/ui`, gone when the browser closes):
//! no page ever shows it again and no script can read it.
//!
//! The cookie is turned back into `Authorization: Bearer …` for the
//! console's own GET pages only, before the auth layer runs, so every page
//! passes the same rules table, cache and revocations as the API (a revoked
//! token stops working in the console at once, on every replica). The cookie
//! never authorises an API call or a write.

use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::{enc, layout, Section};
use crate::auth::Kind;
use crate::http::AppState;

tokio::task_local! {
    /// Whether this request came with a session (the pages then offer "Log out").
    static SIGNED_IN: bool;
}

/// Whether the page being rendered was asked for with a session cookie.
pub(super) fn signed_in() -> bool {
    SIGNED_IN.try_with(|v| *v).unwrap_or(false)
}

/// The cookie's name.
const COOKIE: &str = "batchgate_session";
/// A login form is small; anything larger is not one.
const FORM_LIMIT: usize = 8 * 1024;

/// The middleware, outside the auth layer: handles `POST /ui/login` and
/// `POST /ui/logout`, lends the session to the console's GET pages, and sends
/// a person without a (valid) session to the login form.
pub async fn layer(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if !(path == "/ui" || path.starts_with("/ui/")) {
        return next.run(req).await;
    }
    match (req.method(), path.as_str()) {
        (&Method::POST, "/ui/login") => return login(&app, req).await,
        (&Method::POST, "/ui/logout") => return logout(),
        _ => {}
    }
    if !(req.method() == Method::GET || req.method() == Method::HEAD) {
        return next.run(req).await;
    }
    let mut req = req;
    let mut lent = false;
    if !req.headers().contains_key(header::AUTHORIZATION) {
        if let Some(secret) = cookie(&req) {
            if let Ok(v) = HeaderValue::from_str(&format!("Bearer {secret}")) {
                req.headers_mut().insert(header::AUTHORIZATION, v);
                lent = true;
            }
        }
    }
    let back = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| path.clone());
    let resp = SIGNED_IN.scope(lent, next.run(req)).await;
    if resp.status() == StatusCode::UNAUTHORIZED {
        // No session, or its token expired or was revoked: log in again.
        let mut to = Redirect::to(&format!("/ui/login?next={}", enc(&back))).into_response();
        to.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_static(CLEAR));
        return to;
    }
    resp
}

const CLEAR: &str = "batchgate_session=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0";

fn cookie(req: &Request) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
}

/// Only a path inside the console: a login link cannot send a person elsewhere.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with("/ui") && !n.starts_with("//") && !n.contains('\\') && !n.starts_with("/ui/login") => {
            n.to_owned()
        }
        _ => "/ui/".to_owned(),
    }
}

/// `GET /ui/login`: the form. With auth off there is nothing to log in to.
pub(super) async fn form(
    State(app): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let next = safe_next(q.get("next").map(String::as_str));
    if !app.auth.required {
        return Redirect::to(&next).into_response();
    }
    page(&next, None, StatusCode::OK)
}

fn page(next: &str, error: Option<&str>, status: StatusCode) -> Response {
    let body = html! {
        div.login {
            h1 { "Log in" }
            p.dim { "This batchgate requires a token. Paste one with the " code { "read" } " scope; the console keeps it in a session cookie and never shows it again." }
            @if let Some(e) = error { p.notice.bad role="alert" { (e) } }
            form method="post" action="/ui/login" {
                input type="hidden" name="next" value=(next);
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" autofocus required;
                button type="submit" { "Log in" }
            }
        }
    };
    let mut resp = layout("Log in", Section::None, body).into_response();
    *resp.status_mut() = status;
    resp
}

async fn login(app: &AppState, req: Request) -> Response {
    let secure = req
        .headers()
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let Ok(bytes) = to_bytes(req.into_body(), FORM_LIMIT).await else {
        return page("/ui/", Some("The form was too large."), StatusCode::PAYLOAD_TOO_LARGE);
    };
    let fields: Vec<(String, String)> = form_urlencoded::parse(&bytes).into_owned().collect();
    let field = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.trim().to_owned());
    let next = safe_next(field("next").as_deref());
    if !app.auth.required {
        return Redirect::to(&next).into_response();
    }
    let token = field("token").unwrap_or_default();
    // A value that cannot travel in a header is no token of ours.
    if token.is_empty() || HeaderValue::from_str(&format!("Bearer {token}")).is_err() || token.contains(';') {
        return page(&next, Some("Paste a token."), StatusCode::UNAUTHORIZED);
    }
    let actor = match app.auth.authenticator.authenticate(&token).await {
        Ok(a) => a,
        Err(crate::auth::AuthError::Unavailable(_)) => {
            return page(
                &next,
                Some("The registry cannot check tokens right now; try again."),
                StatusCode::SERVICE_UNAVAILABLE,
            )
        }
        Err(e) => return page(&next, Some(&e.to_string()), StatusCode::UNAUTHORIZED),
    };
    if let Err(needed) = actor.allows(Kind::Read, &[]) {
        return page(
            &next,
            Some(&format!("This token cannot read the registry (it needs {needed}).")),
            StatusCode::FORBIDDEN,
        );
    }
    tracing::info!(actor = %actor.name, "console login");
    let cookie =
        format!("{COOKIE}={token}; Path=/ui; HttpOnly; SameSite=Strict{}", if secure { "; Secure" } else { "" });
    let mut resp = Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

fn logout() -> Response {
    let mut resp = Redirect::to("/ui/login").into_response();
    resp.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_static(CLEAR));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_only_returns_into_the_console() {
        assert_eq!(safe_next(Some("/ui/batches/x?y=1")), "/ui/batches/x?y=1");
        assert_eq!(safe_next(Some("https://evil.example/")), "/ui/");
        assert_eq!(safe_next(Some("//evil.example/ui")), "/ui/");
        assert_eq!(safe_next(Some("/ui/login?next=/ui/")), "/ui/");
        assert_eq!(safe_next(None), "/ui/");
    }
}
