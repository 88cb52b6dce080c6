//! Every request field of the API is reachable from the command line: this
//! walks the request bodies (and request headers) of `openapi/openapi.json`
//! and fails when a field has no flag on the command that sends it.

use serde_json::Value;

use super::run;

/// `(method, path, command, renamed)`: the command that sends an operation
/// with a request body, and the flags whose names are not the field's in
/// kebab case.
type Sender = (&'static str, &'static str, &'static [&'static str], &'static [(&'static str, &'static str)]);

const COMMANDS: &[Sender] = &[
    (
        "post",
        "/v1/batches",
        &["batch", "start"],
        &[
            ("partitions", "--partition"),
            ("inputs", "--input"),
            ("cleaned_batch_ids", "--cleaned-batch-id"),
            ("scope", "--scope-json"),
        ],
    ),
    // The statistics file holds the commit body less the marker.
    (
        "post",
        "/v1/batches/{batch_id}/commit",
        &["batch", "commit"],
        &[("partitions", "--partition-stats"), ("source", "--partition-stats")],
    ),
    ("post", "/v1/batches/{batch_id}/fail", &["batch", "fail"], &[]),
    ("post", "/v1/batches/{batch_id}/written", &["batch", "written"], &[("partitions", "--rows")]),
    ("put", "/v1/datasets/{dataset}", &["dataset", "set"], &[("unique_key", "--unique-key")]),
    ("post", "/v1/partitions/{dataset}/{partition}/invalidate", &["invalidate"], &[]),
    ("post", "/v1/repairs", &["repair", "plan"], &[("partitions", "--partition")]),
    // `batchgate token create` makes the same token directly in the database.
    ("post", "/v1/tokens", &["token", "create"], &[("scopes", "--scope"), ("expires_in", "--expires")]),
];

/// Operations with a body that no person types: OpenLineage producers post
/// these.
const NOT_FOR_THE_COMMAND_LINE: &[(&str, &str)] = &[("post", "/api/v1/lineage")];

fn resolve<'a>(spec: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => spec.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("dangling $ref {r}")),
        None => schema,
    }
}

/// The request fields of an operation: its body's properties and its header
/// parameters.
fn fields(spec: &Value, op: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(content) = op["requestBody"]["content"].as_object() {
        for media in content.values() {
            let schema = resolve(spec, &media["schema"]);
            for name in schema["properties"].as_object().expect("a request body with properties").keys() {
                out.push(name.clone());
            }
        }
    }
    for p in op["parameters"].as_array().into_iter().flatten() {
        let p = resolve(spec, p);
        if p["in"] == "header" {
            out.push(p["name"].as_str().unwrap().to_ascii_lowercase());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_field_has_a_command_line_flag() {
    let spec: Value = serde_json::from_str(include_str!("../../../openapi/openapi.json")).unwrap();
    let mut missing = Vec::new();
    let mut checked = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let fields = fields(&spec, op);
            if op["requestBody"].is_null() && fields.is_empty() {
                continue;
            }
            if NOT_FOR_THE_COMMAND_LINE.contains(&(method.as_str(), path.as_str())) {
                continue;
            }
            let Some((_, _, command, renamed)) = COMMANDS.iter().find(|(m, p, _, _)| m == method && p == path) else {
                missing.push(format!("{} {path}: no command sends it", method.to_uppercase()));
                continue;
            };
            let mut help_args = command.to_vec();
            help_args.push("--help");
            let help = run("http://127.0.0.1:9", &help_args).await.expect(0).stdout;
            for field in fields {
                let flag = renamed
                    .iter()
                    .find(|(f, _)| *f == field)
                    .map_or_else(|| format!("--{}", field.replace('_', "-")), |(_, flag)| (*flag).to_owned());
                checked += 1;
                if !help
                    .split_whitespace()
                    .any(|w| w.trim_end_matches(',') == flag || w.starts_with(&format!("{flag}=")))
                {
                    missing.push(format!(
                        "{} {path}: {field} has no {flag} on `batchgate {}`",
                        method.to_uppercase(),
                        command.join(" ")
                    ));
                }
            }
        }
    }
    assert!(missing.is_empty(), "request fields the command line cannot send:\n{}", missing.join("\n"));
    assert!(checked > 25, "only {checked} fields were checked: is the spec read?");
}
