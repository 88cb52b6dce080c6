//! Authentication and authorisation: every route × every scope, token
//! revocation across replicas, expiry, hashes only in the database, JWTs,
//! the audit log and JSON-only writes.

use std::collections::BTreeSet;

use batchgate::auth::rules::{covers, rule_for, RULES};
use batchgate::auth::AuthMode;
use chrono::Duration;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::{Backend, TestApp};
use crate::on_both_backends;

/// The admin token every secured test instance is given by the environment.
pub const BOOT: &str = "bgt_bootstrap-secret-for-tests-only-0123456789";
const DATASET: &str = "sales.orders";
const PART: &str = "dt=2026-08-24";

pub async fn secured(backend: Backend) -> Option<TestApp> {
    TestApp::spawn_with(backend, |s| {
        s.auth = AuthMode::Required;
        s.bootstrap_token = Some(BOOT.into());
    })
    .await
}

/// Who may call a route, written down here independently of
/// `src/auth/rules.rs`: the HTTP test below holds the two against each other.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    Anyone,
    Readers,
    Producers,
    Operators,
    Admins,
    /// `admin`, or `operate` for the `dataset=` asked about.
    AuditReaders,
}

const EXPECTED: &[(&str, &str, Who)] = &[
    ("GET", "/healthz", Who::Anyone),
    ("GET", "/openapi.json", Who::Anyone),
    ("GET", "/ready", Who::Readers),
    ("GET", "/v1/alerts", Who::Readers),
    ("GET", "/v1/audit", Who::AuditReaders),
    ("GET", "/v1/batches", Who::Readers),
    ("POST", "/v1/batches", Who::Producers),
    ("GET", "/v1/batches/{batch_id}", Who::Readers),
    ("POST", "/v1/batches/{batch_id}/heartbeat", Who::Producers),
    ("POST", "/v1/batches/{batch_id}/written", Who::Producers),
    ("POST", "/v1/batches/{batch_id}/commit", Who::Producers),
    ("POST", "/v1/batches/{batch_id}/fail", Who::Producers),
    ("GET", "/v1/changes", Who::Readers),
    ("GET", "/v1/datasets", Who::Readers),
    ("GET", "/v1/datasets/{dataset}", Who::Readers),
    ("PUT", "/v1/datasets/{dataset}", Who::Operators),
    ("GET", "/v1/deliveries", Who::Readers),
    ("GET", "/v1/lineage", Who::Readers),
    ("POST", "/api/v1/lineage", Who::Producers),
    ("GET", "/v1/partitions", Who::Readers),
    ("POST", "/v1/partitions/{dataset}/{partition}/invalidate", Who::Operators),
    ("POST", "/v1/repairs", Who::Operators),
    ("GET", "/v1/repairs/{id}", Who::Readers),
    ("GET", "/v1/tokens", Who::Admins),
    ("POST", "/v1/tokens", Who::Admins),
    ("DELETE", "/v1/tokens/{name}", Who::Admins),
    ("GET", "/metrics", Who::Readers),
    // The console: pages need `read` (lent by its sign-in's session cookie).
    ("GET", "/", Who::Anyone),
    ("GET", "/ui", Who::Anyone),
    ("GET", "/ui/login", Who::Anyone),
    ("GET", "/ui/", Who::Readers),
    ("GET", "/ui/datasets", Who::Readers),
    ("GET", "/ui/datasets/{dataset}", Who::Readers),
    ("GET", "/ui/batches", Who::Readers),
    ("GET", "/ui/batches/{batch_id}", Who::Readers),
    ("GET", "/ui/lineage", Who::Readers),
    ("GET", "/ui/alerts", Who::Readers),
    ("GET", "/ui/repairs", Who::Readers),
    ("GET", "/ui/repairs/{id}", Who::Readers),
    ("GET", "/ui/search", Who::Readers),
    ("GET", "/ui/static/console.css", Who::Anyone),
    ("GET", "/ui/static/console.js", Who::Anyone),
];

/// Every route the service serves: the API's and the console's.
fn served() -> BTreeSet<(String, String)> {
    let mut all = crate::openapi::routes_in_source();
    all.extend(crate::openapi::routes_in(concat!(env!("CARGO_MANIFEST_DIR"), "/src/ui")));
    all
}

#[test]
fn every_served_route_has_an_auth_rule_and_an_expectation() {
    let served = served();
    assert!(served.len() >= 30, "route scan found too little: {served:?}");
    let expected: BTreeSet<(String, String)> =
        EXPECTED.iter().map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned())).collect();
    let unruled: Vec<_> = served.iter().filter(|(m, p)| rule_for(m, p).is_none()).collect();
    assert!(unruled.is_empty(), "routes without a rule in src/auth/rules.rs: {unruled:?}");
    let stale: Vec<_> =
        RULES.iter().filter(|r| !served.iter().any(|(m, p)| m == r.method && covers(r.path, p))).collect();
    assert!(stale.is_empty(), "rules for routes that are not served: {stale:?}");
    let untested: Vec<_> = served.difference(&expected).collect();
    assert!(untested.is_empty(), "routes missing from EXPECTED in tests/api/auth.rs: {untested:?}");
}

/// A request to `route` that reaches its handler when allowed.
fn concrete(method: &str, route: &str, batch_id: &str) -> (Method, String, Option<Value>) {
    let path = route
        .replace("{batch_id}", batch_id)
        .replace("{dataset}", DATASET)
        .replace("{partition}", "dt%3D2026-08-24")
        .replace("{id}", "1")
        .replace("{name}", "nobody");
    let path = match route {
        "/ready" | "/v1/partitions" | "/v1/audit" | "/ui/lineage" => format!("{path}?dataset={DATASET}"),
        _ => path,
    };
    let body = match (method, route) {
        ("GET" | "DELETE", _) => None,
        (_, "/v1/batches" | "/v1/repairs") => Some(json!({"dataset": DATASET})),
        (_, "/api/v1/lineage") => Some(json!({
            "eventType": "RUNNING", "eventTime": "2026-08-24T01:00:00Z",
            "run": {"runId": "0190a1b2-0000-7000-8000-000000000001"},
            "job": {"namespace": "airflow", "name": "dag.task"},
            "outputs": [{"namespace": "hive", "name": DATASET}],
        })),
        (_, "/v1/batches/{batch_id}/heartbeat") => None,
        _ => Some(json!({})),
    };
    (Method::from_bytes(method.as_bytes()).unwrap(), path, body)
}

async fn each_scope_allows_what_it_should_and_refuses_the_rest(app: TestApp) {
    let admin = app.with_token(BOOT);
    let (status, started) = admin
        .post(
            "/v1/batches",
            &json!({"task": "load_orders", "dataset": DATASET, "dt": "2026-08-24", "partitions": [PART]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let batch_id = started["batch_id"].as_str().unwrap().to_owned();

    let read = app.make_token(BOOT, "reader", &["read"]).await;
    let produce = app.make_token(BOOT, "sales-producer", &["produce:sales.*"]).await;
    let produce_other = app.make_token(BOOT, "hr-producer", &["produce:hr.*"]).await;
    let operate = app.make_token(BOOT, "sales-operator", &["operate:sales.*"]).await;
    let operate_other = app.make_token(BOOT, "hr-operator", &["operate:hr.*"]).await;
    let callers: Vec<(&str, Option<&str>)> = vec![
        ("no token", None),
        ("read", Some(&read)),
        ("produce:sales.*", Some(&produce)),
        ("produce:hr.*", Some(&produce_other)),
        ("operate:sales.*", Some(&operate)),
        ("operate:hr.*", Some(&operate_other)),
        ("admin", Some(BOOT)),
    ];
    // Redirects (`/` → `/ui/`) are answers of their own here.
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let mut checked = 0;
    for (method, route, who) in EXPECTED {
        for (label, token) in &callers {
            let allowed = match who {
                Who::Anyone => true,
                Who::Readers => matches!(*label, "read" | "admin"),
                Who::Producers => matches!(*label, "produce:sales.*" | "admin"),
                Who::Operators | Who::AuditReaders => matches!(*label, "operate:sales.*" | "admin"),
                Who::Admins => *label == "admin",
            };
            let (m, path, body) = concrete(method, route, &batch_id);
            let mut req = client.request(m, format!("{}{path}", app.base));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            if let Some(b) = &body {
                req = req.json(b);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let challenge = resp.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
            let location = resp.headers().get("location").map(|v| v.to_str().unwrap().to_owned());
            let text = resp.text().await.unwrap();
            let what = format!("{label} → {method} {path}: {status} {text}");
            if allowed {
                assert!(status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN, "should pass: {what}");
            } else if token.is_none() && route.starts_with("/ui/") {
                // A console page sends a person without a session to its login form.
                assert_eq!(status, StatusCode::SEE_OTHER, "{what}");
                assert!(location.as_deref().is_some_and(|l| l.starts_with("/ui/login?next=")), "{what}");
            } else if token.is_none() {
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
                assert_eq!(challenge.as_deref(), Some("Bearer"), "{what}");
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["error"]["code"], "unauthenticated", "{what}");
            } else {
                assert_eq!(status, StatusCode::FORBIDDEN, "should be refused: {what}");
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["error"]["code"], "forbidden", "{what}");
                let needed = v["error"]["details"]["needed_scope"].as_str().unwrap();
                assert!(v["error"]["message"].as_str().unwrap().contains(needed), "{what}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, EXPECTED.len() * callers.len());

    // The scope a refusal names is the one that would have been enough.
    let (status, body) =
        app.with_token(&produce_other).post(&format!("/v1/batches/{batch_id}/commit"), &json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["error"]["details"]["needed_scope"], format!("produce:{DATASET}"));
    // An OpenLineage event needs every output covered.
    let (m, path, mut event) = concrete("POST", "/api/v1/lineage", &batch_id);
    event.as_mut().unwrap()["outputs"].as_array_mut().unwrap().push(json!({"namespace": "hive", "name": "hr.people"}));
    let (status, body) = app.with_token(&produce).request(m, &path, event.as_ref()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["details"]["needed_scope"], "produce:hr.people");
}

async fn a_revoked_token_stops_working_at_once_on_every_replica(app: TestApp) {
    let other = app.replica().await;
    let token = app.make_token(BOOT, "etl", &["read"]).await;
    // Used on both, so that both may have it cached.
    for replica in [&app, &other] {
        for _ in 0..2 {
            assert_eq!(replica.with_token(&token).get("/v1/datasets").await.0, StatusCode::OK);
        }
    }
    let resp = app.with_token(BOOT).send(Method::DELETE, "/v1/tokens/etl", None).await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    // At once: the revocation answered only after the replicas heard of it.
    for replica in [&other, &app] {
        let (status, body) = replica.with_token(&token).get("/v1/datasets").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body["error"]["code"], "unauthenticated");
    }
    let (status, body) = app.with_token(BOOT).request(Method::DELETE, "/v1/tokens/etl", None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("token_not_found")));
}

async fn an_expired_token_is_refused_as_expired(app: TestApp) {
    let (status, made) =
        app.with_token(BOOT).post("/v1/tokens", &json!({"name": "temp", "scopes": ["read"], "expires_in": "1h"})).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert!(made["expires_at"].is_string());
    let token = made["token"].as_str().unwrap().to_owned();
    let other = app.replica().await;
    assert_eq!(other.with_token(&token).get("/v1/datasets").await.0, StatusCode::OK);
    app.clock.advance(Duration::minutes(61));
    for replica in [&app, &other] {
        let resp = replica.with_token(&token).send(Method::GET, "/v1/datasets", None).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert!(resp.headers()["www-authenticate"].to_str().unwrap().starts_with("Bearer"));
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "token_expired", "{body}");
    }
    // Still listed (so that an admin sees why), with its expiry.
    let (_, list) = app.with_token(BOOT).get("/v1/tokens").await;
    assert_eq!(list["items"][0]["name"], "temp");
    assert_eq!(list["items"][0]["expires_at"], made["expires_at"]);
}

async fn the_database_holds_no_token_in_clear(app: TestApp) {
    let mut secrets = Vec::new();
    for (i, scope) in ["read", "admin", "produce:*"].iter().enumerate() {
        let token = app.make_token(BOOT, &format!("t{i}"), &[scope]).await;
        assert!(token.starts_with("bgt_") && token.len() >= 40, "{token}");
        assert_eq!(app.with_token(&token).get("/v1/tokens").await.0 == StatusCode::OK, *scope == "admin");
        secrets.push(token);
    }
    let dump: Vec<String> = match app.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&app.db.url).await.unwrap();
            sqlx::query_scalar(
                "SELECT name || '|' || secret_hash || '|' || scopes || '|' || created_at || '|' || \
                 COALESCE(expires_at, '') || '|' || COALESCE(last_used_at, '') FROM tokens",
            )
            .fetch_all(&mut c)
            .await
            .unwrap()
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
            sqlx::query_scalar("SELECT t::text FROM tokens t").fetch_all(&mut c).await.unwrap()
        }
    };
    assert_eq!(dump.len(), 3);
    for secret in &secrets {
        let random = &secret[4..];
        for row in &dump {
            assert!(!row.contains(random), "the secret is in the tokens table: {row}");
        }
    }
    // Nor does the API show it again.
    let (_, list) = app.with_token(BOOT).get("/v1/tokens").await;
    let text = list.to_string();
    assert!(secrets.iter().all(|s| !text.contains(&s[4..])), "{text}");
    for item in list["items"].as_array().unwrap() {
        let keys: BTreeSet<&str> = item.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, BTreeSet::from(["name", "scopes", "created_at", "expires_at", "last_used_at"]));
    }
    // Every token was used once above; the use is recorded in the background,
    // so the listing shows it shortly after (tokens made in one instant list
    // in any order).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, list) = app.with_token(BOOT).get("/v1/tokens").await;
        let items = list["items"].as_array().unwrap().clone();
        if items.iter().all(|item| item["last_used_at"].is_string()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "a used token shows when: {list}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn tokens_are_checked_when_made(app: TestApp) {
    let admin = app.with_token(BOOT);
    for (body, field) in [
        (json!({"name": "a b", "scopes": ["read"]}), "name"),
        (json!({"name": "x", "scopes": []}), "scopes"),
        (json!({"name": "x", "scopes": ["read", "write"]}), "scopes[1]"),
        (json!({"name": "x", "scopes": ["read"], "expires_in": "soon"}), "expires_in"),
        (json!({"name": "x", "scopes": ["read"], "expires_in": 59}), "expires_in"),
        (json!({"name": "x", "scopes": ["read"], "expires_in": "101y"}), "expires_in"),
        // Found by the fuzzer: far beyond any calendar, once a 500.
        (json!({"name": "x", "scopes": ["read"], "expires_in": 8_833_947_922_962u64}), "expires_in"),
        (json!({"name": "x", "scopes": ["read"], "expires_in": u64::MAX}), "expires_in"),
    ] {
        let (status, out) = admin.post("/v1/tokens", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {out}");
        assert_eq!(out["error"]["details"]["field"], field, "{out}");
    }
    app.make_token(BOOT, "x", &["read"]).await;
    let (status, out) = admin.post("/v1/tokens", &json!({"name": "x", "scopes": ["read"]})).await;
    assert_eq!((status, out["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("token_exists")));
    // A token with a random secret that was never issued.
    let (status, out) = app.with_token("bgt_never-issued").get("/v1/datasets").await;
    assert_eq!((status, out["error"]["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthenticated")));
}

async fn public_ready_and_healthz_need_no_token(app: TestApp) {
    assert_eq!(app.get("/healthz").await.0, StatusCode::OK);
    assert_eq!(app.ready(DATASET, &[PART]).await.0, StatusCode::UNAUTHORIZED);
    let open = TestApp::spawn_with(app.backend, |s| {
        s.auth = AuthMode::Required;
        s.public_ready = true;
    })
    .await
    .unwrap();
    let (status, body) = open.ready(DATASET, &[PART]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "answered, not ready: {body}");
    assert_eq!(body["ready"], false);
    assert_eq!(open.get("/v1/datasets").await.0, StatusCode::UNAUTHORIZED, "only /ready is opened");
}

/// A long-poll is served ahead of the router (to wait lean), yet passes the
/// same gate: refused at once without a token, with an unknown one or one
/// without `read`; a reader's waits and is answered by the publish, with
/// its request id.
async fn a_long_poll_passes_the_same_gate(app: TestApp) {
    const WAIT: &str = "/ready?dataset=sales.orders&partition=dt%3D2026-08-24&wait=20";
    let began = std::time::Instant::now();
    let (status, body) = app.get(WAIT).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthenticated")));
    let (status, body) = app.with_token("bgt_never-issued").get(WAIT).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthenticated")));
    let producer = app.make_token(BOOT, "lp_producer", &["produce:sales.*"]).await;
    let (status, body) = app.with_token(&producer).get(WAIT).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(began.elapsed() < std::time::Duration::from_secs(10), "refused at once, not after the wait");

    let admin = app.with_token(BOOT);
    let (status, started) = admin
        .post("/v1/batches", &json!({"task": "t", "dataset": DATASET, "dt": "2026-08-24", "partitions": [PART]}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let batch = started["batch_id"].as_str().unwrap().to_owned();
    let reader = app.make_token(BOOT, "lp_reader", &["read"]).await;
    let (client, url) = (app.client.clone(), format!("{}{WAIT}", app.base));
    let poll = tokio::spawn(async move {
        let resp = client.get(url).bearer_auth(reader).header("x-request-id", "lp-1").send().await.unwrap();
        let id = resp.headers().get("x-request-id").map(|v| v.to_str().unwrap().to_owned());
        (resp.status(), id, resp.json::<Value>().await.unwrap())
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "the reader waits");
    let (status, body) = admin.post(&format!("/v1/batches/{batch}/commit"), &crate::helpers::clean(PART, 10)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, id, body) =
        tokio::time::timeout(std::time::Duration::from_secs(5), poll).await.expect("answered").unwrap();
    assert_eq!((status, id.as_deref()), (StatusCode::OK, Some("lp-1")), "{body}");
    assert_eq!(body["ready"], true);
}

async fn a_form_post_cannot_write(app: TestApp) {
    // Auth off (loopback), where a browser's cross-site form is the risk.
    for ct in ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x"] {
        let resp = app
            .client
            .post(format!("{}/v1/batches", app.base))
            .header("content-type", ct)
            .body(r#"{"task": "t", "dataset": "d.x", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unsupported_media_type", "{ct}: {body}");
    }
    let (_, list) = app.get("/v1/batches").await;
    assert_eq!(list["items"], json!([]), "nothing was written");
    // JSON with a charset is JSON.
    let resp = app
        .client
        .post(format!("{}/v1/batches", app.base))
        .header("content-type", "application/json; charset=utf-8")
        .body(r#"{"task": "t", "dataset": "d.x", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
}

async fn every_write_leaves_an_audit_row_with_actor_and_request_id(app: TestApp) {
    let admin = app.with_token(BOOT);
    let producer = app.make_token(BOOT, "sales-etl", &["produce:sales.*", "read"]).await;
    let operator = app.make_token(BOOT, "sales-ops", &["operate:sales.*"]).await;
    let p = app.with_token(&producer);
    let o = app.with_token(&operator);

    let mut writes: Vec<(&str, &str, String, u16)> = Vec::new();
    let mut note = |actor: &'static str, action: &'static str, resp: &reqwest::Response| {
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
        writes.push((actor, action, id, resp.status().as_u16()));
    };
    let r = o.send(Method::PUT, &format!("/v1/datasets/{DATASET}"), Some(&json!({"tier": "standard"}))).await;
    note("sales-ops", "dataset.put", &r);
    let r = p
        .send(
            Method::POST,
            "/v1/batches",
            Some(&json!({"task": "load_orders", "dataset": DATASET, "dt": "2026-08-24", "partitions": [PART]})),
        )
        .await;
    note("sales-etl", "batch.start", &r);
    let batch_id = r.json::<Value>().await.unwrap()["batch_id"].as_str().unwrap().to_owned();
    let r = p.send(Method::POST, &format!("/v1/batches/{batch_id}/heartbeat"), None).await;
    note("sales-etl", "batch.heartbeat", &r);
    let r = p
        .send(
            Method::POST,
            &format!("/v1/batches/{batch_id}/written"),
            Some(&json!({"partitions": [{"partition": PART, "rows_written": 10}]})),
        )
        .await;
    note("sales-etl", "batch.written", &r);
    let r =
        p.send(Method::POST, &format!("/v1/batches/{batch_id}/commit"), Some(&crate::helpers::clean(PART, 10))).await;
    note("sales-etl", "batch.commit", &r);
    let r = o
        .send(
            Method::POST,
            &format!("/v1/partitions/{DATASET}/dt%3D2026-08-24/invalidate"),
            Some(&json!({"reason": "bad"})),
        )
        .await;
    note("sales-ops", "partition.invalidate", &r);
    let r = o
        .send(
            Method::POST,
            "/v1/repairs",
            Some(&json!({"dataset": DATASET, "partitions": [PART], "action": "rebuild", "reason": "bad rows"})),
        )
        .await;
    note("sales-ops", "repair.create", &r);
    let (m, path, event) = concrete("POST", "/api/v1/lineage", &batch_id);
    let r = p.send(m, &path, event.as_ref()).await;
    note("sales-etl", "openlineage.event", &r);
    // A refused write is audited too, with its status.
    let r = p.send(Method::PUT, &format!("/v1/datasets/{DATASET}"), Some(&json!({}))).await;
    note("sales-etl", "dataset.put", &r);
    let r = admin.send(Method::POST, "/v1/tokens", Some(&json!({"name": "tmp", "scopes": ["read"]}))).await;
    note("bootstrap", "token.create", &r);
    let r = admin.send(Method::DELETE, "/v1/tokens/tmp", None).await;
    note("bootstrap", "token.revoke", &r);

    let (status, page) = admin.get("/v1/audit?limit=500").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let rows = page["items"].as_array().unwrap();
    for (actor, action, request_id, status) in &writes {
        let row = rows
            .iter()
            .find(|r| r["request_id"] == *request_id)
            .unwrap_or_else(|| panic!("no audit row for {action} ({request_id}) in {page}"));
        assert_eq!(row["actor"], *actor, "{row}");
        assert_eq!(row["action"], *action, "{row}");
        assert_eq!(row["status"], *status, "{row}");
    }
    assert!(writes.iter().any(|w| w.3 == 403), "the refused write is among them");
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");

    // Filters, and a keyset cursor.
    let (_, mine) = admin.get("/v1/audit?actor=sales-etl&action=batch.commit").await;
    assert_eq!(mine["items"].as_array().unwrap().len(), 1, "{mine}");
    assert_eq!(mine["items"][0]["dataset"], DATASET);
    let (_, first) = admin.get("/v1/audit?limit=2").await;
    let cursor = first["next_cursor"].as_str().expect("a next page");
    let (_, second) = admin.get(&format!("/v1/audit?limit=2&cursor={cursor}")).await;
    assert!(second["items"][0]["id"].as_i64().unwrap() < first["items"][1]["id"].as_i64().unwrap());
    let future = (batchgate::clock::Clock::now(&*app.clock) + Duration::hours(1)).to_rfc3339();
    let (_, none) = admin.get(&format!("/v1/audit?since={}", crate::helpers::enc(&future))).await;
    assert_eq!(none["items"], json!([]));

    // An operator reads the audit of their datasets only.
    let (status, theirs) = o.get(&format!("/v1/audit?dataset={DATASET}")).await;
    assert_eq!(status, StatusCode::OK, "{theirs}");
    assert!(theirs["items"].as_array().unwrap().iter().all(|r| r["dataset"] == DATASET));
    assert_eq!(o.get("/v1/audit").await.0, StatusCode::FORBIDDEN);
    assert_eq!(o.get("/v1/audit?dataset=hr.people").await.0, StatusCode::FORBIDDEN);
}

async fn anonymous_writes_are_audited_with_auth_off(app: TestApp) {
    let resp = app.client.put(format!("{}/v1/datasets/{DATASET}", app.base)).json(&json!({})).send().await.unwrap();
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(resp.status().is_success());
    let (_, page) = app.get("/v1/audit").await;
    assert_eq!(page["items"][0]["actor"], "anonymous", "{page}");
    assert_eq!(page["items"][0]["request_id"], request_id);
    assert_eq!(page["items"][0]["dataset"], DATASET);
}

/// Like `on_both_backends!`, on [`secured`] instances.
macro_rules! secured_on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod secured_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(app) = super::secured(crate::helpers::Backend::Sqlite).await {
                        super::$name(app).await
                    }
                }
            )*
        }
        mod secured_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(app) = super::secured(crate::helpers::Backend::Postgres).await {
                        super::$name(app).await
                    }
                }
            )*
        }
    };
}

secured_on_both_backends!(
    each_scope_allows_what_it_should_and_refuses_the_rest,
    a_revoked_token_stops_working_at_once_on_every_replica,
    an_expired_token_is_refused_as_expired,
    the_database_holds_no_token_in_clear,
    tokens_are_checked_when_made,
    public_ready_and_healthz_need_no_token,
    a_long_poll_passes_the_same_gate,
    every_write_leaves_an_audit_row_with_actor_and_request_id,
);

on_both_backends!(a_form_post_cannot_write, anonymous_writes_are_audited_with_auth_off);
