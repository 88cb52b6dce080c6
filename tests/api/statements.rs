//! What a steady-state start and commit cost the registry's writer, in
//! statements (issue 14): on SQLite each crosses to sqlx's worker thread
//! under the one write lock, on PostgreSQL each is a round trip under the
//! dataset's (and then the feed's) lock. The numbers are pinned, so that a
//! statement added back to either path shows here.

use std::sync::Arc;

use batchgate::clock::SystemClock;
use batchgate::domain::batch::Trigger;
use batchgate::domain::checks::{CommitEvidence, PartitionEvidence};
use batchgate::domain::names::{parse_dt, DatasetName, PartitionSpec, TaskName};
use batchgate::store::db::count_statements;
use batchgate::store::{Decided, SqlStore, StartBatch};

use crate::helpers::{clean, TestApp};
use crate::on_both_backends;

on_both_backends!(
    a_steady_state_start_and_commit_run_a_pinned_number_of_statements,
    a_publish_takes_its_partitions_state_from_their_history_when_a_later_batch_named_them,
);

/// Statements one start and one commit of a single partition run, on a
/// dataset that exists and a partition not yet published: `(start, commit)`,
/// the same on both backends.
/// Writes that return nothing and run together (`db::Writes`) are one
/// statement. The commit's include the read of its answer after the
/// `COMMIT` (1); the batch's dataset, which PostgreSQL locks, is known from
/// the start (the store remembers it). `BEGIN`, `COMMIT` and PostgreSQL's
/// advisory locks are not counted.
fn pinned(inputs: u64) -> (u64, u64) {
    // Start: the policy; the partition's row and residue (who else is
    // writing it, what earlier attempts left) with the attempt number (one
    // statement); the batch (whose row gives back its started event); per
    // input, its partition (resolved); then together: the log row, the
    // partition's row, per input its row in batch_inputs.
    let start = 4 + inputs;
    // Commit: the batch with its declared partitions' standing and the
    // policy (one statement); the volume baseline; together, the batch's
    // row (which gives back its committed event) and the partition's log
    // row; the partition (version, state,
    // invalidation cleared); the published change; when it read any, the
    // inputs and where they stand now (one statement, however many); the
    // readers of the partition; the open alerts to resolve; then the record
    // with its events, read back (one statement).
    let commit = 8 + u64::from(inputs > 0);
    (start, commit)
}

/// The start of one batch of `dataset` writing `dt=<dt>` that reads `inputs`.
pub(crate) fn start_request(dataset: &str, dt: &str, inputs: &[(&str, &str)]) -> StartBatch {
    StartBatch {
        task: TaskName::parse(&format!("t_{}", dataset.replace('.', "_"))).expect("task"),
        dataset: DatasetName::parse(dataset).expect("dataset"),
        dt: parse_dt(dt).expect("dt"),
        partitions: vec![PartitionSpec::parse(&format!("dt={dt}")).expect("partition")],
        scope: None,
        trigger: Trigger::Scheduled,
        run_ref: None,
        lease_seconds: 3600,
        idempotency_key: None,
        fingerprint: format!("start {dataset} {dt}"),
        wildcard_partitions: Vec::new(),
        cleaned_batch_ids: Vec::new(),
        inputs: inputs.iter().map(|(d, p)| ((*d).to_owned(), (*p).to_owned())).collect(),
        allow_unready_inputs: false,
        repair_id: None,
    }
}

/// The evidence of a clean commit of `dataset`'s `dt=<dt>`.
pub(crate) fn clean_evidence(dataset: &str, dt: &str) -> CommitEvidence {
    CommitEvidence {
        marker: format!("hdfs://warehouse/{dataset}/dt={dt}/_SUCCESS"),
        partitions: vec![PartitionEvidence {
            partition: PartitionSpec::parse(&format!("dt={dt}")).expect("partition"),
            rows_written: 100,
            row_count: 100,
            distinct_keys: Some(100),
            null_keys: Some(0),
            metrics: Default::default(),
        }],
        source: None,
    }
}

/// Starts and commits one batch of `dataset` writing `dt=<dt>` that reads
/// `inputs`, directly on the store; returns the statements each ran.
async fn cycle(store: &SqlStore, dataset: &str, dt: &str, inputs: &[(&str, &str)]) -> (u64, u64) {
    let (started, start_statements) = count_statements(store.start_batch(start_request(dataset, dt, inputs))).await;
    let started = started.expect("start");
    let commit = store.commit_batch(&started.batch_id, clean_evidence(dataset, dt), format!("commit {dataset} {dt}"));
    let (decision, commit_statements) = count_statements(commit).await;
    assert_eq!(decision.expect("commit").decided, Decided::Published);
    (start_statements, commit_statements)
}

async fn a_steady_state_start_and_commit_run_a_pinned_number_of_statements(app: TestApp) {
    // The steady state: the datasets exist, and each has published the data
    // date before (the volume check's baseline has a row).
    for (dataset, dt) in [("ods.src", "2026-08-23"), ("dwd.s", "2026-08-23"), ("ods.src", "2026-08-24")] {
        let id = app.start_ok(&format!("t_{}", dataset.replace('.', "_")), dataset, dt, &[&format!("dt={dt}")]).await;
        let (status, record) = app.commit(&id, &clean(&format!("dt={dt}"), 100)).await;
        assert_eq!(status, reqwest::StatusCode::OK, "{record}");
    }
    let store = SqlStore::connect(&app.db.url, &Default::default(), Arc::new(SystemClock)).await.expect("connect");

    // The first change an instance appends for a dataset reads the
    // dataset's number (`audit_names`, migration 0020); it remembers it
    // once that commit is done, and no commit after reads it again.
    let first = cycle(&store, "dwd.s", "2026-08-22", &[]).await;
    assert_eq!(first, (pinned(0).0, pinned(0).1 + 1), "the instance's first publish of the dataset");
    let alone = cycle(&store, "dwd.s", "2026-08-24", &[]).await;
    let reading = cycle(&store, "dwd.s", "2026-08-25", &[("ods.src", "dt=2026-08-24")]).await;
    eprintln!("statements {:?}: alone {alone:?}, reading one input {reading:?}", app.backend);
    assert_eq!(alone, pinned(0), "a start and a commit without inputs");
    assert_eq!(reading, pinned(1), "a start and a commit reading one input");

    // The batches are what the API shows for any other.
    let (status, ready) = app.ready("dwd.s", &["dt=2026-08-24", "dt=2026-08-25"]).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{ready}");
}

/// A publish writes its partition's state with its version, by the rule
/// applied to the partition's history, when its batch's row is the latest
/// there (always, for a running batch). A later row, which only a database
/// changed by hand holds, still decides the state, as it did when every
/// publish read the history.
async fn a_publish_takes_its_partitions_state_from_their_history_when_a_later_batch_named_them(app: TestApp) {
    let (p, q) = ("dt=2026-08-24", "dt=2026-08-25");
    let a = app.start_ok("t_h", "ods.h", "2026-08-24", &[p]).await;
    let b = app.start_ok("t_h", "ods.h", "2026-08-25", &[q]).await;
    let (status, body) = app
        .post(&format!("/v1/batches/{b}/fail"), &serde_json::json!({"stage": "write", "category": "resource"}))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    app.sql(&format!(
        "INSERT INTO task_produce_log (batch_id, target_partition, task_name, dt, target_table, status, batch_seq, start_time) \
         SELECT batch_id, '{p}', task_name, dt, target_table, status, batch_seq, start_time FROM task_produce_log \
         WHERE batch_id = '{b}'"
    ))
    .await;
    let (status, record) = app.commit(&a, &clean(p, 100)).await;
    assert_eq!((status, record["state"].as_str()), (reqwest::StatusCode::OK, Some("published")), "{record}");
    let (status, ready) = app.ready("ods.h", &[p]).await;
    assert_eq!((status, ready["reason"].as_str()), (reqwest::StatusCode::NOT_FOUND, Some("failed")), "{ready}");
}
