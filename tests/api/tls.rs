//! TLS on the listener: a CA and a server certificate made by the test, the
//! real binary started with `--tls-cert`/`--tls-key`, and curl trusting only
//! that CA.

use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

use crate::helpers::{Backend, TestDb};
use crate::process::{Launch, Proc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_listener_answers_curl_with_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "batchgate test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let (ca_pem, cert_pem, key_pem) =
        (dir.path().join("ca.pem"), dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    std::fs::write(&cert_pem, cert.pem()).unwrap();
    std::fs::write(&key_pem, key.serialize_pem()).unwrap();

    let db = TestDb::create(Backend::Sqlite).await.unwrap();
    let (cert_arg, key_arg) = (cert_pem.display().to_string(), key_pem.display().to_string());
    let server = Proc::start(
        &db.url,
        Launch { args: vec!["--tls-cert", &cert_arg, "--tls-key", &key_arg], no_wait: true, ..Launch::default() },
    )
    .await;
    let url = format!("https://localhost:{}/healthz", server.port);
    let resolve = format!("localhost:{}:127.0.0.1", server.port);
    let curl = |ca: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "--max-time", "5", "--resolve", &resolve, "-o", "-", "-w", "\n%{http_code}"]);
        if let Some(ca) = ca {
            cmd.arg("--cacert").arg(ca);
        }
        cmd.arg(&url).output().expect("curl runs")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = curl(Some(&ca_pem));
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "curl --cacert: {} {}\n{}", text, String::from_utf8_lossy(&out.stderr), server.log());
    assert!(text.ends_with("\n200"), "{text}");
    assert!(text.contains("\"database\":\"ok\""), "{text}");

    // Without the CA the certificate is not trusted; plain HTTP gets no answer.
    assert!(!curl(None).status.success(), "an untrusted certificate is refused by curl");
    let plain = reqwest::Client::new().get(format!("http://127.0.0.1:{}/healthz", server.port)).send().await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_without_its_key_is_refused_at_start_up() {
    let out = tokio::process::Command::new(crate::process::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert", "/nonexistent/cert.pem"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(10), out).await.expect("exits").unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-key"), "{}", String::from_utf8_lossy(&out.stderr));
}
