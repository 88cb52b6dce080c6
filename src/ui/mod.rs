//! The console: server-rendered pages at `/ui/` over the same store calls the
//! API uses. Markup is built with `maud` and compiled into the binary, as are
//! the stylesheet and the one small script (keyboard shortcuts), so `cargo
//! run` serves the console with no build step and no request to any other
//! host (the Content-Security-Policy says so to the browser as well).
//!
//! Every page has a stable URL to paste into a ticket; fitness always comes
//! from [`crate::domain::readiness::fitness`].

mod alerts;
mod batch;
mod dataset;
mod deliveries;
mod lineage;
mod overview;
mod repairs;
mod search;
pub mod session;
mod svg;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use crate::http::error::LoggedError;
use crate::http::AppState;

const CSS: &str = include_str!("static/console.css");
const JS: &str = include_str!("static/console.js");

/// Nothing but this service: no CDN, no inline script or style.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(overview::page))
        .route("/ui/datasets", get(dataset::index))
        .route("/ui/datasets/{dataset}", get(dataset::page))
        .route("/ui/batches", get(batch::index))
        .route("/ui/batches/{batch_id}", get(batch::page))
        .route("/ui/lineage", get(lineage::page))
        .route("/ui/alerts", get(alerts::page))
        .route("/ui/repairs", get(repairs::index))
        .route("/ui/repairs/{id}", get(repairs::page))
        .route("/ui/search", get(search::search))
        .route("/ui/login", get(session::form))
        .route("/ui/static/console.css", get(|| async { asset("text/css; charset=utf-8", CSS) }))
        .route("/ui/static/console.js", get(|| async { asset("text/javascript; charset=utf-8", JS) }))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// An HTML page with the console's headers.
pub(crate) struct Page {
    status: StatusCode,
    markup: Markup,
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        let mut resp = (self.status, self.markup).into_response();
        let h = resp.headers_mut();
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
        h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    }
}

/// Which section of the navigation a page belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Datasets,
    Batches,
    Alerts,
    Repairs,
    None,
}

/// The frame every page shares: navigation, search, content.
pub(crate) fn layout(title: &str, section: Section, body: Markup) -> Page {
    let nav = [
        (Section::Overview, "/ui/", "Overview", "o"),
        (Section::Datasets, "/ui/datasets", "Datasets", "d"),
        (Section::Batches, "/ui/batches", "Batches", "b"),
        (Section::Alerts, "/ui/alerts", "Alerts", "a"),
        (Section::Repairs, "/ui/repairs", "Repairs", "r"),
    ];
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · batchgate" }
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/ui/static/console.css";
                script src="/ui/static/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/ui/" { "batchgate" }
                    nav aria-label="Sections" {
                        @for (s, href, label, key) in nav {
                            a href=(href) data-key=(key) aria-current=[(s == section).then_some("page")] { (label) }
                        }
                    }
                    form.search action="/ui/search" method="get" role="search" {
                        input #q type="search" name="q" placeholder="Dataset, task or batch id" aria-label="Search by dataset, task or batch id" autocomplete="off";
                        kbd title="Press / to search" { "/" }
                    }
                    @if session::signed_in() {
                        form.logout action="/ui/logout" method="post" { button type="submit" { "Log out" } }
                    }
                }
                main #main tabindex="-1" { (body) }
                footer {
                    "Keys: " kbd { "/" } " search · " kbd { "g" } " then "
                    kbd { "o" } " overview, " kbd { "d" } " datasets, " kbd { "b" } " batches, "
                    kbd { "a" } " alerts, " kbd { "r" } " repairs"
                }
            }
        }
    };
    Page { status: StatusCode::OK, markup }
}

/// A page that could not be shown, as HTML (a 5xx is logged once by the
/// HTTP layer; the person sees only that the registry failed).
pub(crate) struct UiError(crate::error::Error);

impl From<crate::error::Error> for UiError {
    fn from(e: crate::error::Error) -> Self {
        Self(e)
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let message = if status.is_server_error() {
            "The registry could not answer; nothing was changed. Try again in a moment.".to_owned()
        } else {
            self.0.to_string()
        };
        let title = if status == StatusCode::NOT_FOUND { "Not found" } else { "Cannot show this page" };
        let body = html! {
            h1 { (title) }
            p.notice { (message) }
            p { a href="/ui/" { "Back to the overview" } }
        };
        let mut page = layout(title, Section::None, body);
        page.status = status;
        let mut resp = page.into_response();
        if status.is_server_error() {
            resp.extensions_mut().insert(LoggedError(format!("{:?}", self.0)));
        }
        resp
    }
}

pub(crate) type UiResult = Result<Page, UiError>;

/// A 404 page for something the URL names that does not exist.
pub(crate) fn not_found(what: impl Into<String>) -> UiError {
    UiError(crate::error::Error::not_found("not_found", what))
}

/// Percent-encodes one URL component.
pub(crate) fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

pub(crate) fn dataset_href(dataset: &str) -> String {
    format!("/ui/datasets/{}", enc(dataset))
}

pub(crate) fn batch_href(batch_id: &str) -> String {
    format!("/ui/batches/{}", enc(batch_id))
}

pub(crate) fn lineage_href(dataset: &str, partition: &str) -> String {
    format!("/ui/lineage?dataset={}&partition={}", enc(dataset), enc(partition))
}

/// A coloured label for a fitness or batch state; the word is always shown,
/// so colour is never the only signal.
pub(crate) fn badge(state: &str) -> Markup {
    html! { span class={ "badge s-" (state) } { (state.replace('_', " ")) } }
}

/// An instant, readable and exact (the full time in the tooltip).
pub(crate) fn when(t: DateTime<Utc>) -> Markup {
    html! { time datetime=(t.to_rfc3339()) title=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M:%S UTC")) } }
}

/// A duration in words: `3h 05m`, `42s`.
pub(crate) fn span_words(seconds: i64) -> String {
    let s = seconds.abs();
    let text = match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600),
    };
    if seconds < 0 {
        format!("{text} ago")
    } else {
        text
    }
}

/// A JSON value as a person reads it: strings bare, objects as `k: v`.
pub(crate) fn value_text(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "—".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{}", (f * 10_000.0).round() / 10_000.0),
            _ => n.to_string(),
        },
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k}: {}", value_text(v))).collect::<Vec<_>>().join(", "),
        Value::Array(a) => a.iter().map(value_text).collect::<Vec<_>>().join(", "),
        Value::Bool(b) => b.to_string(),
    }
}

/// A number with thousands separators.
pub(crate) fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_spans_read_well() {
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(-1000), "-1,000");
        assert_eq!(count(12), "12");
        assert_eq!(span_words(42), "42s");
        assert_eq!(span_words(3 * 3600 + 5 * 60), "3h 05m");
        assert_eq!(span_words(-90), "1m 30s ago");
    }
}
