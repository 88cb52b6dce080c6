//! Requests hyper refuses before any handler runs (a request target or a
//! head too large, bytes that are not HTTP) still get the JSON error
//! envelope, not an empty body.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::TestApp;
use crate::on_both_backends;
use crate::process::raw_exchange;

on_both_backends!(
    a_100_kb_query_string_gets_a_json_414,
    a_1_mb_query_string_gets_a_json_error,
    a_huge_header_gets_a_json_431,
    bytes_that_are_not_http_get_a_json_400,
    ordinary_answers_keep_their_bodies,
);

fn addr(app: &TestApp) -> std::net::SocketAddr {
    app.base.trim_start_matches("http://").parse().unwrap()
}

fn get_with_query(pad: usize) -> Vec<u8> {
    format!(
        "GET /ready?dataset=d.x&partition=dt%3D1&pad={} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "a".repeat(pad)
    )
    .into_bytes()
}

fn envelope(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
    assert!(v["error"]["code"].is_string() && v["error"]["message"].is_string(), "{v}");
    v
}

async fn a_100_kb_query_string_gets_a_json_414(app: TestApp) {
    let (status, body) = raw_exchange(addr(&app), get_with_query(100 * 1024), Duration::from_secs(10)).await;
    assert_eq!(status, 414);
    assert_eq!(envelope(&body)["error"]["code"], "uri_too_long");
}

async fn a_1_mb_query_string_gets_a_json_error(app: TestApp) {
    let (status, body) = raw_exchange(addr(&app), get_with_query(1 << 20), Duration::from_secs(10)).await;
    assert!(status == 414 || status == 431, "{status}");
    let code = envelope(&body)["error"]["code"].clone();
    assert!(code == "uri_too_long" || code == "headers_too_large", "{code}");
}

async fn a_huge_header_gets_a_json_431(app: TestApp) {
    let req =
        format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\nConnection: close\r\n\r\n", "b".repeat(1 << 20));
    let (status, body) = raw_exchange(addr(&app), req.into_bytes(), Duration::from_secs(10)).await;
    assert_eq!(status, 431);
    assert_eq!(envelope(&body)["error"]["code"], "headers_too_large");
}

async fn bytes_that_are_not_http_get_a_json_400(app: TestApp) {
    let (status, body) =
        raw_exchange(addr(&app), b"HELLO \x01\x02 WORLD\r\n\r\n".to_vec(), Duration::from_secs(10)).await;
    assert_eq!(status, 400);
    assert_eq!(envelope(&body)["error"]["code"], "malformed_request");
}

async fn ordinary_answers_keep_their_bodies(app: TestApp) {
    let req = b"GET /ready?dataset=d.x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec();
    let (status, body) = raw_exchange(addr(&app), req, Duration::from_secs(10)).await;
    assert_eq!(status, 422);
    assert_eq!(envelope(&body)["error"]["code"], "missing_field");
    let (status, body) = app.get("/healthz").await;
    assert_eq!((status.as_u16(), body["database"].as_str()), (200, Some("ok")));
}
