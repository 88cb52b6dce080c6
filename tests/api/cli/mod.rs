//! The client commands, run as a subprocess against the real service the way
//! a shell task runs them: what they print and the exit status a script
//! branches on. SQLite only: the HTTP behaviour underneath is tested on both
//! backends elsewhere.

mod batch;
mod parity;
mod people;
mod recipe;
mod repair_example;
mod token;
mod wait;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

use crate::helpers::{Backend, TestApp};

const DT: &str = "2026-08-24";
const PART: &str = "dt=2026-08-24";

async fn sqlite_app() -> TestApp {
    TestApp::spawn(Backend::Sqlite).await.expect("SQLite is always available")
}

/// Splits a command line on white space: `args("batch start --task t")`.
fn args(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `batchgate ARGS` pointed at `url`, with no token inherited.
fn batchgate<I, S>(url: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_batchgate"));
    cmd.args(args)
        .env("BATCHGATE_URL", url)
        .env_remove("BATCHGATE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// What a finished run left: its exit status and output.
pub(crate) struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Self {
            code: o.status.code().expect("exited, not killed by a signal"),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Asserts the exit status.
    pub(crate) fn expect(self, code: i32) -> Self {
        assert_eq!(self.code, code, "exit status\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        self
    }

    /// Asserts that stderr says `text`.
    pub(crate) fn says(&self, text: &str) -> &Self {
        assert!(self.stderr.contains(text), "stderr should say {text:?}:\n{}", self.stderr);
        self
    }
}

/// `batchgate ARGS` pointed at `url`, to its end.
pub(crate) async fn run<I, S>(url: &str, args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    batchgate(url, args).output().await.expect("run batchgate").into()
}

/// Runs with `input` on standard input.
async fn run_with_stdin(url: &str, args: &[&str], input: &str) -> Run {
    let mut child = batchgate(url, args).stdin(Stdio::piped()).spawn().expect("spawn batchgate");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).await.expect("write stdin");
    drop(stdin);
    child.wait_with_output().await.expect("wait").into()
}

/// `batch start` of task `t` on `dataset`, partition `dt=2026-08-24`;
/// returns the printed batch id.
async fn start(app: &TestApp, dataset: &str) -> String {
    let line = format!("batch start --task t --dataset {dataset} --dt {DT} --partition {PART}");
    let run = run(&app.base, args(&line)).await.expect(0);
    run.stdout.trim().to_owned()
}

fn write_json(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).expect("write file");
    path.to_str().expect("UTF-8 path").to_owned()
}

/// Waits for a child to exit, at most `limit`; returns the run and when it
/// exited.
async fn finish(child: Child, limit: Duration) -> (Run, Instant) {
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("batchgate still running after {limit:?}"))
        .expect("wait");
    (output.into(), Instant::now())
}

/// A URL on a port nothing listens on.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}
