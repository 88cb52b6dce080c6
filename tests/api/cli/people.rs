//! Every request field from a shell task (inputs, cleanup, repairs), and the
//! commands for people: `ready`, `batches`, `partitions`, `invalidate`,
//! `repair`, `alerts`, `dataset set`.

use serde_json::{json, Value};

use super::{args, closed_port_url, run, sqlite_app, write_json, DT, PART};
use crate::helpers::TestApp;

/// Starts with `extra` flags; returns the run.
async fn start_with(app: &TestApp, task: &str, dataset: &str, extra: &[&str]) -> super::Run {
    let line = format!("batch start --task {task} --dataset {dataset} --dt {DT} --partition {PART}");
    let mut a = args(&line);
    a.extend_from_slice(extra);
    run(&app.base, &a).await
}

async fn commit(app: &TestApp, dir: &std::path::Path, id: &str, rows: u64) -> super::Run {
    let stats =
        write_json(dir, &format!("{id}.json"), &json!([{"partition": PART, "rows_written": rows, "row_count": rows}]));
    run(&app.base, ["batch", "commit", id, "--marker", "m", "--partition-stats", &stats]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_task_records_its_inputs_cleans_up_and_repairs() {
    let app = sqlite_app().await;
    let dir = tempfile::tempdir().unwrap();
    run(&app.base, args("dataset set d.facts --write-mode append --unique-key id --owner finance")).await.expect(0);
    app.publish("load_up", "d.up", DT, PART, 10).await;

    // An input that is not ready refuses the start, unless allowed.
    start_with(&app, "t", "d.facts", &["--input", "d.missing:dt=2026-08-24"])
        .await
        .expect(3)
        .says("upstream_not_ready");
    let allowed =
        start_with(&app, "t", "d.facts", &["--input", "d.missing:dt=2026-08-24", "--allow-unready-inputs", "--json"])
            .await
            .expect(0);
    let allowed: Value = serde_json::from_str(&allowed.stdout).unwrap();
    let first = allowed["batch_id"].as_str().unwrap().to_owned();
    run(&app.base, ["batch", "fail", &first, "--stage", "write"]).await.expect(0);

    // Append: a start over residue needs the cleanup named.
    start_with(&app, "t", "d.facts", &["--input", "d.up:dt=2026-08-24"]).await.expect(3).says("cleanup_required");
    let started = start_with(&app, "t", "d.facts", &["--input", "d.up:dt=2026-08-24", "--cleaned-batch-id", &first])
        .await
        .expect(0);
    let id = started.stdout.trim().to_owned();
    run(&app.base, ["batch", "written", &id, "--rows", "dt=2026-08-24=10"]).await.expect(0);
    commit(&app, dir.path(), &id, 10).await.expect(0);
    // A fail after the commit went through says so, and changes nothing.
    run(&app.base, ["batch", "fail", &id, "--stage", "write"]).await.expect(3).says("its commit went through");

    let shown = run(&app.base, ["batches", "show", &id, "--json"]).await.expect(0);
    let record: Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!(record["inputs"][0]["dataset"], "d.up", "{record}");
    assert_eq!(record["inputs"][0]["version"], 1);
    let shown = run(&app.base, ["batches", "show", &id]).await.expect(0);
    assert!(shown.stdout.contains("INPUT DATASET"), "{}", shown.stdout);
    assert!(shown.stdout.lines().any(|l| l.starts_with("d.up") && l.contains(PART)), "{}", shown.stdout);

    // A repair of the upstream, from plan to a batch that names it.
    let plan = run(
        &app.base,
        args("repair plan --dataset d.up --partition dt=2026-08-24 --action rebuild --reason re-extract"),
    )
    .await
    .expect(0);
    assert!(plan.stdout.starts_with("repair 1 (planned): rebuild d.up because re-extract\n"), "{}", plan.stdout);
    assert!(
        plan.stdout.lines().any(|l| l.starts_with(PART) && l.contains("published_downstream_pending")
            || l.starts_with(PART) && l.contains("rebuild")),
        "{}",
        plan.stdout
    );
    let repaired = start_with(&app, "load_up", "d.up", &["--repair-id", "1", "--trigger", "repair"]).await.expect(0);
    commit(&app, dir.path(), repaired.stdout.trim(), 12).await.expect(0);

    // Downstream is stale: every command says so, as /ready does.
    let ready = run(&app.base, args(&format!("ready --dataset d.facts --dt {DT}"))).await.expect(1);
    assert!(ready.stdout.contains("is not ready: stale_upstream"), "{}", ready.stdout);
    assert!(ready.stdout.contains("upstream d.up dt=2026-08-24: built on version 1, now 2"), "{}", ready.stdout);
    let parts = run(&app.base, args("partitions --dataset d.facts")).await.expect(0);
    assert!(parts.stdout.lines().any(|l| l.starts_with(PART) && l.contains("stale_upstream")), "{}", parts.stdout);
    let show = run(&app.base, args("repair show 1")).await.expect(0);
    assert!(show.stdout.starts_with("repair 1 (in_progress)"), "{}", show.stdout);
    assert!(
        show.stdout.lines().any(|l| l.starts_with("d.facts") && l.contains("stale_upstream") && l.contains("finance")),
        "{}",
        show.stdout
    );
    let json_show: Value =
        serde_json::from_str(&run(&app.base, args("repair show 1 --json")).await.expect(0).stdout).unwrap();
    assert_eq!(json_show["progress"]["downstream"][0]["state"], "stale_upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_get_tables_and_scripts_get_json() {
    let app = sqlite_app().await;
    app.publish("t", "d.people", DT, PART, 10).await;

    let ready = run(&app.base, args(&format!("ready --dataset d.people --partition {PART}"))).await.expect(0);
    assert!(ready.stdout.starts_with("d.people dt=2026-08-24 is ready\nPARTITION"), "{}", ready.stdout);
    let ready = run(&app.base, args(&format!("ready --task t --dt {DT} --json"))).await.expect(0);
    assert_eq!(serde_json::from_str::<Value>(&ready.stdout).unwrap()["ready"], true);

    let list = run(&app.base, args("batches list --dataset d.people")).await.expect(0);
    let mut lines = list.stdout.lines();
    assert!(lines.next().unwrap().starts_with("BATCH"), "{}", list.stdout);
    assert!(lines.next().unwrap().starts_with("t-20260824-001  t"), "{}", list.stdout);
    let list: Value =
        serde_json::from_str(&run(&app.base, args("batches list --state published --json")).await.expect(0).stdout)
            .unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    run(&app.base, args("batches list --dataset nothing.here")).await.expect(0);

    let inv = run(&app.base, args(&format!("invalidate --dataset d.people --partition {PART} --reason bad-extract")))
        .await
        .expect(0);
    assert_eq!(inv.stdout.trim(), "d.people dt=2026-08-24 invalidated: not ready until a new batch publishes it");
    let ready = run(&app.base, args(&format!("ready --dataset d.people --partition {PART}"))).await.expect(1);
    assert!(ready.stdout.contains("is not ready: invalidated"), "{}", ready.stdout);

    // A rejected commit raises an alert.
    let id = super::start(&app, "d.alerting").await;
    let dir = tempfile::tempdir().unwrap();
    let stats = write_json(dir.path(), "s.json", &json!([{"partition": PART, "rows_written": 5, "row_count": 9}]));
    run(&app.base, ["batch", "commit", &id, "--marker", "m", "--partition-stats", &stats]).await.expect(3);
    let alerts = run(&app.base, args("alerts --dataset d.alerting")).await.expect(0);
    assert!(alerts.stdout.starts_with("ID"), "{}", alerts.stdout);
    assert!(
        alerts.stdout.lines().nth(1).is_some_and(|l| l.contains("open") && l.contains("d.alerting")),
        "{}",
        alerts.stdout
    );

    run(&app.base, args("batches show nope-20260824-001")).await.expect(2).says("batch_not_found");
    run(&app.base, args("dataset set d.x --tier bogus")).await.expect(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_urls_are_taken_and_an_unreachable_service_is_named_once() {
    // Nothing listens: what matters is that the https URL is tried.
    let url = closed_port_url().replace("http://", "https://");
    let r = run(&url, args("ready --dataset d.x --partition dt=1")).await.expect(4);
    r.says(&format!("cannot reach batchgate at {url}/ready"));
    assert!(!r.stderr.contains("wait="), "{}", r.stderr);
    assert!(!r.stderr.contains("dataset="), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);

    let help = run(&url, args("wait --help")).await.expect(0);
    assert!(help.stdout.contains("[env: BATCHGATE_URL]"), "{}", help.stdout);
    assert!(!help.stdout.contains("[env: BATCHGATE_URL="), "{}", help.stdout);
}
