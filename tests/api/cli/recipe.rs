//! The README's DolphinScheduler Shell task, run verbatim.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::process::Command;

use super::{sqlite_app, Run, DT, PART};
use crate::helpers::TestApp;

/// The first `sh` block of the README's DolphinScheduler section.
fn readme_shell_recipe() -> String {
    let readme = include_str!("../../../README.md");
    let section = readme
        .split_once("## DolphinScheduler and shell tasks")
        .expect("the README has the DolphinScheduler section")
        .1;
    let block = section.split_once("```sh\n").expect("a sh block").1;
    block.split_once("```").expect("a closed sh block").0.to_owned()
}

/// What the stand-in for the Spark job does.
enum Job {
    /// Writes these statistics to the file named by `--stats-out`.
    Writes(Value),
    /// Exits with this status, writing nothing.
    Exits(i32),
}

/// Runs the README recipe as DolphinScheduler would: the script in a file of
/// the task's working folder, `dt` given, `BATCHGATE_URL` in the
/// environment, `batchgate` on the PATH, and a `spark-submit` that does `job`.
async fn run_recipe(app: &TestApp, job: Job) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_batchgate"), bin.join("batchgate")).unwrap();
    let job = match job {
        Job::Writes(stats) => format!(
            "while [ $# -gt 0 ]; do [ \"$1\" = --stats-out ] && out=$2; shift; done\n\
             cat > \"$out\" <<'STATS'\n{stats}\nSTATS\n"
        ),
        Job::Exits(code) => format!("echo 'executor lost' >&2\nexit {code}\n"),
    };
    let spark = bin.join("spark-submit");
    std::fs::write(&spark, format!("#!/bin/sh\n{job}")).unwrap();
    std::fs::set_permissions(&spark, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = dir.path().join("task.sh");
    std::fs::write(&script, readme_shell_recipe()).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());

    Command::new("bash")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("BATCHGATE_URL", &app.base)
        .env_remove("BATCHGATE_TOKEN")
        .env("dt", DT)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run bash")
        .into()
}

const BATCH: &str = "/v1/batches/dws_order_detail_daily-20260824-001";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_shell_recipe_publishes_the_partition() {
    let app = sqlite_app().await;
    let stats = json!({"partitions": [{"partition": PART, "rows_written": 1000, "row_count": 1000,
        "distinct_keys": 1000, "null_keys": 0}]});

    run_recipe(&app, Job::Writes(stats)).await.expect(0);

    let (status, body) = app.ready("dws.order_detail", &[PART]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, record) = app.get(BATCH).await;
    assert_eq!(record["marker"], "hdfs://warehouse/dws/order_detail/dt=2026-08-24/_SUCCESS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_shell_recipe_reports_a_failed_job_and_fails_the_task() {
    let app = sqlite_app().await;

    run_recipe(&app, Job::Exits(7)).await.expect(7).says("executor lost");

    let (_, record) = app.get(BATCH).await;
    assert_eq!(record["state"], "failed");
    assert_eq!(record["failure"]["stage"], "write");
    assert_eq!(record["failure"]["message"], "shell task failed with exit 7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_shell_recipe_fails_the_task_on_a_rejection() {
    let app = sqlite_app().await;
    let stats = json!([{"partition": PART, "rows_written": 1000, "row_count": 1000, "null_keys": 3}]);

    let r = run_recipe(&app, Job::Writes(stats)).await.expect(3);

    r.says("null_keys dt=2026-08-24: observed 3, expected 0");
    assert!(!r.stderr.contains("cannot report"), "the trap must not fail a decided batch:\n{}", r.stderr);
    let (_, record) = app.get(BATCH).await;
    assert_eq!(record["state"], "rejected");
}
