//! Shapes the spec names that have no Rust type of their own. The enums the
//! registry stores are typed where they live (`domain/`, `string_enum!`
//! derives `ToSchema`). The response-schema check in the API tests keeps
//! these true to what the service sends.

use utoipa::ToSchema;

/// Where a delivery stands.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum DeliveryState {
    Pending,
    Delivered,
    GivenUp,
}

/// When a `/ready` long-poll may answer before its deadline.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum Until {
    Ready,
    ReadyOrRejected,
}

// Names as the spec states them. The rules live in `domain::names` (and
// `auth`); these patterns say the same thing to clients and fuzzers, and the
// tests below hold each pattern to its parser. A pattern may accept a little
// the parser refuses (`.`, a repeated partition key, an invisible
// character), never the reverse.

/// A producing task, e.g. an Airflow `dag_id.task_id`: 1 to 200 of letters,
/// digits, `_`, `.` and `-`.
#[derive(ToSchema)]
#[schema(as = TaskName, pattern = "^[A-Za-z0-9_.-]{1,200}$", example = "dws_order_detail_daily")]
#[allow(dead_code)]
pub struct TaskNameText(String);

/// A target table, e.g. `dws.order_detail`: 1 to 200 of letters, digits,
/// `_`, `.`, `:` and `-`.
#[derive(ToSchema)]
#[schema(as = DatasetName, pattern = "^[A-Za-z0-9_.:-]{1,200}$", example = "dws.order_detail")]
#[allow(dead_code)]
pub struct DatasetNameText(String);

/// A Hive-style partition spec `k=v[/k=v…]`, at most 1,000 characters: keys
/// are `[A-Za-z0-9_]+` and may not repeat; values are non-empty and hold no
/// `/`, `\`, `=`, `*`, white space, control or invisible characters, and are
/// not `.` or `..`.
#[derive(ToSchema)]
#[schema(
    as = PartitionName,
    pattern = r"^[A-Za-z0-9_]+=[^/\\=*\s\x00-\x1f\x7f-\x9f]+(/[A-Za-z0-9_]+=[^/\\=*\s\x00-\x1f\x7f-\x9f]+)*$",
    example = "dt=2026-08-24"
)]
#[allow(dead_code)]
pub struct PartitionNameText(String);

/// `{task}-{YYYYMMDD}-{NNN}`: the task, the data date and the attempt number
/// (from 001, never reused).
#[derive(ToSchema)]
#[schema(as = BatchId, pattern = "^[A-Za-z0-9_.-]{1,200}-[0-9]{8}-[0-9]{3,}$", example = "dws_order_detail_daily-20260824-003")]
#[allow(dead_code)]
pub struct BatchIdText(String);

/// What a token may do: `read`, `produce:<glob>`, `operate:<glob>` or
/// `admin`; a glob is 1 to 200 of letters, digits, `.`, `:`, `_`, `-` and `*`
/// (any run of characters).
#[derive(ToSchema)]
#[schema(as = ScopeName, pattern = "^(read|admin|(produce|operate):[A-Za-z0-9.:_*-]{1,200})$", example = "produce:sales.*")]
#[allow(dead_code)]
pub struct ScopeText(String);

/// A duration in humantime's syntax: numbers with units, e.g. `90d`, `12h`,
/// `1h 30m`.
#[derive(ToSchema)]
#[schema(pattern = r"^\s*[0-9]+(\.[0-9]+)?\s*[A-Za-z]+(\s*[0-9]+(\.[0-9]+)?\s*[A-Za-z]+)*\s*$", example = "90d")]
#[allow(dead_code)]
pub struct HumanDuration(String);

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::domain::names::{BatchId, DatasetName, PartitionSpec, TaskName};

    /// A validator for a named string of the served document, read by a JSON
    /// Schema implementation (ECMA-262 patterns), as clients and fuzzers read it.
    fn named(name: &str) -> jsonschema::Validator {
        let doc = serde_json::to_value(crate::api::openapi::document()).expect("the document serialises");
        let schema: &Value = &doc["components"]["schemas"][name];
        assert!(schema["pattern"].is_string(), "{name} has no pattern: {schema}");
        jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Every sample the parser takes must match; every sample it refuses
    /// must not, except the few a pattern cannot see (listed per case).
    fn agree(name: &str, parses: impl Fn(&str) -> bool, samples: &[&str], pattern_only: &[&str]) {
        let schema = named(name);
        for s in samples {
            assert_eq!(schema.is_valid(&json!(s)), parses(s), "{name}: pattern and parser disagree on {s:?}");
        }
        for s in pattern_only {
            assert!(schema.is_valid(&json!(s)) && !parses(s), "{name}: {s:?} was expected to pass the pattern only");
        }
    }

    #[test]
    fn task_and_dataset_patterns_say_what_the_parsers_take() {
        let long = "a".repeat(200);
        let too_long = "a".repeat(201);
        let samples = [
            "dws_order_detail_daily",
            "dag.task-1",
            "ns:table",
            "",
            "a b",
            "a/b",
            "é",
            "a\u{0}",
            "a*",
            long.as_str(),
            too_long.as_str(),
        ];
        agree("TaskName", |s| TaskName::parse(s).is_ok(), &samples, &[".", ".."]);
        agree("DatasetName", |s| DatasetName::parse(s).is_ok(), &samples, &[".", ".."]);
    }

    #[test]
    fn partition_pattern_says_what_the_parser_takes() {
        agree(
            "PartitionName",
            |s| PartitionSpec::parse(s).is_ok(),
            &[
                "dt=2026-08-24",
                "dt=2026-08-24/region=cn",
                "dt=20260824/hh=01",
                "k=v:w",
                "k=é",
                "",
                "dt",
                "dt=",
                "=v",
                "d t=1",
                "dt=a b",
                "dt=a\tb",
                "dt=a\u{85}b",
                "dt=a\u{3000}b",
                "dt=a=b",
                "dt=*",
                "dt=a\\b",
                "dt=1/",
                "/dt=1",
                "dt=1//r=2",
                "dt=1\u{0}",
                "dt=1\u{7f}",
            ],
            &["dt=.", "dt=..", "dt=1/dt=2", "dt=a\u{200b}"],
        );
    }

    #[test]
    fn batch_id_pattern_says_what_the_parser_takes() {
        agree(
            "BatchId",
            |s| BatchId::parse(s).is_ok(),
            &[
                "dws_order_detail_daily-20260824-003",
                "a-b-20260824-1000",
                "t-20260824-01",
                "t-2026082-001",
                "t-20260824-00a",
                "-20260824-001",
                "t 1-20260824-001",
            ],
            &["t-20261340-001", "t-20260824-000"],
        );
    }

    #[test]
    fn scope_pattern_says_what_the_parser_takes() {
        use crate::auth::scopes::Scope;
        agree(
            "ScopeName",
            |s| s.parse::<Scope>().is_ok(),
            &[
                "read",
                "admin",
                "produce:sales.*",
                "operate:*",
                "produce:kafka:orders",
                "produce:",
                "write",
                "read:x",
                "produce:a b",
                "",
            ],
            &[],
        );
    }

    #[test]
    fn duration_pattern_takes_what_the_parser_takes() {
        use crate::auth::tokens::parse_lifetime;
        agree(
            "HumanDuration",
            |s| parse_lifetime(s).is_ok(),
            &["90d", "12h", "1h 30m", " 2w ", "1.5h", "", "soon", "d", "12", "-1d", "1.h"],
            &["5s", "90parsecs", "200years"],
        );
    }
}
