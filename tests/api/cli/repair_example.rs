//! The README's repair worked example, run verbatim as a script against a
//! fresh service; what it prints must be what the README shows.

use std::process::Stdio;

use tokio::process::Command;

use super::{sqlite_app, Run};

/// The README's repair section: its script and the two outputs it shows.
fn readme_example() -> (String, String, String) {
    let readme = include_str!("../../../README.md");
    let section = readme
        .split_once("**Repairs: the four questions before the button.**")
        .expect("the README has the repair example")
        .1;
    let mut blocks = section.split("```").skip(1).step_by(2);
    let mut next = || blocks.next().expect("a closed block").to_owned();
    let script = next().strip_prefix("sh\n").expect("the script is a sh block").to_owned();
    let plan = next().trim_start_matches('\n').to_owned();
    let done = next().trim_start_matches('\n').to_owned();
    (script, plan, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_repair_example_runs_end_to_end() {
    let app = sqlite_app().await;
    let (script, plan, done) = readme_example();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_batchgate"), bin.join("batchgate")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());

    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("BATCHGATE_URL", &app.base)
        .env_remove("BATCHGATE_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run bash");
    let run = Run::from(out).expect(0);

    assert!(
        run.stdout.contains(&plan),
        "the README shows a plan output the script does not print:\n{plan}\n--- printed:\n{}",
        run.stdout
    );
    assert!(
        run.stdout.ends_with(&done),
        "the README shows a final output the script does not print:\n{done}\n--- printed:\n{}",
        run.stdout
    );
    assert!(run.stdout.contains("is not ready: stale_upstream"), "{}", run.stdout);
    assert!(run.stdout.contains("exit 1\n"), "{}", run.stdout);
}
