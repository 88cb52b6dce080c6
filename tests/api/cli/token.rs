//! `batchgate token create|list|revoke`, and what the client commands do
//! when the service refuses them (401/403: exit 2 with the message).

use reqwest::StatusCode;

use super::{args, batchgate, run, Run, DT, PART};
use crate::auth::{secured, BOOT};
use crate::helpers::{Backend, TestApp};

async fn secured_sqlite() -> TestApp {
    secured(Backend::Sqlite).await.expect("SQLite is always available")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_made_listed_and_revoked_on_the_database() {
    let app = secured_sqlite().await;
    let db = app.db.url.clone();

    let made = run(
        &app.base,
        [
            "token",
            "create",
            "--db",
            &db,
            "--name",
            "team-sales",
            "--scope",
            "read",
            "--scope",
            "produce:sales.*",
            "--expires",
            "90d",
        ],
    )
    .await
    .expect(0);
    let secret = made.stdout.trim().to_owned();
    assert!(
        secret.starts_with("bgt_") && !secret.contains(char::is_whitespace),
        "stdout is the token alone: {made:?}",
        made = made.stdout
    );
    made.says("shown only this once");
    assert_eq!(app.with_token(&secret).get("/v1/datasets").await.0, StatusCode::OK);

    let list = run(&app.base, ["token", "list", "--db", &db]).await.expect(0);
    assert!(list.stdout.contains("team-sales") && list.stdout.contains("read produce:sales.*"), "{}", list.stdout);
    assert!(!list.stdout.contains(&secret[4..]), "the list shows no secret: {}", list.stdout);
    assert!(list.stdout.contains("LAST USED"));

    run(&app.base, ["token", "revoke", "--db", &db, "team-sales"]).await.expect(0).says("revoked");
    assert_eq!(app.with_token(&secret).get("/v1/datasets").await.0, StatusCode::UNAUTHORIZED);
    run(&app.base, ["token", "revoke", "--db", &db, "team-sales"]).await.expect(1).says("no token named");
    run(&app.base, ["token", "create", "--db", &db, "--name", "x", "--scope", "write"])
        .await
        .expect(1)
        .says("not a scope");

    // The command line's token changes are in the audit log too.
    let (_, audit) = app.with_token(BOOT).get("/v1/audit?action=token.revoke").await;
    assert!(audit["items"][0]["actor"].as_str().unwrap().starts_with("cli:"), "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_client_commands_exit_2_with_the_message() {
    let app = secured_sqlite().await;
    let line = format!("batch start --task t --dataset sales.orders --dt {DT} --partition {PART}");

    let anonymous: Run = run(&app.base, args(&line)).await;
    anonymous.expect(2).says("unauthenticated");

    let reader = app.make_token(BOOT, "reader", &["read"]).await;
    let out: Run = batchgate(&app.base, args(&line)).env("BATCHGATE_TOKEN", &reader).output().await.unwrap().into();
    out.expect(2).says("produce:sales.orders");

    let producer = app.make_token(BOOT, "producer", &["produce:sales.*"]).await;
    let out: Run = batchgate(&app.base, args(&line)).env("BATCHGATE_TOKEN", &producer).output().await.unwrap().into();
    out.expect(0);
}
