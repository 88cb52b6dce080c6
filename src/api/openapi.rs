//! The OpenAPI document, generated from the Rust types and the handlers'
//! `#[utoipa::path]` annotations. `openapi/openapi.json` is its committed
//! copy: `batchgate openapi > openapi/openapi.json` writes it, and a test
//! fails when the two differ.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::OpenApi as Document;
use utoipa::openapi::{RefOr, Response};
use utoipa::{Modify, OpenApi};

use crate::http;

/// The operations anyone may call, token or not.
const PUBLIC: &[&str] = &["getHealth", "getOpenApi"];

const DESCRIPTION: &str = "The registry of data batches and the readiness gate. A task starts a batch, writes its partitions, then commits with evidence; the service checks the evidence and only then marks the partitions ready. Sensors poll `/ready`; dashboards read history.

All bodies are JSON. Errors are `{\"error\": {\"code\": \"<stable_snake_case>\", \"message\": \"...\", \"details\": {...}}}`. Request bodies refuse unknown fields (422 `unknown_field` naming the field) and keys repeated in one object (422 `duplicate_field`); a NUL (`\\u0000`, `%00`) in any body string, key, path segment or query parameter, and a number too large for a double, are 422 `invalid_field` naming it; bodies over 1 MiB are 413, malformed JSON is 400. Every response carries an `x-request-id` header.

Authentication: `Authorization: Bearer <token>` with an API token (`bgt_…`, from `batchgate token create` or `POST /v1/tokens`) or a JWT from the configured identity provider. Required unless the service runs with `--auth off` (the default `auto` is off only on a loopback listen address). Scopes: `read` (every GET), `produce:<glob>` (batch writes and OpenLineage events for matching datasets), `operate:<glob>` (policies, invalidations, repairs), `admin` (everything, tokens). `/healthz` and `/openapi.json` are public, `/ready` too with `--public-ready`. Writes with a body must send `Content-Type: application/json` (else 415 `unsupported_media_type`).";

#[derive(OpenApi)]
#[openapi(
    info(title = "batchgate", version = "0.1.0"),
    paths(
        http::batches::start,
        http::batches::list,
        http::batches::read,
        http::batches::heartbeat,
        http::batches::written,
        http::batches::commit,
        http::batches::fail,
        http::datasets::list,
        http::datasets::read,
        http::datasets::put,
        http::partitions::list,
        http::partitions::invalidate,
        http::ready::ready,
        http::service::healthz,
        http::metrics::scrape,
        http::service::openapi,
        http::alerts::list,
        http::deliveries::list,
        http::lineage::changes,
        http::lineage::lineage,
        http::openlineage::intake,
        http::repairs::create,
        http::repairs::read,
        http::tokens::create,
        http::tokens::list,
        http::tokens::revoke,
        http::audit::list,
    ),
    components(
        // Named only by a parameter, which does not bring its schema along.
        schemas(
            crate::domain::checks::CheckName,
            crate::domain::batch::EventKind,
            crate::api::schemas::Until,
            crate::api::schemas::TaskNameText,
            crate::api::schemas::DatasetNameText,
            crate::api::schemas::PartitionNameText,
            crate::api::schemas::BatchIdText,
        ),
        responses(
            super::BadRequest,
            super::PayloadTooLarge,
            super::Invalid,
            super::BatchNotFound,
            super::StorageError,
            super::StorageUnavailable,
            super::Unauthenticated,
            super::Forbidden,
            super::UnsupportedMediaType,
        )
    ),
    tags(
        (name = "batches", description = "Start, heartbeat, commit, fail and read batches."),
        (name = "datasets", description = "A dataset's policy."),
        (name = "partitions", description = "Partitions and their standing."),
        (name = "readiness", description = "What sensors poll."),
        (name = "service", description = "Health, metrics and this document."),
        (name = "openlineage", description = "OpenLineage intake: the endpoint Airflow's and Spark's OpenLineage integrations post to."),
        (name = "lineage", description = "What each batch read, staleness, invalidation and the change feed."),
        (name = "alerts", description = "Alerts for rejected, failed and abandoned batches and missed deadlines."),
        (name = "auth", description = "API tokens and the audit log."),
        (name = "deliveries", description = "The outbox: alert webhooks, Airflow asset events and CloudEvents, and what became of each."),
    ),
    modifiers(&Finish),
)]
struct ApiDoc;

/// What the derive cannot say: the long description, bearer security on
/// every operation but the public ones; and response links written with the
/// field names OpenAPI gives them ([`spec_links`]).
struct Finish;

impl Modify for Finish {
    fn modify(&self, doc: &mut Document) {
        doc.info.description = Some(DESCRIPTION.to_owned());
        doc.info.license = None;
        doc.info.contact = None;
        let components = doc.components.get_or_insert_with(Default::default);
        let mut bearer = Http::new(HttpAuthScheme::Bearer);
        bearer.description = Some("An API token (`bgt_…`) or a JWT.".to_owned());
        components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
        doc.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new::<_, _, &str>("bearer", [])]);
        for item in doc.paths.paths.values_mut() {
            for op in [&mut item.get, &mut item.post, &mut item.put, &mut item.delete].into_iter().flatten() {
                if op.operation_id.as_deref().is_some_and(|id| PUBLIC.contains(&id)) {
                    op.security = Some(Vec::new());
                }
                for response in op.responses.responses.values_mut() {
                    if let RefOr::T(response) = response {
                        spec_links(response);
                    }
                }
            }
        }
    }
}

/// utoipa 5.5 serialises a response's links with its Rust field names
/// (`operation_id`, `operation_ref`, `request_body`), which OpenAPI readers
/// do not know, so a link would name no operation. This writes each link as
/// the Link Object names its fields (`operationId`, …) into the response's
/// `links` instead; the derive's `links(...)` stay the source.
fn spec_links(response: &mut Response) {
    if response.links.is_empty() {
        return;
    }
    let mut links = serde_json::Map::new();
    for (name, link) in std::mem::take(&mut response.links) {
        let RefOr::T(link) = link else {
            unreachable!("links are written inline in the handlers' annotations");
        };
        let mut object = serde_json::Map::new();
        let mut put = |key: &str, value: serde_json::Value| {
            object.insert(key.to_owned(), value);
        };
        if !link.operation_id.is_empty() {
            put("operationId", link.operation_id.into());
        }
        if !link.operation_ref.is_empty() {
            put("operationRef", link.operation_ref.into());
        }
        if !link.parameters.is_empty() {
            put("parameters", link.parameters.into_iter().collect());
        }
        if let Some(body) = link.request_body {
            put("requestBody", body);
        }
        if !link.description.is_empty() {
            put("description", link.description.into());
        }
        assert!(link.server.is_none(), "a link's server is not written");
        links.insert(name, object.into());
    }
    response.extensions.get_or_insert_with(Default::default).insert("links".to_owned(), links.into());
}

/// The document.
pub fn document() -> Document {
    ApiDoc::openapi()
}

/// The document as the committed file holds it: pretty JSON and a newline.
pub fn json() -> String {
    let mut text = document().to_pretty_json().expect("the OpenAPI document serialises");
    text.push('\n');
    text
}
