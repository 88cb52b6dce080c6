//! JWTs from an identity provider, checked against a JWKS (a file, or a URL
//! on 127.0.0.1), with keys generated once for these tests
//! (`tests/api/fixtures/jwt`).

use batchgate::auth::{AuthMode, JwtSettings};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{Backend, TestApp};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/api/fixtures/jwt");
const ISSUER: &str = "https://idp.test";
const AUDIENCE: &str = "batchgate";

async fn with_jwks(backend: Backend, jwks: String) -> Option<TestApp> {
    TestApp::spawn_with(backend, move |s| {
        s.auth = AuthMode::Required;
        s.jwt = Some(JwtSettings { jwks: jwks.clone(), issuer: Some(ISSUER.into()), audience: Some(AUDIENCE.into()) });
    })
    .await
}

fn sign(key: &str, claims: &Value) -> String {
    let pem = std::fs::read(format!("{FIXTURES}/{key}")).unwrap();
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("test-key-1".into());
    encode(&header, claims, &EncodingKey::from_rsa_pem(&pem).unwrap()).unwrap()
}

fn claims(app: &TestApp, change: impl FnOnce(&mut Value)) -> Value {
    let now = batchgate::clock::Clock::now(&*app.clock).timestamp();
    let mut c = json!({"sub": "alice@corp", "iss": ISSUER, "aud": AUDIENCE, "exp": now + 600, "iat": now,
        "scope": "openid read produce:sales.*"});
    change(&mut c);
    c
}

async fn jwts_are_accepted_and_refused_as_they_should(app: TestApp) {
    let good = sign("idp.pem", &claims(&app, |_| {}));
    let (status, body) = app.with_token(&good).get("/v1/datasets").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Scopes from `scope`: produce:sales.* but not operate.
    let (status, body) = app
        .with_token(&good)
        .post(
            "/v1/batches",
            &json!({"task": "t", "dataset": "sales.orders", "dt": "2026-08-24", "partitions": ["dt=2026-08-24"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let resp = app.with_token(&good).send(reqwest::Method::PUT, "/v1/datasets/sales.orders", Some(&json!({}))).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);

    // `scp` as a list works as well.
    let scp = sign(
        "idp.pem",
        &claims(&app, |c| {
            c.as_object_mut().unwrap().remove("scope");
            c["scp"] = json!(["admin"]);
        }),
    );
    let (status, audit) = app.with_token(&scp).get("/v1/audit?action=batch.start").await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    assert_eq!(audit["items"][0]["actor"], "jwt:alice@corp", "the actor is jwt:<sub>");

    let refusals = [
        ("wrong issuer", sign("idp.pem", &claims(&app, |c| c["iss"] = json!("https://evil.test"))), "unauthenticated"),
        ("wrong audience", sign("idp.pem", &claims(&app, |c| c["aud"] = json!("other"))), "unauthenticated"),
        ("wrong signature", sign("impostor.pem", &claims(&app, |_| {})), "unauthenticated"),
        ("no issuer", sign("idp.pem", &claims(&app, |c| c["iss"] = Value::Null)), "unauthenticated"),
        ("no expiry", sign("idp.pem", &claims(&app, |c| c["exp"] = Value::Null)), "unauthenticated"),
        (
            "expired",
            sign("idp.pem", &claims(&app, |c| c["exp"] = json!(c["iat"].as_i64().unwrap() - 3600))),
            "token_expired",
        ),
    ];
    for (what, token, code) in refusals {
        let (status, body) = app.with_token(&token).get("/v1/datasets").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {body}");
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
    }
    // A token signed with HS256 and the public key as the secret (the
    // algorithm-confusion attack) is refused.
    let jwks = std::fs::read(format!("{FIXTURES}/jwks.json")).unwrap();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("test-key-1".into());
    let forged = encode(&header, &claims(&app, |_| {}), &EncodingKey::from_secret(&jwks)).unwrap();
    assert_eq!(app.with_token(&forged).get("/v1/datasets").await.0, StatusCode::UNAUTHORIZED);

    // Expiry follows the service's clock.
    app.clock.advance(chrono::Duration::minutes(20));
    let (status, body) = app.with_token(&good).get("/v1/datasets").await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("token_expired")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwts_on_sqlite_with_a_jwks_file() {
    let app = with_jwks(Backend::Sqlite, format!("{FIXTURES}/jwks.json")).await.unwrap();
    jwts_are_accepted_and_refused_as_they_should(app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwts_on_postgres_with_a_jwks_url() {
    // The identity provider's key set, served on 127.0.0.1.
    let jwks: Value = serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURES}/jwks.json")).unwrap()).unwrap();
    let idp = axum::Router::new().route("/jwks", axum::routing::get(move || async move { axum::Json(jwks.clone()) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, idp).await.unwrap() });
    if let Some(app) = with_jwks(Backend::Postgres, url).await {
        jwts_are_accepted_and_refused_as_they_should(app).await;
    }
}
