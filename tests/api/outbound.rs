//! Outbound calls: webhooks go only to allowed hosts (checked when a dataset
//! names one and again before each delivery), never follow redirects, and
//! are delivered over https with a private CA.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{Backend, Receiver, TestApp};
use crate::{on_both_backends, per_backend};

on_both_backends!(a_dataset_webhook_outside_the_allow_list_is_refused);

async fn a_dataset_webhook_outside_the_allow_list_is_refused(app: TestApp) {
    // Nothing is allowed by default: no request can make the service call a host.
    for url in ["http://127.0.0.1:9/hook", "https://hooks.example/x", "http://169.254.169.254/latest/meta-data"] {
        let (status, err) =
            app.request(reqwest::Method::PUT, "/v1/datasets/d.hook", Some(&json!({"webhook_url": url}))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {err}");
        assert_eq!(err["error"]["code"], "webhook_not_allowed");
        assert_eq!(err["error"]["details"]["field"], "webhook_url");
    }
    let (status, err) = app
        .request(reqwest::Method::PUT, "/v1/datasets/d.hook", Some(&json!({"webhook_url": "file:///etc/passwd"})))
        .await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_field")));
    assert_eq!(app.get("/v1/datasets/d.hook").await.0, StatusCode::NOT_FOUND, "nothing was stored");
}

async fn put_hook(app: &TestApp, dataset: &str, url: &str) -> (StatusCode, Value) {
    app.request(reqwest::Method::PUT, &format!("/v1/datasets/{dataset}"), Some(&json!({"webhook_url": url}))).await
}

async fn fail_a_batch(app: &TestApp, dataset: &str) {
    let id = app.start_ok("t", dataset, "2026-08-24", &["dt=2026-08-24"]).await;
    let (status, _) =
        app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "write", "category": "resource"})).await;
    assert_eq!(status, StatusCode::OK);
}

/// Allowed by a glob or an exact host; sent while allowed; not sent (and
/// given up, saying why) once the list no longer allows it.
async fn the_allow_list_is_asked_again_before_each_delivery(backend: Backend) {
    let receiver = Receiver::start(0).await;
    let Some(app) =
        TestApp::spawn_with(backend, |s| s.webhook_allow = vec!["*.corp.example".into(), "127.0.0.1".into()]).await
    else {
        return;
    };
    assert_eq!(put_hook(&app, "d.glob", "https://alerts.corp.example/hook").await.0, StatusCode::CREATED);
    assert_eq!(
        put_hook(&app, "d.glob", "https://corp.example.evil.example/hook").await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(put_hook(&app, "d.hook", &receiver.url).await.0, StatusCode::CREATED);
    fail_a_batch(&app, "d.hook").await;
    assert_eq!(app.scan().await.delivered, 1);
    assert_eq!(receiver.count(), 1);

    // The operator narrows the list; an alert raised before (or after) is not sent.
    let app = app.restart_with(|s| s.webhook_allow = vec!["*.corp.example".into()]).await;
    fail_a_batch(&app, "d.hook").await;
    let report = app.scan().await;
    assert_eq!((report.delivered, report.failed_deliveries, report.refused_deliveries), (0, 0, 1));
    app.clock.advance(chrono::Duration::hours(1));
    assert_eq!(app.scan().await.refused_deliveries, 0, "given up, not retried");
    assert_eq!(receiver.count(), 1, "nothing more reached the receiver");
    let why = app
        .sql_count(
            "SELECT COUNT(*) FROM outbox WHERE given_up_at IS NOT NULL AND delivered_at IS NULL \
             AND last_error LIKE '%is not allowed%--webhook-allow%'",
        )
        .await;
    assert_eq!(why, 1, "the outbox row says why it was not sent");
    let (status, err) = put_hook(&app, "d.other", &receiver.url).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("webhook_not_allowed"))
    );
}

/// The host of `--webhook-url` is always allowed, and a receiver's redirect
/// is not followed: it cannot send the service to another host.
async fn redirects_are_not_followed(backend: Backend) {
    let elsewhere = Receiver::start(0).await;
    let to = elsewhere.url.clone();
    let redirector = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let to = to.clone();
            async move { (StatusCode::TEMPORARY_REDIRECT, [("location", to)]) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, redirector).await.unwrap() });

    let Some(app) = TestApp::spawn_with_webhook(backend, &url).await else {
        return;
    };
    fail_a_batch(&app, "d.redirect").await;
    let report = app.scan().await;
    assert_eq!((report.delivered, report.failed_deliveries), (0, 1));
    assert_eq!(elsewhere.count(), 0, "the redirect was not followed");
}

/// A receiver on 127.0.0.1 with a certificate from a CA made here.
struct TlsReceiver {
    url: String,
    ca_file: tempfile::NamedTempFile,
    seen: Arc<std::sync::Mutex<Vec<Value>>>,
}

impl TlsReceiver {
    async fn start() -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "batchgate test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca = ca.self_signed(&ca_key).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf =
            CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().signed_by(&leaf_key, &ca, &ca_key).unwrap();
        let ca_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca_file.path(), ca.pem()).unwrap();

        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/hook", listener.local_addr().unwrap());
        let seen: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (acceptor, log) = (acceptor.clone(), log.clone());
                tokio::spawn(async move {
                    // A client that does not trust the CA ends the handshake: nothing to record.
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    if let Some(body) = read_request(&mut tls).await {
                        log.lock().unwrap().push(body);
                        let _ =
                            tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
                        let _ = tls.shutdown().await;
                    }
                });
            }
        });
        Self { url, ca_file, seen }
    }
}

/// One HTTP/1.1 request's JSON body (the receiver answers one request per connection).
async fn read_request(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok())?;
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    serde_json::from_slice(&buf[head_end..head_end + length]).ok()
}

async fn an_https_webhook_is_delivered_with_a_private_ca(backend: Backend) {
    let receiver = TlsReceiver::start().await;
    let (url, ca) = (receiver.url.clone(), receiver.ca_file.path().to_owned());
    let Some(app) = TestApp::spawn_with(backend, move |s| {
        s.webhook_url = Some(url.clone());
        s.webhook_ca_file = Some(ca.clone());
    })
    .await
    else {
        return;
    };
    fail_a_batch(&app, "d.tls").await;
    assert_eq!(app.scan().await.delivered, 1);
    let seen = receiver.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["kind"], "failed");
    assert_eq!(seen[0]["dataset"], "d.tls");
}

async fn without_the_ca_an_https_webhook_is_not_trusted(backend: Backend) {
    let receiver = TlsReceiver::start().await;
    let url = receiver.url.clone();
    let Some(app) = TestApp::spawn_with(backend, move |s| s.webhook_url = Some(url.clone())).await else {
        return;
    };
    fail_a_batch(&app, "d.tls").await;
    let report = app.scan().await;
    assert_eq!((report.delivered, report.failed_deliveries), (0, 1));
    assert!(receiver.seen.lock().unwrap().is_empty());
    let certificate_error = app
        .sql_count(
            "SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND last_error LIKE 'cannot reach receiver%'",
        )
        .await;
    assert_eq!(certificate_error, 1);
}

per_backend! {
    the_allow_list_is_asked_again_before_each_delivery =>
        sqlite_the_allow_list_is_asked_again_before_each_delivery, postgres_the_allow_list_is_asked_again_before_each_delivery;
    redirects_are_not_followed => sqlite_redirects_are_not_followed, postgres_redirects_are_not_followed;
    an_https_webhook_is_delivered_with_a_private_ca =>
        sqlite_an_https_webhook_is_delivered_with_a_private_ca, postgres_an_https_webhook_is_delivered_with_a_private_ca;
    without_the_ca_an_https_webhook_is_not_trusted =>
        sqlite_without_the_ca_an_https_webhook_is_not_trusted, postgres_without_the_ca_an_https_webhook_is_not_trusted;
}
