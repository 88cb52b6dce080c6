//! `--auth auto|required|off` on the real binary: `auto` is off on loopback
//! and required elsewhere; `--auth off` on a non-loopback address warns.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::process::{binary, free_port};

/// `batchgate serve` on `listen`; its log goes to a file in `dir`.
struct Served {
    child: Child,
    base: String,
    log: std::path::PathBuf,
}

impl Served {
    async fn start(dir: &std::path::Path, host: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let log = dir.join(format!("stderr-{port}.log"));
        let db = format!("sqlite://{}", dir.join("registry.db").display());
        let child = Command::new(binary())
            .args(["serve", "--db", &db, "--listen", &format!("{host}:{port}")])
            .args(extra)
            .env_remove("BATCHGATE_AUTH")
            .env_remove("BATCHGATE_BOOTSTRAP_TOKEN")
            .envs(env.iter().copied())
            .env("RUST_LOG", "info,sqlx=warn")
            // The log goes to stdout; errors to stderr.
            .stdout(std::fs::File::create(&log).unwrap().try_clone().unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn batchgate");
        // Clients always talk to it over loopback.
        let served = Self { child, base: format!("http://127.0.0.1:{port}"), log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while reqwest::get(format!("{}/healthz", served.base))
            .await
            .map(|r| r.status() != StatusCode::OK)
            .unwrap_or(true)
        {
            assert!(Instant::now() < deadline, "batchgate did not come up:\n{}", served.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut served = served;
        if let Ok(Some(status)) = served.child.try_wait() {
            panic!("batchgate exited ({status}); something else answers on {}:\n{}", served.base, served.log());
        }
        served
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn status(&self, path: &str, token: Option<&str>) -> StatusCode {
        let mut req = reqwest::Client::new().get(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.unwrap().status()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_is_off_on_loopback_and_required_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let local = Served::start(dir.path(), "127.0.0.1", &[], &[]).await;
    assert_eq!(local.status("/v1/datasets", None).await, StatusCode::OK, "zero set-up on loopback");
    drop(local);

    let boot = "bgt_bootstrap-from-the-environment-0123456789";
    let open = Served::start(dir.path(), "0.0.0.0", &[], &[("BATCHGATE_BOOTSTRAP_TOKEN", boot)]).await;
    assert_eq!(open.status("/healthz", None).await, StatusCode::OK);
    assert_eq!(open.status("/v1/datasets", None).await, StatusCode::UNAUTHORIZED, "{}", open.log());
    assert_eq!(open.status("/v1/datasets", Some(boot)).await, StatusCode::OK, "{}", open.log());
    assert!(!open.log().contains(boot), "the bootstrap token stays out of the log");
    drop(open);

    let required = Served::start(dir.path(), "127.0.0.1", &["--auth", "required", "--public-ready"], &[]).await;
    assert_eq!(required.status("/v1/datasets", None).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        required.status("/ready?dataset=d.x&partition=dt%3D2026-08-24", None).await,
        StatusCode::NOT_FOUND,
        "--public-ready: answered (not ready) without a token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_off_on_a_network_address_warns_of_the_risk() {
    let dir = tempfile::tempdir().unwrap();
    let off = Served::start(dir.path(), "0.0.0.0", &["--auth", "off"], &[]).await;
    assert_eq!(off.status("/v1/datasets", None).await, StatusCode::OK);
    let log = off.log();
    assert!(log.contains("authentication is OFF on a non-loopback address"), "{log}");
    assert!(log.contains("anyone who can reach this port"), "{log}");
    drop(off);
    let local = Served::start(dir.path(), "127.0.0.1", &["--auth", "off"], &[]).await;
    assert!(!local.log().contains("authentication is OFF"), "no warning on loopback: {}", local.log());
}
