//! The spec in `openapi/` is the API: every route the router serves is in
//! the spec, and every operation in the spec is served.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{Backend, TestApp};

/// The HTTP methods a route or a spec path item may have, as the router and
/// OpenAPI spell them.
const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// `(METHOD, /path/{param})` pairs declared by `.route(…)` calls in `src/http`.
pub(crate) fn routes_in_source() -> BTreeSet<(String, String)> {
    routes_in(concat!(env!("CARGO_MANIFEST_DIR"), "/src/http"))
}

/// The same for the `.rs` files of any folder (`src/ui` for the console).
pub(crate) fn routes_in(dir: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for chunk in text.split(".route(").skip(1) {
            // rustfmt may break the line after `.route(`.
            let Some((path, rest)) = chunk.trim_start().strip_prefix('"').and_then(|c| c.split_once('"')) else {
                continue;
            };
            // The method router runs to the parenthesis that closes `.route(`.
            let mut depth = 1;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(rest.len(), |(i, _)| i);
            let chain = &rest[..end];
            for method in METHODS {
                let called = chain
                    .match_indices(&format!("{method}("))
                    .any(|(i, _)| i == 0 || !chain[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
                if called {
                    out.insert((method.to_uppercase(), path.to_owned()));
                }
            }
        }
    }
    out
}

/// `openapi/openapi.json` is what the code generates: regenerate it with
/// `cargo run -- openapi > openapi/openapi.json` (or run this test with
/// `BATCHGATE_WRITE_OPENAPI=1`) and commit it.
#[test]
fn the_committed_spec_is_the_generated_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let generated = batchgate::api::openapi::json();
    if std::env::var_os("BATCHGATE_WRITE_OPENAPI").is_some() {
        std::fs::write(path, &generated).expect("write openapi/openapi.json");
        return;
    }
    let committed = std::fs::read_to_string(path).expect("openapi/openapi.json");
    if committed != generated {
        let (line, (ours, theirs)) = committed
            .lines()
            .zip(generated.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .unwrap_or((committed.lines().count().min(generated.lines().count()), ("<end>", "<end>")));
        panic!(
            "openapi/openapi.json is not what the code generates (first difference at line {}:\n  committed: {ours}\n  generated: {theirs}\n); \
             regenerate it with `cargo run -- openapi > openapi/openapi.json` and commit it",
            line + 1
        );
    }
}

/// Every `$ref` of the generated document points at something in it (a
/// schema named only by a parameter is not collected by itself).
#[test]
fn every_reference_in_the_spec_resolves() {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    out.push(r);
                }
                o.values().for_each(|v| walk(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let spec = crate::conformance::spec();
    let mut refs = Vec::new();
    walk(spec, &mut refs);
    assert!(refs.len() > 100, "only {} references: is the spec read?", refs.len());
    let dangling: BTreeSet<&str> =
        refs.into_iter().filter(|r| spec.pointer(r.trim_start_matches('#')).is_none()).collect();
    assert!(dangling.is_empty(), "references to nothing: {dangling:?}");
}

fn operations_in_spec(spec: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method).is_some() {
                out.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

#[tokio::test]
async fn the_served_spec_lists_exactly_the_routes() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let (status, spec) = app.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    let in_spec = operations_in_spec(&spec);
    let in_source = routes_in_source();
    assert!(in_source.len() >= 10, "route scan found too little: {in_source:?}");
    assert_eq!(in_spec, in_source, "openapi/openapi.json and src/http disagree");

    // And each one is really served: no route_not_found / method_not_allowed.
    for (method, path) in &in_spec {
        let concrete = path.replace("{batch_id}", "t-20260824-001").replace("{dataset}", "d.x");
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let resp = app
            .client
            .request(method.clone(), format!("{}{concrete}", app.base))
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED && body["error"]["code"] != "route_not_found",
            "{method} {concrete} is in the spec but not served: {status} {body}"
        );
    }
}

/// The operation with this `operationId`: its method and path.
fn operation_by_id<'a>(spec: &'a Value, id: &str) -> Option<(String, &'a str, &'a Value)> {
    spec["paths"].as_object()?.iter().find_map(|(path, item)| {
        METHODS.into_iter().find(|m| item[*m]["operationId"] == id).map(|m| (m.to_uppercase(), path.as_str(), &item[m]))
    })
}

/// Every response link in the spec is one OpenAPI readers can follow: it
/// names its operation by `operationId` (not utoipa's `operation_id`, which
/// readers ignore), that operation exists, each parameter is one of its
/// parameters, and each `$response.body#/…` names a property of the
/// response's schema.
#[test]
fn every_link_names_an_operation_its_parameters_and_a_property() {
    let spec = crate::conformance::spec();
    let mut seen = 0;
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().unwrap() {
            let Some(responses) = op.get("responses").and_then(Value::as_object) else {
                continue;
            };
            for (status, response) in responses {
                let Some(links) = response.get("links").and_then(Value::as_object) else {
                    continue;
                };
                let schema = &response["content"]["application/json"]["schema"];
                let schema = match schema["$ref"].as_str() {
                    Some(r) => spec.pointer(r.trim_start_matches('#')).expect("the response schema resolves"),
                    None => schema,
                };
                for (name, link) in links {
                    seen += 1;
                    let at = format!("{method} {path} {status} link {name}");
                    let keys: BTreeSet<&str> = link.as_object().unwrap().keys().map(String::as_str).collect();
                    let known = BTreeSet::from([
                        "operationId",
                        "operationRef",
                        "parameters",
                        "requestBody",
                        "description",
                        "server",
                    ]);
                    assert!(keys.is_subset(&known), "{at}: fields OpenAPI does not name: {keys:?}");
                    let id = link["operationId"].as_str().unwrap_or_else(|| panic!("{at}: no operationId"));
                    let (_, _, target) = operation_by_id(spec, id).unwrap_or_else(|| panic!("{at}: no operation {id}"));
                    for (parameter, expression) in link["parameters"].as_object().unwrap() {
                        let declared =
                            target["parameters"].as_array().into_iter().flatten().any(|p| p["name"] == *parameter);
                        assert!(declared, "{at}: {id} has no parameter {parameter}");
                        let pointer = expression.as_str().and_then(|e| e.strip_prefix("$response.body#"));
                        let pointer =
                            pointer.unwrap_or_else(|| panic!("{at}: {expression} is not a $response.body pointer"));
                        let property = pointer.trim_start_matches('/');
                        assert!(
                            schema["properties"].get(property).is_some(),
                            "{at}: the response has no property {property}"
                        );
                    }
                }
            }
        }
    }
    assert!(seen >= 5, "only {seen} links in the spec");
}

/// Following the links of a real start reaches that batch: each linked
/// operation, called with the parameters the link takes from the answer,
/// finds the batch (the record answers 200 with its id; the others answer
/// anything but a 404).
#[tokio::test]
async fn the_links_of_a_start_reach_the_batch() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let spec = crate::conformance::spec();
    let links = spec["paths"]["/v1/batches"]["post"]["responses"]["201"]["links"].as_object().expect("links");
    let (status, started) = app.start("links", "l.d", "2026-08-24", &["dt=2026-08-24"]).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let batch_id = started["batch_id"].as_str().unwrap();
    let mut followed = BTreeSet::new();
    // The record first: the writes after it change the batch's state.
    let mut names: Vec<&String> = links.keys().collect();
    names.sort_by_key(|n| *n != "record");
    for name in names {
        let link = &links[name];
        let (method, path, _) = operation_by_id(spec, link["operationId"].as_str().unwrap()).unwrap();
        let mut concrete = path.to_owned();
        for (parameter, expression) in link["parameters"].as_object().unwrap() {
            let pointer = expression.as_str().unwrap().strip_prefix("$response.body#").unwrap();
            let value = started.pointer(pointer).and_then(Value::as_str).expect("the link's value is in the answer");
            concrete = concrete.replace(&format!("{{{parameter}}}"), value);
        }
        assert!(!concrete.contains('{'), "{name}: {concrete} has parameters the link does not fill");
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let body = (method == reqwest::Method::POST).then(|| serde_json::json!({}));
        let (status, answer) = app.request(method.clone(), &concrete, body.as_ref()).await;
        assert_ne!(status, StatusCode::NOT_FOUND, "{name}: {method} {concrete}: {answer}");
        if name == "record" {
            assert_eq!(status, StatusCode::OK, "{answer}");
            assert_eq!(answer["batch_id"], batch_id);
        }
        followed.insert(name.as_str());
    }
    assert_eq!(followed, BTreeSet::from(["commit", "fail", "heartbeat", "record", "written"]));
}
