//! THE table of what each route needs. The auth layer looks every request up
//! here by method and route template; a route without a row is refused (and
//! a test fails), so a new route cannot be served unguarded by accident.

use super::scopes::Kind;

/// Where the dataset(s) a request touches come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datasets {
    /// The `{dataset}` path parameter.
    Path,
    /// The `dataset` field of the JSON body.
    Body,
    /// The stored batch named by the `{batch_id}` path parameter.
    Batch,
    /// Every output dataset of an OpenLineage event.
    LineageOutputs,
}

/// What a route asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Anyone, even without a token.
    Public,
    /// `read`.
    Read,
    /// `read`, or anyone with `--public-ready`.
    Ready,
    /// `produce:<glob>` matching the datasets.
    Produce(Datasets),
    /// `operate:<glob>` matching the datasets.
    Operate(Datasets),
    /// `admin`.
    Admin,
    /// `admin`, or `operate:<glob>` matching the `dataset=` filter.
    Audit,
}

impl Need {
    pub fn kind(self) -> Option<Kind> {
        match self {
            Need::Public => None,
            Need::Read | Need::Ready => Some(Kind::Read),
            Need::Produce(_) => Some(Kind::Produce),
            Need::Operate(_) => Some(Kind::Operate),
            Need::Admin | Need::Audit => Some(Kind::Admin),
        }
    }
}

/// One route: its method, its template as axum matches it, the name its
/// writes have in the audit log, and what it needs.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub method: &'static str,
    pub path: &'static str,
    pub action: &'static str,
    pub need: Need,
}

const fn rule(method: &'static str, path: &'static str, action: &'static str, need: Need) -> Rule {
    Rule { method, path, action, need }
}

pub const RULES: &[Rule] = &[
    rule("GET", "/", "console.redirect", Need::Public),
    rule("GET", "/healthz", "health", Need::Public),
    rule("GET", "/metrics", "metrics", Need::Read),
    rule("GET", "/openapi.json", "openapi", Need::Public),
    rule("GET", "/ready", "ready", Need::Ready),
    rule("GET", "/v1/alerts", "alerts.list", Need::Read),
    rule("GET", "/v1/audit", "audit.list", Need::Audit),
    rule("GET", "/v1/batches", "batch.list", Need::Read),
    rule("POST", "/v1/batches", "batch.start", Need::Produce(Datasets::Body)),
    rule("GET", "/v1/batches/{batch_id}", "batch.read", Need::Read),
    rule("POST", "/v1/batches/{batch_id}/heartbeat", "batch.heartbeat", Need::Produce(Datasets::Batch)),
    rule("POST", "/v1/batches/{batch_id}/written", "batch.written", Need::Produce(Datasets::Batch)),
    rule("POST", "/v1/batches/{batch_id}/commit", "batch.commit", Need::Produce(Datasets::Batch)),
    rule("POST", "/v1/batches/{batch_id}/fail", "batch.fail", Need::Produce(Datasets::Batch)),
    rule("GET", "/v1/changes", "changes.list", Need::Read),
    rule("GET", "/v1/datasets", "dataset.list", Need::Read),
    rule("GET", "/v1/datasets/{dataset}", "dataset.read", Need::Read),
    rule("PUT", "/v1/datasets/{dataset}", "dataset.put", Need::Operate(Datasets::Path)),
    // Read, like the alerts and dataset policies whose URLs and payloads it shows.
    rule("GET", "/v1/deliveries", "deliveries.list", Need::Read),
    rule("GET", "/v1/lineage", "lineage.read", Need::Read),
    rule("POST", "/api/v1/lineage", "openlineage.event", Need::Produce(Datasets::LineageOutputs)),
    rule("GET", "/v1/partitions", "partition.list", Need::Read),
    rule(
        "POST",
        "/v1/partitions/{dataset}/{partition}/invalidate",
        "partition.invalidate",
        Need::Operate(Datasets::Path),
    ),
    rule("POST", "/v1/repairs", "repair.create", Need::Operate(Datasets::Body)),
    rule("GET", "/v1/repairs/{id}", "repair.read", Need::Read),
    rule("GET", "/v1/tokens", "token.list", Need::Admin),
    rule("POST", "/v1/tokens", "token.create", Need::Admin),
    rule("DELETE", "/v1/tokens/{name}", "token.revoke", Need::Admin),
    // The console (src/ui): read-only pages. With auth required they need a
    // `read` bearer, which the console's sign-in lends them from its session
    // cookie (`ui::session`; its `POST /ui/login` and `POST /ui/logout` are
    // answered there, before routing, and write nothing to the registry).
    rule("GET", "/ui", "console.redirect", Need::Public),
    rule("GET", "/ui/login", "console.login", Need::Public),
    rule("GET", "/ui/static/*", "console.asset", Need::Public),
    rule("GET", "/ui/*", "console.page", Need::Read),
];

/// The rule for a request, by method and matched route template. A rule
/// path ending in `/*` covers every route under it (the first matching row
/// wins, so the more specific prefix comes first).
pub fn rule_for(method: &str, path: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.method == method && covers(r.path, path))
}

/// Does a rule's path cover a route template?
pub fn covers(rule_path: &str, route: &str) -> bool {
    match rule_path.strip_suffix('*') {
        Some(prefix) => route.starts_with(prefix),
        None => rule_path == route,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_has_one_rule() {
        for (i, a) in RULES.iter().enumerate() {
            assert!(
                !RULES[i + 1..].iter().any(|b| a.method == b.method && a.path == b.path),
                "{} {} has two rules",
                a.method,
                a.path
            );
        }
    }

    #[test]
    fn prefix_rules_cover_the_routes_under_them() {
        assert_eq!(rule_for("GET", "/ui/static/console.css").unwrap().need, Need::Public);
        assert_eq!(rule_for("GET", "/ui/datasets/{dataset}").unwrap().need, Need::Read);
        assert_eq!(rule_for("GET", "/ui").unwrap().need, Need::Public);
        assert_eq!(rule_for("GET", "/ui/login").unwrap().need, Need::Public);
        assert!(rule_for("POST", "/ui/datasets").is_none(), "a method without a rule is refused");
    }

    #[test]
    fn every_write_needs_more_than_read() {
        for r in RULES.iter().filter(|r| r.method != "GET") {
            assert!(!matches!(r.need, Need::Public | Need::Read | Need::Ready), "{} {} is a write", r.method, r.path);
        }
    }
}
