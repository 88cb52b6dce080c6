//! Old and new binaries do not share a database (README, "Upgrading
//! replicas"): a batchgate started on a database a newer one migrated stops,
//! saying so, instead of serving it in forms it does not know. A change of
//! stored form without a table change leaves a mark migration for that
//! (0023, the 64-bit fingerprints).

use std::time::Duration;

use crate::cli::{run, Run};
use crate::helpers::{Backend, TestApp};
use crate::on_both_backends;
use crate::process::free_port;

on_both_backends!(a_database_a_newer_batchgate_migrated_is_refused);

/// `batchgate ARGS` to its end, within a minute (killed otherwise).
async fn within_a_minute(app: &TestApp, args: &[&str]) -> Run {
    tokio::time::timeout(Duration::from_secs(60), run(&app.base, args)).await.expect("batchgate ended within a minute")
}

async fn a_database_a_newer_batchgate_migrated_is_refused(app: TestApp) {
    let url = app.db.url.clone();
    let mark =
        "SELECT COUNT(*) FROM _sqlx_migrations WHERE version = 23 AND description = 'fingerprints 64 bits' AND success";
    assert_eq!(app.sql_count(mark).await, 1, "the 64-bit fingerprints' mark is applied");
    // Nothing new to apply.
    within_a_minute(&app, &["migrate", "--db", &url]).await.expect(0);

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

    // migrate refuses it, and serve stops at start-up.
    within_a_minute(&app, &["migrate", "--db", &url]).await.expect(1).says("migration 9999").says("newer batchgate");
    let listen = format!("127.0.0.1:{}", free_port());
    within_a_minute(&app, &["serve", "--db", &url, "--listen", &listen])
        .await
        .expect(1)
        .says("migration 9999")
        .says("Upgrading replicas");

    assert_eq!(app.sql_count(applied).await, before, "nothing applied, nothing removed");
    assert_eq!(app.sql_count(mark).await, 1);
}
