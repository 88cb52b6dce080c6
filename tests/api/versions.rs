//! Old and new binaries do not share a database (README, "Upgrading
//! replicas"): a batchgate started on a database a newer one migrated stops,
//! saying so, instead of serving it in forms it does not know. A change of
//! stored form without a table change leaves a mark migration for that
//! (0023, the 64-bit fingerprints).

use std::process::{Command, Output};
use std::time::Duration;

use crate::helpers::{Backend, TestApp};
use crate::on_both_backends;
use crate::process::{binary, free_port};

on_both_backends!(a_database_a_newer_batchgate_migrated_is_refused);

/// `batchgate <args>` to its end (within a minute).
async fn run(args: &[&str]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.args(args).env("RUST_LOG", "info,sqlx=warn");
    let run = tokio::task::spawn_blocking(move || cmd.output().expect("run batchgate"));
    tokio::time::timeout(Duration::from_secs(60), run).await.expect("batchgate ended within a minute").expect("joined")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn a_database_a_newer_batchgate_migrated_is_refused(app: TestApp) {
    let url = app.db.url.clone();
    let mark =
        "SELECT COUNT(*) FROM _sqlx_migrations WHERE version = 23 AND description = 'fingerprints 64 bits' AND success";
    assert_eq!(app.sql_count(mark).await, 1, "the 64-bit fingerprints' mark is applied");
    let out = run(&["migrate", "--db", &url]).await;
    assert!(out.status.success(), "nothing new to apply: {}", stderr(&out));

    // A migration this binary does not have, as a newer one would leave it.
    let checksum = match app.backend {
        Backend::Sqlite => "x'00'",
        Backend::Postgres => "'\\x00'::bytea",
    };
    app.sql(&format!(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from a newer batchgate', TRUE, {checksum}, 0)"
    ))
    .await;
    let applied = "SELECT COUNT(*) FROM _sqlx_migrations";
    let before = app.sql_count(applied).await;

    let out = run(&["migrate", "--db", &url]).await;
    assert_eq!(out.status.code(), Some(1), "migrate refuses it: {}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("migration 9999") && said.contains("newer batchgate"), "{said}");

    let listen = format!("127.0.0.1:{}", free_port());
    let out = run(&["serve", "--db", &url, "--listen", &listen]).await;
    assert_eq!(out.status.code(), Some(1), "serve stops at start-up: {}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("migration 9999") && said.contains("Upgrading replicas"), "{said}");

    assert_eq!(app.sql_count(applied).await, before, "nothing applied, nothing removed");
    assert_eq!(app.sql_count(mark).await, 1);
}
