//! The batch lifecycle and the readiness rule, story by story.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{check, clean, TestApp};
use crate::on_both_backends;

const DS: &str = "dws.order_detail";
const TASK: &str = "dws_order_detail_daily";
const DT: &str = "2026-08-24";
const P: &str = "dt=2026-08-24";

on_both_backends!(
    a_first_run_publishes_and_ready_flips,
    an_appended_second_copy_is_rejected_until_a_clean_rerun,
    seven_of_twelve_partitions_is_not_complete,
    a_rejected_commit_keeps_the_last_report_of_a_partition_named_twice,
    a_lost_commit_acknowledgement_is_answered_the_same,
    a_replayed_decision_is_the_same_bytes,
    a_replay_is_rebuilt_from_the_batch_as_it_was_decided,
    a_decision_stored_by_an_earlier_version_replays_as_stored,
    a_failure_before_writing_keeps_the_earlier_version_ready,
    a_failure_while_writing_hides_the_earlier_version,
    an_expired_lease_is_abandoned_by_the_next_start,
    heartbeats_extend_the_lease,
    idempotency_keys_return_the_same_batch,
    ready_by_task_and_dt_follows_the_latest_batch,
);

async fn a_first_run_publishes_and_ready_flips(app: TestApp) {
    let (status, body) = app.ready(DS, &[P]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["reason"], "no_batch");

    let (status, started) = app
        .post(
            "/v1/batches",
            &json!({"task": TASK, "dataset": DS, "dt": DT, "partitions": [P],
                "scope": {"timezone": "Asia/Shanghai", "business_start": "2026-08-24T00:00:00+08:00",
                          "business_end": "2026-08-25T00:00:00+08:00", "input_snapshot": "event_date=2026-08-24"},
                "trigger": "scheduled", "run_ref": "scheduled__2026-08-25T00:00:00", "lease_seconds": 3600}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(started["batch_id"], "dws_order_detail_daily-20260824-001");
    assert_eq!(started["seq"], 1);
    assert_eq!(started["state"], "running");
    assert_eq!(started["residue"], json!([]));
    let id = started["batch_id"].as_str().unwrap();

    let (status, body) = app.ready(DS, &[P]).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("running")));

    let (status, record) = app.commit(id, &clean(P, 1_000_000)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["state"], "published");
    assert_eq!(record["partitions"][0]["version"], 1);
    assert_eq!(check(&record, "rows_match_written")["status"], "pass");

    let (status, text) = app.ready_text(&format!("dataset={DS}&partition=dt%3D2026-08-24")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(text.contains(r#""ready":true"#), "{text}");
    let (_, ready) = app.ready(DS, &[P]).await;
    assert_eq!(ready["partitions"][0]["version"], 1);
    assert_eq!(ready["partitions"][0]["batch_id"], id);
    assert_eq!(ready["partitions"][0]["row_count"], 1_000_000);
    assert!(ready["partitions"][0]["published_at"].is_string());

    let (status, history) = app.get(&format!("/v1/batches?task={TASK}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(history["items"].as_array().unwrap().len(), 1);
    assert_eq!(history["items"][0]["state"], "published");
    assert_eq!(history["items"][0]["scope"]["timezone"], "Asia/Shanghai");
    let (_, one) = app.get(&format!("/v1/batches/{id}")).await;
    let kinds: Vec<&str> = one["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["started", "committed"]);
    assert_eq!(one["run_ref"], "scheduled__2026-08-25T00:00:00");
}

async fn an_appended_second_copy_is_rejected_until_a_clean_rerun(app: TestApp) {
    let first = app.publish(TASK, DS, DT, P, 1_000_000).await;
    let first_id = first["batch_id"].as_str().unwrap();

    let rerun = app.start_ok(TASK, DS, DT, &[P]).await;
    assert!(rerun.ends_with("-002"));
    let appended = json!({"marker": "_SUCCESS", "partitions": [{"partition": P, "rows_written": 1_000_000, "row_count": 1_920_000,
        "distinct_keys": 1_000_000, "null_keys": 0}]});
    let (status, rejected) = app.commit(&rerun, &appended).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{rejected}");
    assert_eq!(rejected["error"]["code"], "checks_failed");
    assert_eq!(rejected["state"], "rejected");
    assert_eq!(check(&rejected, "rows_match_written")["status"], "fail");
    assert_eq!(check(&rejected, "rows_match_written")["observed"], 1_920_000);

    let (status, body) = app.ready(DS, &[P]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["reason"], "rejected");
    assert_eq!(body["batch_id"], rerun.as_str());
    assert_eq!(body["last_published"]["version"], 1);
    assert_eq!(body["last_published"]["batch_id"], first_id);

    let (status, third) = app.start(TASK, DS, DT, &[P]).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(third["residue"], json!([{"batch_id": rerun, "state": "rejected", "partitions": [P]}]));
    let (status, record) = app.commit(third["batch_id"].as_str().unwrap(), &clean(P, 1_000_000)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["partitions"][0]["version"], 2);

    let (status, ready) = app.ready(DS, &[P]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ready["partitions"][0]["version"], 2);
    let (_, old) = app.get(&format!("/v1/batches/{first_id}")).await;
    assert_eq!(old["state"], "superseded");
    assert_eq!(old["superseded_by"], third["batch_id"]);
    assert!(old["events"].as_array().unwrap().iter().any(|e| e["kind"] == "superseded"));
}

async fn seven_of_twelve_partitions_is_not_complete(app: TestApp) {
    let hours: Vec<String> = (0..12).map(|h| format!("dt=2026-08-24/hh={h:02}")).collect();
    let parts: Vec<&str> = hours.iter().map(String::as_str).collect();
    let id = app.start_ok("hourly", "dwd.events", DT, &parts).await;
    let reported: Vec<_> = hours[..7]
        .iter()
        .map(|p| json!({"partition": p, "rows_written": 10, "row_count": 10, "distinct_keys": 10, "null_keys": 0}))
        .collect();
    let (status, record) = app.commit(&id, &json!({"marker": "m", "partitions": reported})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let c = check(&record, "partitions_complete");
    assert_eq!(c["status"], "fail");
    assert_eq!(c["observed"]["missing"].as_array().unwrap().len(), 5);
    let (status, body) = app.ready("dwd.events", &parts).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("rejected")));
    let (status, _) = app.ready("dwd.events", &[parts[0]]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a reported partition of a rejected batch is not ready either");
}

/// A rejected commit writes each declared partition's log row once, with
/// its status: a partition reported twice keeps the last report's counts
/// (as when each report was its own statement), and one not reported is
/// settled without counts.
async fn a_rejected_commit_keeps_the_last_report_of_a_partition_named_twice(app: TestApp) {
    let (p1, p2) = ("dt=2026-08-24/hh=00", "dt=2026-08-24/hh=01");
    let id = app.start_ok("hourly_twice", "dwd.twice", DT, &[p1, p2]).await;
    let report = |rows: u64| json!({"partition": p1, "rows_written": rows, "row_count": rows, "distinct_keys": rows, "null_keys": 0});
    let (status, record) = app.commit(&id, &json!({"marker": "m", "partitions": [report(10), report(20)]})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{record}");
    assert_eq!(check(&record, "partitions_complete")["observed"]["duplicated"], json!([p1]), "{record}");
    let (status, stored) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    let partitions = stored["partitions"].as_array().expect("partitions");
    let shown: Vec<(&str, &str, Option<i64>)> = partitions
        .iter()
        .map(|p| (p["partition"].as_str().unwrap(), p["status"].as_str().unwrap(), p["row_count"].as_i64()))
        .collect();
    assert_eq!(shown, [(p1, "rejected", Some(20)), (p2, "rejected", None)], "{stored}");
    let (status, body) = app.ready("dwd.twice", &[p1, p2]).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("rejected")), "{body}");
}

async fn a_lost_commit_acknowledgement_is_answered_the_same(app: TestApp) {
    let id = app.start_ok(TASK, DS, DT, &[P]).await;
    let body = clean(P, 500);
    let (s1, first) = app.commit(&id, &body).await;
    let (s2, again) = app.commit(&id, &body).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    assert_eq!(first, again, "a repeated commit must return the identical body");
    let (_, ready) = app.ready(DS, &[P]).await;
    assert_eq!(ready["partitions"][0]["version"], 1, "the version moved by one, not two");

    let (status, err) = app.commit(&id, &clean(P, 501)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(err["error"]["code"], "already_decided");
    let (status, err) =
        app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "write", "category": "unknown"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(err["error"]["code"], "already_decided");
    let (_, ready) = app.ready(DS, &[P]).await;
    assert_eq!(ready["ready"], true, "a late fail does not unpublish");

    // A rejected commit replays as the same 422.
    let id2 = app.start_ok(TASK, DS, DT, &[P]).await;
    let bad = json!({"marker": "", "partitions": [{"partition": P, "rows_written": 1, "row_count": 1}]});
    let (a, ra) = app.commit(&id2, &bad).await;
    let (b, rb) = app.commit(&id2, &bad).await;
    assert_eq!((a, b), (StatusCode::UNPROCESSABLE_ENTITY, StatusCode::UNPROCESSABLE_ENTITY));
    assert_eq!(ra, rb);
}

/// The store keeps what it decided (the record and the outcome), and the
/// HTTP layer maps it to a status and a body each time: a replay must still
/// be the first answer's exact bytes, also on PostgreSQL, whose JSONB
/// reorders the stored keys, and after the batch moved on.
async fn a_replayed_decision_is_the_same_bytes(app: TestApp) {
    let scope = json!({"timezone": "Asia/Shanghai", "business_start": "2026-08-24T00:00:00+08:00"});
    let start = |ds: &str| json!({"task": TASK, "dataset": ds, "dt": DT, "partitions": [P], "scope": scope});
    let evidence = |rows: u64| {
        json!({"marker": "m", "partitions": [{"partition": P, "rows_written": rows, "row_count": rows,
            "distinct_keys": rows, "null_keys": 0, "metrics": {"zeta": 1.5, "amount": 98765432.10, "n": 3}}],
            "source": {"row_count": rows, "metrics": {"amount": 98765432.10}}})
    };
    let started = |(s, b): (StatusCode, serde_json::Value)| {
        assert_eq!(s, StatusCode::CREATED, "{b}");
        b["batch_id"].as_str().unwrap().to_owned()
    };

    // Published.
    let id = started(app.post("/v1/batches", &start(DS)).await);
    let commit = format!("/v1/batches/{id}/commit");
    let (s1, first) = app.post_bytes(&commit, &evidence(500)).await;
    assert_eq!(s1, StatusCode::OK, "{first}");
    let (s2, again) = app.post_bytes(&commit, &evidence(500)).await;
    assert_eq!((s2, &again), (StatusCode::OK, &first), "a replayed publish is the same bytes");
    // A newer batch supersedes it: the replay is still the answer that was given.
    app.publish(TASK, DS, DT, P, 600).await;
    let (_, now) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(now["state"], "superseded");
    let (s3, later) = app.post_bytes(&commit, &evidence(500)).await;
    assert_eq!((s3, &later), (StatusCode::OK, &first), "the recorded answer, not the batch as it is now");

    // Rejected: 422 `checks_failed`, with the failed checks.
    let id = started(app.post("/v1/batches", &start("dws.replay_rejected")).await);
    let commit = format!("/v1/batches/{id}/commit");
    let mut bad = evidence(500);
    bad["marker"] = json!("");
    let (s1, first) = app.post_bytes(&commit, &bad).await;
    assert_eq!(s1, StatusCode::UNPROCESSABLE_ENTITY, "{first}");
    let body: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(body["state"], "rejected");
    assert_eq!(body["error"]["code"], "checks_failed");
    assert_eq!(body["error"]["details"], json!({"batch_id": id, "failed_checks": ["marker_present"]}));
    let (s2, again) = app.post_bytes(&commit, &bad).await;
    assert_eq!((s2, &again), (StatusCode::UNPROCESSABLE_ENTITY, &first), "a replayed rejection is the same bytes");

    // Failed.
    let id = started(app.post("/v1/batches", &start("dws.replay_failed")).await);
    let fail = format!("/v1/batches/{id}/fail");
    let report = json!({"stage": "write", "category": "data", "message": "disk full"});
    let (s1, first) = app.post_bytes(&fail, &report).await;
    assert_eq!(s1, StatusCode::OK, "{first}");
    let (s2, again) = app.post_bytes(&fail, &report).await;
    assert_eq!((s2, &again), (StatusCode::OK, &first), "a replayed fail is the same bytes");
}

/// The answer to a decision is not stored a second time: a replay rebuilds
/// it from the batch, undoing what happened since (one of two partitions
/// re-published, then the whole batch superseded, a late fail), to the bytes
/// first sent.
async fn a_replay_is_rebuilt_from_the_batch_as_it_was_decided(app: TestApp) {
    let (a, b) = ("dt=2026-08-24/hh=00", "dt=2026-08-24/hh=01");
    let id = app.start_ok(TASK, DS, DT, &[a, b]).await;
    let evidence = json!({"marker": "m", "partitions": [
        {"partition": a, "rows_written": 5, "row_count": 5, "metrics": {"x": 1.0}},
        {"partition": b, "rows_written": 7, "row_count": 7, "metrics": {"x": 2.5}}],
        "source": {"row_count": 12, "metrics": {"x": 3.5}}});
    let commit = format!("/v1/batches/{id}/commit");
    let (s1, first) = app.post_bytes(&commit, &evidence).await;
    assert_eq!(s1, StatusCode::OK, "{first}");
    let replay = || async { app.post_bytes(&commit, &evidence).await };

    app.publish(TASK, DS, DT, a, 6).await;
    let (_, now) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(
        (now["state"].as_str(), now["partitions"][0]["status"].as_str()),
        (Some("published"), Some("superseded"))
    );
    assert_eq!(replay().await, (StatusCode::OK, first.clone()), "one partition re-published");

    app.publish(TASK, DS, DT, b, 8).await;
    let late = json!({"stage": "write", "category": "unknown"});
    assert_eq!(app.post(&format!("/v1/batches/{id}/fail"), &late).await.0, StatusCode::CONFLICT);
    let (_, now) = app.get(&format!("/v1/batches/{id}")).await;
    let kinds: Vec<&str> = now["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["started", "committed", "superseded", "fail_after_publish"]);
    assert_eq!(replay().await, (StatusCode::OK, first), "superseded, then a late fail");

    let stored =
        app.sql_rows(&format!("SELECT decision_body, decision_fingerprint FROM batches WHERE batch_id = '{id}'")).await;
    assert_eq!(stored[0][0], None, "no second copy of the record");
    let canonical = evidence.to_string();
    let hash = stored[0][1].clone().expect("fingerprint");
    let sha = |bytes: usize| {
        use base64::Engine;
        use sha2::Digest;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&sha2::Sha256::digest(canonical.as_bytes())[..bytes])
    };
    assert_eq!(hash, sha(8), "the first 64 bits of the body's SHA-256, not the body");

    // A row decided by a version that kept the first 128 bits replays too.
    let (_, answer) = replay().await;
    app.sql(&format!("UPDATE batches SET decision_fingerprint = '{}' WHERE batch_id = '{id}'", sha(16))).await;
    let (status, again) = replay().await;
    assert_eq!((status, &again), (StatusCode::OK, &answer), "a 128-bit fingerprint is known again");
    let mut other = evidence.clone();
    other["marker"] = json!("another");
    let (status, _) = app.post_bytes(&commit, &other).await;
    assert_eq!(status, StatusCode::CONFLICT, "and a different body is still not");
}

/// A row decided before replays were rebuilt keeps the record it answered
/// with and its request's canonical body as the fingerprint: a replay sends
/// that record, and a start with its idempotency key is known again.
async fn a_decision_stored_by_an_earlier_version_replays_as_stored(app: TestApp) {
    let start = json!({"task": TASK, "dataset": DS, "dt": DT, "partitions": [P]});
    let send = |b: serde_json::Value| {
        let req = app.client.post(format!("{}/v1/batches", app.base)).header("Idempotency-Key", "k-old").json(&b);
        async move {
            let r = req.send().await.unwrap();
            (r.status(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (status, started) = send(start.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let id = started["batch_id"].as_str().unwrap().to_owned();
    let evidence = clean(P, 500);
    let (status, mut answered) = app.commit(&id, &evidence).await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    // As an earlier version stored it (marked, to tell it from a rebuild).
    answered["marker"] = json!("as answered then");
    let q = |v: &serde_json::Value| v.to_string().replace('\'', "''");
    app.sql(&format!(
        "UPDATE batches SET decision_body = '{}', decision_fingerprint = '{}', request_fingerprint = '{}' WHERE batch_id = '{id}'",
        q(&answered),
        q(&evidence),
        q(&start)
    ))
    .await;
    let (status, replayed) = app.commit(&id, &evidence).await;
    assert_eq!((status, replayed), (StatusCode::OK, answered));
    let (status, again) = send(start).await;
    assert_eq!((status, again["batch_id"].as_str()), (StatusCode::OK, Some(id.as_str())), "{again}");
    let (status, err) = send(json!({"task": TASK, "dataset": DS, "dt": DT, "partitions": ["dt=2026-08-25"]})).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("idempotency_key_reused"))
    );
}

async fn a_failure_before_writing_keeps_the_earlier_version_ready(app: TestApp) {
    app.publish(TASK, DS, DT, P, 100).await;
    let id = app.start_ok(TASK, DS, DT, &[P]).await;
    let fail = json!({"stage": "read", "category": "resource", "message": "source not reachable"});
    let (status, record) = app.post(&format!("/v1/batches/{id}/fail"), &fail).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["state"], "failed");
    assert_eq!(record["failure"]["stage"], "read");
    let (again, same) = app.post(&format!("/v1/batches/{id}/fail"), &fail).await;
    assert_eq!((again, &same), (StatusCode::OK, &record), "fail is idempotent");
    let (status, ready) = app.ready(DS, &[P]).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(ready["partitions"][0]["version"], 1);
    let (_, next) = app.start(TASK, DS, DT, &[P]).await;
    assert_eq!(next["residue"], json!([]), "a read failure wrote nothing");
}

async fn a_failure_while_writing_hides_the_earlier_version(app: TestApp) {
    app.publish(TASK, DS, DT, P, 100).await;
    let id = app.start_ok(TASK, DS, DT, &[P]).await;
    let (status, _) =
        app.post(&format!("/v1/batches/{id}/fail"), &json!({"stage": "write", "category": "partial_write"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = app.ready(DS, &[P]).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("failed")));
    assert_eq!(body["last_published"]["version"], 1);
    // A later read failure does not make the half-written table ready again.
    let id3 = app.start_ok(TASK, DS, DT, &[P]).await;
    app.post(&format!("/v1/batches/{id3}/fail"), &json!({"stage": "compute"})).await;
    let (status, body) = app.ready(DS, &[P]).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("failed")));
    let (_, next) = app.start(TASK, DS, DT, &[P]).await;
    assert_eq!(next["residue"], json!([{"batch_id": id, "state": "failed", "partitions": [P]}]));
}

async fn an_expired_lease_is_abandoned_by_the_next_start(app: TestApp) {
    let first = app
        .post("/v1/batches", &json!({"task": TASK, "dataset": DS, "dt": DT, "partitions": [P], "lease_seconds": 60}))
        .await
        .1;
    let first_id = first["batch_id"].as_str().unwrap();
    let (status, busy) = app.start(TASK, DS, DT, &[P]).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(busy["error"]["code"], "batch_in_progress");
    assert_eq!(busy["error"]["details"]["batch_id"], first_id);

    app.clock.advance(chrono::Duration::seconds(61));
    let (status, second) = app.start(TASK, DS, DT, &[P]).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["residue"], json!([{"batch_id": first_id, "state": "abandoned", "partitions": [P]}]));
    let (_, old) = app.get(&format!("/v1/batches/{first_id}")).await;
    assert_eq!(old["state"], "abandoned");
    let (status, late) = app.commit(first_id, &clean(P, 1)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(late["error"]["code"], "superseded");
}

async fn heartbeats_extend_the_lease(app: TestApp) {
    let started = app
        .post("/v1/batches", &json!({"task": TASK, "dataset": DS, "dt": DT, "partitions": [P], "lease_seconds": 60}))
        .await
        .1;
    let id = started["batch_id"].as_str().unwrap();
    app.clock.advance(chrono::Duration::seconds(50));
    let (status, lease) = app.post(&format!("/v1/batches/{id}/heartbeat"), &json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(lease["lease_expires_at"].as_str().unwrap() > started["lease_expires_at"].as_str().unwrap());
    app.clock.advance(chrono::Duration::seconds(50));
    let (status, _) = app.start(TASK, DS, DT, &[P]).await;
    assert_eq!(status, StatusCode::CONFLICT, "the heartbeat kept the lease alive");
    app.commit(id, &clean(P, 5)).await;
    let (status, err) = app.post(&format!("/v1/batches/{id}/heartbeat"), &json!({})).await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("batch_not_running")));
    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    assert!(record["events"].as_array().unwrap().iter().any(|e| e["kind"] == "heartbeat"));
}

async fn idempotency_keys_return_the_same_batch(app: TestApp) {
    let body = json!({"task": TASK, "dataset": DS, "dt": DT, "partitions": [P]});
    let send = |b: serde_json::Value| {
        let req = app.client.post(format!("{}/v1/batches", app.base)).header("Idempotency-Key", "run-42").json(&b);
        async move {
            let r = req.send().await.unwrap();
            (r.status(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (s1, a) = send(body.clone()).await;
    let (s2, b) = send(body.clone()).await;
    assert_eq!((s1, s2), (StatusCode::CREATED, StatusCode::OK));
    assert_eq!(a["batch_id"], b["batch_id"]);
    let (s3, err) = send(json!({"task": TASK, "dataset": DS, "dt": DT, "partitions": ["dt=2026-08-25"]})).await;
    assert_eq!(s3, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(err["error"]["code"], "idempotency_key_reused");
    let (_, list) = app.get(&format!("/v1/batches?task={TASK}")).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "never a second batch");
}

async fn ready_by_task_and_dt_follows_the_latest_batch(app: TestApp) {
    let q = format!("task={TASK}&dt={DT}");
    let (status, body) = app.get(&format!("/ready?{q}")).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("no_batch")));
    let id = app.start_ok(TASK, DS, DT, &[P, "dt=2026-08-24/region=cn"]).await;
    let (status, body) = app.get(&format!("/ready?{q}")).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::NOT_FOUND, Some("running")));
    let ev = json!({"marker": "m", "partitions": [
        {"partition": P, "rows_written": 1, "row_count": 1},
        {"partition": "dt=2026-08-24/region=cn", "rows_written": 2, "row_count": 2}]});
    assert_eq!(app.commit(&id, &ev).await.0, StatusCode::OK);
    let (status, body) = app.get(&format!("/ready?{q}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["latest_batch_id"], id.as_str());
    assert_eq!(body["partitions"].as_array().unwrap().len(), 2);
}
