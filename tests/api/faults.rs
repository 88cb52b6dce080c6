//! A storage fault is a 5xx and leaves the registry as it was: the fault is
//! injected in the database itself, half-way through the commit transaction.

use std::sync::Arc;

use batchgate::clock::SystemClock;
use reqwest::StatusCode;

use crate::helpers::{clean, Backend, TestApp};
use crate::on_both_backends;

on_both_backends!(
    a_fault_mid_commit_rolls_the_whole_commit_back,
    health_reports_the_backend,
    an_unknown_stored_value_is_an_error_naming_column_and_value,
    a_decision_stored_but_not_read_back_says_it_stands,
);

/// PostgreSQL breaks a deadlock by refusing one of the two writers
/// (`40P01`): that write is run again, and the request answered as if
/// nothing had happened. The refusal is injected once (a sequence, which a
/// rollback does not undo), half-way through the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_to_break_a_deadlock_is_run_again() {
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    let id = app.start_ok("t", "d.dl", "2026-08-24", &["dt=2026-08-24"]).await;
    app.sql(
        "CREATE SEQUENCE deadlocks; \
         CREATE FUNCTION inject_deadlock() RETURNS trigger AS $$ BEGIN \
           IF nextval('deadlocks') = 1 THEN RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01'; END IF; \
           RETURN NEW; END $$ LANGUAGE plpgsql; \
         CREATE TRIGGER inject_deadlock BEFORE UPDATE ON task_produce_log FOR EACH ROW WHEN (NEW.status = 'published') \
           EXECUTE FUNCTION inject_deadlock();",
    )
    .await;

    let (status, record) = app.commit(&id, &clean("dt=2026-08-24", 10)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!((record["state"].as_str(), record["partitions"][0]["version"].as_i64()), (Some("published"), Some(1)));
    let (_, events) = app.get(&format!("/v1/batches/{id}")).await;
    let committed = events["events"].as_array().expect("events").iter().filter(|e| e["kind"] == "committed").count();
    assert_eq!(committed, 1, "the refused attempt left nothing behind: {events}");
    let attempts = app.sql_count("SELECT last_value FROM deadlocks").await;
    assert_eq!(attempts, 2, "refused once, then run again once");
}

async fn inject_fault(app: &TestApp) {
    app.sql(match app.backend {
        Backend::Sqlite => {
            "CREATE TRIGGER inject_fault BEFORE UPDATE ON task_produce_log WHEN NEW.status = 'published' \
             BEGIN SELECT RAISE(ABORT, 'injected fault'); END;"
        }
        Backend::Postgres => {
            "CREATE FUNCTION inject_fault() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$ LANGUAGE plpgsql; \
             CREATE TRIGGER inject_fault BEFORE UPDATE ON task_produce_log FOR EACH ROW WHEN (NEW.status = 'published') EXECUTE FUNCTION inject_fault();"
        }
    })
    .await;
}

async fn a_fault_mid_commit_rolls_the_whole_commit_back(app: TestApp) {
    app.publish("t", "d.f", "2026-08-23", "dt=2026-08-23", 10).await;
    let id = app.start_ok("t", "d.f", "2026-08-24", &["dt=2026-08-24"]).await;
    let (_, before) = app.get(&format!("/v1/batches/{id}")).await;
    inject_fault(&app).await;

    let (status, err) = app.commit(&id, &clean("dt=2026-08-24", 10)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{err}");
    assert_eq!(err["error"]["code"], "storage_error");
    assert!(!err.to_string().contains("injected"), "internal details stay in the log: {err}");

    let (_, after) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(after, before, "no half-written batch: state, counts and events as before");
    let (status, ready) = app.ready("d.f", &["dt=2026-08-24"]).await;
    assert_eq!((status, ready["reason"].as_str()), (StatusCode::NOT_FOUND, Some("running")));

    app.sql(match app.backend {
        Backend::Sqlite => "DROP TRIGGER inject_fault",
        Backend::Postgres => "DROP TRIGGER inject_fault ON task_produce_log",
    })
    .await;
    let (status, record) = app.commit(&id, &clean("dt=2026-08-24", 10)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["partitions"][0]["version"], 1);
}

async fn health_reports_the_backend(app: TestApp) {
    let (status, body) = app.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["database"], "ok");
    let expected = match app.backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    assert_eq!(body["backend"], expected);
}

async fn an_unknown_stored_value_is_an_error_naming_column_and_value(app: TestApp) {
    let id = app.start_ok("t", "d.u", "2026-08-24", &["dt=2026-08-24"]).await;
    app.put_dataset("d.u", &serde_json::json!({})).await;
    app.sql(&format!("UPDATE batches SET state = 'exploded' WHERE batch_id = '{id}'")).await;
    app.sql("UPDATE datasets SET baseline_periods = -1 WHERE name = 'd.u'").await;

    // Never a panic, never a guess: a 500 the client can see, and the
    // service goes on answering.
    let (status, body) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::INTERNAL_SERVER_ERROR, Some("storage_error")));
    let (status, _) = app.get("/v1/datasets/d.u").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.get("/healthz").await.0, StatusCode::OK);

    // What the log of that 500 says: the column and the value.
    let opts = batchgate::store::DbOptions::default();
    let store = batchgate::store::SqlStore::connect(&app.db.url, &opts, Arc::new(SystemClock)).await.expect("connect");
    let e = store.get_batch(&id).await.expect_err("an unknown state is an error").to_string();
    assert!(e.contains("\"state\"") && e.contains("\"exploded\""), "names column and value: {e}");
    let e = store.get_dataset("d.u").await.expect_err("a negative count is an error").to_string();
    assert!(e.contains("baseline_periods") && e.contains("-1"), "names column and value: {e}");

    // An outbox row for a receiver this build does not know: the sender and
    // the deliveries listing say so (before, the sender panicked).
    app.sql(
        "INSERT INTO outbox (target, url, idempotency_key, payload, next_attempt_at, created_at) \
         VALUES ('pigeon', 'http://127.0.0.1:9/', 'k', '{}', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
    )
    .await;
    let (status, body) = app.get("/v1/deliveries").await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::INTERNAL_SERVER_ERROR, Some("storage_error")));
    let e = store.claim_deliveries(10).await.expect_err("an unknown target is an error").to_string();
    assert!(e.contains("\"target\"") && e.contains("\"pigeon\""), "names column and value: {e}");
    assert_eq!(app.get("/healthz").await.0, StatusCode::OK);
}

/// A commit whose decision is stored but whose answer cannot be read back
/// must not say "nothing was changed": 503 `answer_unavailable`, the data is
/// ready, and the same commit again gets the answer. (The record is made
/// unreadable inside the commit's own transaction, after the check results
/// are written, so only the read after the `COMMIT` meets it.)
async fn a_decision_stored_but_not_read_back_says_it_stands(app: TestApp) {
    let id = app.start_ok("t", "d.rb", "2026-08-24", &["dt=2026-08-24"]).await;
    let trigger = app.sql_rows(&format!("SELECT trigger_kind FROM batches WHERE batch_id = '{id}'")).await;
    let trigger = trigger[0][0].clone().expect("a trigger kind");
    app.sql(match app.backend {
        Backend::Sqlite => {
            "CREATE TRIGGER unreadable AFTER UPDATE ON task_produce_log WHEN NEW.status = 'published' \
             BEGIN UPDATE batches SET trigger_kind = 'exploded' WHERE batch_id = NEW.batch_id; END;"
        }
        Backend::Postgres => {
            "CREATE FUNCTION unreadable() RETURNS trigger AS $$ BEGIN \
               UPDATE batches SET trigger_kind = 'exploded' WHERE batch_id = NEW.batch_id; RETURN NEW; END $$ LANGUAGE plpgsql; \
             CREATE TRIGGER unreadable AFTER UPDATE ON task_produce_log FOR EACH ROW WHEN (NEW.status = 'published') \
               EXECUTE FUNCTION unreadable();"
        }
    })
    .await;

    let (status, err) = app.commit(&id, &clean("dt=2026-08-24", 10)).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("answer_unavailable")),
        "{err}"
    );
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("stored") && !message.contains("nothing was changed"), "{message}");
    let (status, ready) = app.ready("d.rb", &["dt=2026-08-24"]).await;
    assert_eq!(status, StatusCode::OK, "the decision stands: {ready}");

    app.sql(&format!("UPDATE batches SET trigger_kind = '{trigger}' WHERE batch_id = '{id}'")).await;
    let (status, record) = app.commit(&id, &clean("dt=2026-08-24", 10)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["state"], "published");
}
