//! Every answer the test client receives is checked against the generated
//! OpenAPI document: the operation (method and path template) must list the
//! status, and the body must validate against that response's schema. An
//! undocumented status or a body the spec does not describe fails the test
//! that received it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Value};

/// The generated document, as JSON.
pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| serde_json::from_str(&batchgate::api::openapi::json()).expect("the generated spec is JSON"))
}

/// The path template of the operation that serves `method path`, if the
/// spec has one (`/v1/batches/{batch_id}` for `/v1/batches/t-20260824-001`).
pub fn template_of(method: &str, path: &str) -> Option<String> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    let method = method.to_ascii_lowercase();
    let mut best: Option<(usize, &String)> = None;
    for (template, item) in spec()["paths"].as_object()? {
        if item.get(&method).is_none() {
            continue;
        }
        let parts: Vec<&str> = template.split('/').collect();
        if parts.len() != segments.len() {
            continue;
        }
        let mut literal = 0;
        let fits = parts.iter().zip(&segments).all(|(t, s)| {
            if t.starts_with('{') && t.ends_with('}') {
                !s.is_empty()
            } else {
                literal += 1;
                t == s
            }
        });
        // A literal segment beats a parameter (`/v1/batches` vs a template).
        if fits && best.is_none_or(|(n, _)| literal > n) {
            best = Some((literal, template));
        }
    }
    best.map(|(_, t)| t.clone())
}

type Checker = Arc<Result<Option<jsonschema::Validator>, String>>;
/// A response's method, route template and status.
type ResponseKey = (String, String, u16);

/// The validator of one response, built once: `Ok(None)` when the response
/// has no JSON body, `Err` when the status is not documented.
fn checker(method: &str, template: &str, status: u16) -> Checker {
    static CACHE: OnceLock<Mutex<HashMap<ResponseKey, Checker>>> = OnceLock::new();
    let key = (method.to_ascii_lowercase(), template.to_owned(), status);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap().get(&key) {
        return hit.clone();
    }
    let built = Arc::new(build(&key.0, template, status));
    cache.lock().unwrap().insert(key, built.clone());
    built
}

fn build(method: &str, template: &str, status: u16) -> Result<Option<jsonschema::Validator>, String> {
    let spec = spec();
    let responses = &spec["paths"][template][method]["responses"];
    let mut response = responses.get(status.to_string()).or_else(|| responses.get("default")).ok_or_else(|| {
        let listed: Vec<&String> = responses.as_object().map(|r| r.keys().collect()).unwrap_or_default();
        format!(
            "{} {template} answered {status}, which the spec does not list (it lists {listed:?})",
            method.to_uppercase()
        )
    })?;
    if let Some(r) = response["$ref"].as_str() {
        response = spec.pointer(r.trim_start_matches('#')).ok_or_else(|| format!("dangling {r}"))?;
    }
    let Some(schema) = response["content"]["application/json"].get("schema") else {
        return Ok(None);
    };
    // The response's schema, with the components its `$ref`s point into.
    let mut root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": spec["components"].clone(),
    });
    if let (Some(root), Some(schema)) = (root.as_object_mut(), schema.as_object()) {
        root.extend(schema.clone());
    }
    jsonschema::validator_for(&root).map(Some).map_err(|e| format!("the schema of {method} {template} {status}: {e}"))
}

/// Panics unless `body` is what the spec says `method path` answers with `status`.
pub fn check(method: &str, path: &str, status: u16, body: &Value) {
    let Some(template) = template_of(method, path) else {
        // Not an operation of the API (the console, an unknown route).
        return;
    };
    let checker = checker(method, &template, status);
    let validator = match checker.as_ref() {
        Err(e) => panic!("response-schema check: {e}; body: {body}"),
        Ok(None) => return,
        Ok(Some(v)) => v,
    };
    let errors: Vec<String> =
        validator.iter_errors(body).take(5).map(|e| format!("{e} (at {})", e.instance_path())).collect();
    assert!(
        errors.is_empty(),
        "response-schema check: {} {template} ({path}) answered {status} with a body the spec does not describe:\n  {}\nbody: {body}",
        method.to_uppercase(),
        errors.join("\n  ")
    );
}
