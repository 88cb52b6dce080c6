//! A storage fault is a 5xx and leaves the registry as it was: the fault is
//! injected in the database itself, half-way through the commit transaction.

use reqwest::StatusCode;

use crate::helpers::{clean, Backend, TestApp};
use crate::on_both_backends;

on_both_backends!(a_fault_mid_commit_rolls_the_whole_commit_back, health_reports_the_backend);

async fn inject_fault(app: &TestApp) {
    app.sql(match app.backend {
        Backend::Sqlite => {
            "CREATE TRIGGER inject_fault BEFORE INSERT ON batch_events WHEN NEW.kind = 'committed' \
             BEGIN SELECT RAISE(ABORT, 'injected fault'); END;"
        }
        Backend::Postgres => {
            "CREATE FUNCTION inject_fault() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$ LANGUAGE plpgsql; \
             CREATE TRIGGER inject_fault BEFORE INSERT ON batch_events FOR EACH ROW WHEN (NEW.kind = 'committed') EXECUTE FUNCTION inject_fault();"
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
        Backend::Postgres => "DROP TRIGGER inject_fault ON batch_events",
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
