//! The real binary, started as a child process, for what only a process
//! shows: file limits, signals, timeouts, TLS, a database going away.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

/// A running `batchgate serve`.
pub struct Proc {
    child: Child,
    pub port: u16,
    pub base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// How to start it.
#[derive(Default)]
pub struct Launch<'a> {
    pub args: Vec<&'a str>,
    pub env: Vec<(&'a str, &'a str)>,
    /// The child's `RLIMIT_NOFILE` (soft and hard).
    pub file_limit: Option<u64>,
    /// Do not wait for `/healthz` (TLS: the test checks by itself).
    pub no_wait: bool,
}

/// The binary under test; `BATCHGATE_TEST_BIN` runs these tests against
/// another build (e.g. an older one, to watch them fail).
pub fn binary() -> String {
    std::env::var("BATCHGATE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_batchgate").to_owned())
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Proc {
    pub async fn start(db_url: &str, launch: Launch<'_>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("stderr.log");
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(binary());
        cmd.args(["serve", "--db", db_url, "--listen", &listen])
            .args(&launch.args)
            .envs(launch.env.iter().copied())
            .env("RUST_LOG", "info,sqlx=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        if let Some(limit) = launch.file_limit {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; nothing else runs here.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit { rlim_cur: limit as libc::rlim_t, rlim_max: limit as libc::rlim_t };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().expect("spawn batchgate");
        let base = format!("http://127.0.0.1:{port}");
        let mut proc = Self { child, port, base, log, _dir: dir };
        if !launch.no_wait {
            let deadline = Instant::now() + Duration::from_secs(30);
            while reqwest::get(format!("{}/healthz", proc.base))
                .await
                .map(|r| r.status() != StatusCode::OK)
                .unwrap_or(true)
            {
                if let Ok(Some(status)) = proc.child.try_wait() {
                    panic!("batchgate exited ({status}) before it came up:\n{}", proc.log());
                }
                assert!(Instant::now() < deadline, "batchgate did not come up:\n{}", proc.log());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        proc
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn sigterm(&self) {
        // SAFETY: signals a child this test started and has not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill -TERM");
    }

    /// Its exit status, if it exits within `within`.
    pub async fn exited_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A whole HTTP/1.1 exchange over a raw socket (for requests no HTTP client
/// library will send): writes `request`, reads until the server closes or
/// `within` passes. Returns the status and the body.
pub async fn raw_exchange(addr: std::net::SocketAddr, request: Vec<u8>, within: Duration) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    // Write while reading: the server may answer before it read everything.
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&request).await;
        wr
    });
    let mut got = Vec::new();
    let _ = tokio::time::timeout(within, rd.read_to_end(&mut got)).await;
    drop(writer.await);
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}
