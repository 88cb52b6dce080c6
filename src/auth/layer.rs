//! The one layer every route passes: authenticate, refuse non-JSON writes,
//! authorise against [`super::rules`], run the handler, audit the write.

use axum::body::{to_bytes, Body};
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::rules::{self, Datasets, Need, Rule};
use super::{Actor, AuthError, Gate, Kind};
use crate::domain::openlineage::RunEvent;
use crate::error::Error;
use crate::http::error::{error_body, payload_too_large};
use crate::http::{AppState, BODY_LIMIT};
use crate::store::AuditEntry;

/// The middleware. The [`Actor`] is left in the request's extensions for
/// handlers that want to know who is calling.
pub async fn gate(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let Some(route) = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_owned()) else {
        return next.run(req).await;
    };
    let method = req.method().clone();
    let Some(rule) = rules::rule_for(method.as_str(), &route) else {
        if rules::RULES.iter().any(|r| rules::covers(r.path, &route)) {
            // A known route, another method: what axum would answer.
            return StatusCode::METHOD_NOT_ALLOWED.into_response();
        }
        tracing::error!(%method, route, "no auth rule for this route; refused");
        return forbidden("this route has no authorisation rule; it is refused until it has one", "admin");
    };
    let gate: &Gate = &app.auth;
    let need = match rule.need {
        Need::Ready if gate.public_ready => Need::Public,
        n => n,
    };
    let write = method != Method::GET && method != Method::HEAD;
    if need == Need::Public && !write {
        return next.run(req).await;
    }

    let actor = if gate.required {
        match bearer(req.headers()) {
            None => return unauthenticated(&AuthError::Unauthenticated("send Authorization: Bearer <token>".into())),
            Some(secret) => match gate.authenticator.authenticate(&secret).await {
                Ok(actor) => actor,
                Err(AuthError::Unavailable(e)) => return e.into_response(),
                Err(e) => return unauthenticated(&e),
            },
        }
    } else {
        Actor::anonymous()
    };

    if write {
        if let Some(refusal) = not_json(&req) {
            return refusal;
        }
    }

    let (req, datasets) = match touched(&app, rule, req).await {
        Ok(found) => found,
        Err(e) => return e.into_response(),
    };
    let allowed = match need {
        Need::Public => Ok(()),
        Need::Audit => audit_access(&actor, req.uri().query()),
        n => actor.allows(n.kind().unwrap_or(Kind::Admin), &datasets),
    };
    // The audit row of a write, but for its dataset and status; reads have none.
    let recorded = write.then(|| AuditEntry {
        actor: actor.name.clone(),
        request_id: req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("-").to_owned(),
        action: rule.action.to_owned(),
        method: method.to_string(),
        path: req.uri().path().to_owned(),
        route: Some(route),
        dataset: None,
        status: 0,
    });
    let resp = match allowed {
        Ok(()) => {
            crate::telemetry::context::set_actor(&actor.name);
            let mut req = req;
            req.extensions_mut().insert(actor.clone());
            next.run(req).await
        }
        Err(needed) => forbidden(&format!("this needs the scope {needed}"), &needed),
    };
    if let Some(recorded) = recorded {
        let request_id = &recorded.request_id;
        let entries = audit_entries(&recorded, &datasets, resp.status());
        // With the database unavailable (503) the write did not happen and
        // the audit row could not be written either: waiting for it again
        // would only double the time to answer. The log keeps it.
        let unavailable = resp.status() == StatusCode::SERVICE_UNAVAILABLE;
        if unavailable {
            tracing::warn!(actor = %actor.name, action = rule.action, request_id, "write refused: database unavailable");
        } else if let Err(e) = app.store.record_audit(&entries).await {
            tracing::error!(error = %e, request_id, "cannot write the audit row of a write");
        }
    }
    resp
}

/// The secret of an `Authorization: Bearer <secret>` header.
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, secret) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| secret.trim().to_owned())
}

/// A write whose body is not declared JSON: a cross-site form (which can
/// only send form, multipart or text/plain bodies) cannot write.
fn not_json(req: &Request) -> Option<Response> {
    let ct = req.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("?").to_ascii_lowercase());
    let has_body =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_none_or(|n| n.trim() != "0")
            && (req.headers().contains_key(header::CONTENT_LENGTH)
                || req.headers().contains_key(header::TRANSFER_ENCODING));
    let ok = match ct {
        None => !has_body,
        Some(ct) => {
            let essence = ct.split(';').next().unwrap_or_default().trim().to_owned();
            essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
        }
    };
    if ok {
        return None;
    }
    let body = error_body(
        "unsupported_media_type",
        "writes take a JSON body: send Content-Type: application/json",
        json!({"field": "content-type"}),
    );
    Some((StatusCode::UNSUPPORTED_MEDIA_TYPE, Json(body)).into_response())
}

/// The datasets a request touches, per its rule. Reading the body puts it
/// back for the handler.
async fn touched(app: &AppState, rule: &Rule, req: Request) -> Result<(Request, Vec<String>), Error> {
    let source = match rule.need {
        Need::Produce(s) | Need::Operate(s) => s,
        _ => return Ok((req, Vec::new())),
    };
    let (mut parts, body) = req.into_parts();
    let params: Vec<(String, String)> = match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(p) => p.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
        Err(_) => Vec::new(),
    };
    let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let (body, datasets) = match source {
        Datasets::Path => (body, param("dataset").into_iter().collect()),
        Datasets::Batch => {
            let found = match param("batch_id") {
                Some(id) => app.store.dataset_of_batch(&id).await?,
                None => None,
            };
            (body, found.into_iter().collect())
        }
        Datasets::Body | Datasets::LineageOutputs => {
            let bytes = to_bytes(body, BODY_LIMIT).await.map_err(|_| payload_too_large())?;
            let datasets = if source == Datasets::Body {
                serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|v| v.get("dataset").and_then(Value::as_str).map(str::to_owned))
                    .into_iter()
                    .collect()
            } else {
                RunEvent::parse(&bytes)
                    .map(|e| {
                        let mut ds: Vec<String> = e.outputs.iter().map(|o| o.dataset.to_string()).collect();
                        ds.dedup();
                        ds
                    })
                    .unwrap_or_default()
            };
            (Body::from(bytes), datasets)
        }
    };
    Ok((Request::from_parts(parts, body), datasets))
}

/// `GET /v1/audit`: `admin`, or `operate` for the dataset it filters on.
fn audit_access(actor: &Actor, query: Option<&str>) -> Result<(), String> {
    if actor.allows(Kind::Admin, &[]).is_ok() {
        return Ok(());
    }
    let dataset = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "dataset")
        .map(|(_, v)| v.into_owned())
        .filter(|d| !d.is_empty());
    match dataset {
        Some(d) => actor.allows(Kind::Operate, std::slice::from_ref(&d)).map_err(|n| format!("admin or {n}")),
        None => Err("admin (or operate:<glob> with dataset=)".to_owned()),
    }
}

/// The rows of a write: one per dataset it touched, or one.
fn audit_entries(recorded: &AuditEntry, datasets: &[String], status: StatusCode) -> Vec<AuditEntry> {
    let entry = |dataset: Option<&String>| AuditEntry {
        dataset: dataset.cloned(),
        status: status.as_u16(),
        ..recorded.clone()
    };
    if datasets.is_empty() {
        vec![entry(None)]
    } else {
        datasets.iter().map(|d| entry(Some(d))).collect()
    }
}

fn unauthenticated(e: &AuthError) -> Response {
    let body = error_body(e.code(), &e.to_string(), json!({}));
    let mut resp = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    let challenge = match e {
        AuthError::Expired(_) => "Bearer error=\"invalid_token\", error_description=\"the token expired\"",
        _ => "Bearer",
    };
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    resp
}

fn forbidden(message: &str, needed: &str) -> Response {
    let body = error_body("forbidden", message, json!({"needed_scope": needed}));
    (StatusCode::FORBIDDEN, Json(body)).into_response()
}
