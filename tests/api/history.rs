//! A batch's history (`events`), its checks and its source as the API shows
//! them: typed documents, served byte for byte as they were while they were
//! read back as JSON values, including events written by earlier versions.

use reqwest::StatusCode;
use serde_json::{json, Value};

use batchgate::domain::checks::{self, CheckResult, Compact, PartitionEvidence, Recorded, StoredCheck};
use batchgate::domain::names::PartitionSpec;
use batchgate::store::db::Packed;
use batchgate::store::events::Started;

use crate::helpers::{clean, TestApp};
use crate::on_both_backends;

const DS: &str = "dws.order_detail";
const TASK: &str = "dws_order_detail_daily";
const DT: &str = "2026-08-24";
const P: &str = "dt=2026-08-24";

on_both_backends!(
    every_event_detail_checks_and_source_are_served_as_stored,
    events_written_by_earlier_versions_read_and_show_as_stored,
    an_event_detail_that_is_not_its_kinds_is_a_storage_error,
    a_repeated_start_answers_the_same_retry_advice_from_either_stored_form,
);

/// An idempotent start answers again with the retry advice its `started`
/// event keeps: rebuilt from the number it is stored as, or read whole from
/// a row written before issue 14, the same bytes either way.
async fn a_repeated_start_answers_the_same_retry_advice_from_either_stored_form(app: TestApp) {
    let body = json!({"task": TASK, "dataset": DS, "dt": DT, "partitions": [P]});
    let send = || {
        let req = app.client.post(format!("{}/v1/batches", app.base)).header("Idempotency-Key", "k-retry").json(&body);
        async move {
            let r = req.send().await.expect("request");
            (r.status(), r.text().await.expect("body"))
        }
    };
    let (status, first) = send().await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let first: Value = serde_json::from_str(&first).unwrap();
    let id = first["batch_id"].as_str().expect("batch_id").to_owned();
    let (status, again) = send().await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(serde_json::from_str::<Value>(&again).unwrap()["retry"], first["retry"], "{again}");
    let (_, shown) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(shown["events"][0]["detail"]["retry"], first["retry"], "{shown}");
    // The event is the row's; stored in one-letter keys, as from issue 14
    // until migration 0013: the same bytes.
    assert_eq!(store_row_events(&app, &id).await, 1);
    assert_eq!(send().await, (StatusCode::OK, again.clone()), "the one-letter form answers the same bytes");
    let whole = shown["events"][0]["detail"].to_string().replace('\'', "''");
    app.sql(&format!("UPDATE batch_events SET detail = '{whole}' WHERE batch_id = '{id}' AND kind = 'started'")).await;
    assert_eq!(send().await, (StatusCode::OK, again), "the whole advice, as stored before, answers the same bytes");
}

/// Makes the events a batch's row gives back (migration 0013) rows of
/// `batch_events`, in the forms written before it (a `started` event in
/// one-letter keys, a publish without its marker), in their place among the
/// batch's other events: the batch as it would be stored had an earlier
/// version written it. Returns how many events it moved out of the row.
async fn store_row_events(app: &TestApp, id: &str) -> usize {
    let row = app
        .sql_rows(&format!(
            "SELECT CAST(start_retry AS TEXT), CASE WHEN published_in_row THEN '1' ELSE '0' END FROM batches \
             WHERE batch_id = '{id}'"
        ))
        .await;
    let (start_retry, published_in_row) = (row[0][0].clone(), row[0][1].as_deref() == Some("1"));
    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    let stored =
        app.sql_rows(&format!("SELECT CAST(id AS TEXT) FROM batch_events WHERE batch_id = '{id}' ORDER BY id")).await;
    let mut stored = stored.into_iter().map(|r| r[0].clone().expect("id"));
    let (mut moved, mut old) = (0, Vec::new());
    for (i, event) in record["events"].as_array().expect("events").iter().enumerate() {
        let (kind, at) = (event["kind"].as_str().expect("kind"), event["at"].as_str().expect("at"));
        let detail = match (kind, &start_retry) {
            ("started", Some(r)) if i == 0 => {
                Some(json!({"l": event["detail"]["lease_expires_at"], "r": r.parse::<u8>().unwrap()}))
            }
            ("committed", _) if published_in_row && event["detail"]["state"] == "published" => {
                Some(json!({"state": "published"}))
            }
            _ => None,
        };
        match detail {
            Some(detail) => {
                app.sql(&format!(
                    "INSERT INTO batch_events (batch_id, kind, at, detail) VALUES ('{id}', '{kind}', '{at}', '{detail}')"
                ))
                .await;
                moved += 1;
            }
            None => {
                let was = stored.next().expect("a stored event for each event not of the row");
                app.sql(&format!(
                    "INSERT INTO batch_events (batch_id, kind, at, detail) SELECT batch_id, kind, at, detail FROM batch_events WHERE id = {was}"
                ))
                .await;
                old.push(was);
            }
        }
    }
    assert_eq!(stored.next(), None, "every stored event is served");
    if !old.is_empty() {
        app.sql(&format!("DELETE FROM batch_events WHERE id IN ({})", old.join(", "))).await;
    }
    app.sql(&format!("UPDATE batches SET start_retry = NULL, published_in_row = FALSE WHERE batch_id = '{id}'")).await;
    moved
}

/// Checks that `GET /v1/batches/{id}` shows every stored event, in order,
/// with its detail, and the batch's checks and source, exactly as the stored
/// JSON read as a value serialises (keys sorted, compact). Returns the kinds.
async fn served_as_stored(app: &TestApp, id: &str) -> Vec<String> {
    let (status, body) = app.get_bytes(&format!("/v1/batches/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let as_value = |text: Option<&str>| -> String {
        let stored: Value = text.map_or(Value::Null, |t| serde_json::from_str(t).expect("stored JSON"));
        serde_json::to_string(&stored).expect("JSON")
    };
    let rows = app
        .sql_rows(&format!("SELECT kind, CAST(detail AS TEXT) FROM batch_events WHERE batch_id = '{id}' ORDER BY id"))
        .await;
    let record: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(record["events"].as_array().expect("events").len(), rows.len(), "{body}");
    let mut rest = body.as_str();
    let mut kinds = Vec::new();
    for row in &rows {
        let kind = row[0].clone().expect("kind");
        let head = format!("{{\"kind\":\"{kind}\",\"at\":");
        let at = rest.find(&head).unwrap_or_else(|| panic!("no {head} after the events before it in {body}"));
        rest = &rest[at + head.len()..];
        rest = &rest[rest.find("\",").expect("the time") + 2..];
        // A start's retry advice is stored as the number it is rebuilt
        // from (issue 14), or whole by rows written before: either reads as
        // the detail, shown as its JSON value.
        let detail = match (kind.as_str(), row[1].as_deref()) {
            ("started", Some(text)) => {
                let read: Started = serde_json::from_str(text).expect("stored started detail");
                serde_json::to_string(&serde_json::to_value(&read).expect("JSON")).expect("JSON")
            }
            // A publish leaves out its marker, the batch's (issue 14); rows
            // written before keep it.
            ("committed", Some(text)) => {
                let mut stored: Value = serde_json::from_str(text).expect("stored committed detail");
                if stored["state"] == "published" && stored.get("marker").is_none() {
                    stored["marker"] = record["marker"].clone();
                }
                serde_json::to_string(&stored).expect("JSON")
            }
            (_, text) => as_value(text),
        };
        let detail = format!("\"detail\":{detail}}}");
        assert!(rest.starts_with(&detail), "{kind}: {detail} is not at {rest}");
        rest = &rest[detail.len()..];
        kinds.push(kind);
    }
    let batch = app
        .sql_rows(&format!("SELECT CAST(checks AS TEXT), CAST(source AS TEXT) FROM batches WHERE batch_id = '{id}'"))
        .await;
    // Checks are stored without what the batch's record gives back, packed
    // (on PostgreSQL one JSON string holding them), or compactly or as shown
    // by rows written before (issue 14): each reads as the checks, shown as
    // their JSON value.
    let checks = batch[0][0].as_deref().map_or_else(
        || "[]".to_owned(),
        |c| {
            let Packed(stored): Packed<Vec<StoredCheck>> = serde_json::from_str(c).expect("stored checks");
            let read = checks::rebuild(stored, || Ok::<_, String>(recorded(&record))).expect("rebuilt checks");
            serde_json::to_string(&serde_json::to_value(&read).expect("JSON")).expect("JSON")
        },
    );
    assert!(body.contains(&format!("\"checks\":{checks},")), "checks {checks} not as stored in {body}");
    let source = as_value(batch[0][1].as_deref());
    assert!(body.contains(&format!("\"source\":{source},")), "source {source} not as stored in {body}");
    kinds
}

/// What a batch's record (as served) keeps of its commit.
fn recorded(record: &Value) -> Recorded {
    let partitions = record["partitions"].as_array().expect("partitions").iter().map(|p| {
        let spec = PartitionSpec::parse(p["partition"].as_str().expect("partition")).expect("spec");
        let n = |key: &str| p[key].as_i64();
        let metrics = Some(&p["metrics"]).filter(|m| !m.is_null());
        let counts = PartitionEvidence::recorded(
            spec.clone(),
            n("rows_written"),
            n("row_count"),
            n("distinct_keys"),
            n("null_keys"),
            metrics,
        );
        (spec, counts)
    });
    let source = serde_json::from_value(record["source"].clone()).expect("source");
    Recorded::new(record["marker"].as_str().map(str::to_owned), source, partitions)
}

async fn every_event_detail_checks_and_source_are_served_as_stored(app: TestApp) {
    let start = |dataset: &str, partition: &str| {
        let body = json!({"task": TASK, "dataset": dataset, "dt": DT, "partitions": [partition], "lease_seconds": 60});
        let app = &app;
        async move {
            let (status, started) = app.post("/v1/batches", &body).await;
            assert_eq!(status, StatusCode::CREATED, "{started}");
            started["batch_id"].as_str().expect("batch_id").to_owned()
        }
    };
    // started, two heartbeats, written, committed (published, with a
    // source), fail_after_publish, then superseded by a restatement.
    let a = start(DS, P).await;
    for _ in 0..2 {
        assert_eq!(app.post(&format!("/v1/batches/{a}/heartbeat"), &json!({})).await.0, StatusCode::OK);
    }
    let written = json!({"partitions": [{"partition": P, "rows_written": 5}]});
    assert_eq!(app.post(&format!("/v1/batches/{a}/written"), &written).await.0, StatusCode::OK);
    let mut evidence = clean(P, 5);
    evidence["source"] = json!({"row_count": 5});
    assert_eq!(app.commit(&a, &evidence).await.0, StatusCode::OK);
    app.post(&format!("/v1/batches/{a}/fail"), &json!({"stage": "verify", "category": "data", "message": "late"}))
        .await;
    let b = start(DS, P).await;
    assert_eq!(app.commit(&b, &clean(P, 5)).await.0, StatusCode::OK);
    // committed (rejected, with its failed checks).
    let c = start("d.rejected", P).await;
    let mut bad = clean(P, 5);
    bad["partitions"][0]["row_count"] = json!(4);
    let (status, rejected) = app.commit(&c, &bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{rejected}");
    // failed.
    let d = start("d.failed", P).await;
    app.post(&format!("/v1/batches/{d}/fail"), &json!({"stage": "write", "category": "unknown"})).await;
    // abandoned by a newer start, then by the lease scan.
    let e = start("d.abandoned", P).await;
    app.clock.advance(chrono::Duration::seconds(61));
    let f = start("d.abandoned", P).await;
    app.clock.advance(chrono::Duration::seconds(61));
    app.scan().await;

    // An ordinary batch's `started` event and its publish's `committed`
    // event are its row's (migration 0013): b stores no event.
    assert_eq!(app.sql_count(&format!("SELECT COUNT(*) FROM batch_events WHERE batch_id = '{b}'")).await, 0);
    // Stored as earlier versions stored them, they serve the same bytes: a
    // and b gave both, c, d and e their start, f neither (it found e's
    // residue).
    let kinds_of = |record: &Value| -> Vec<String> {
        record["events"].as_array().expect("events").iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect()
    };
    let (_, record) = app.get(&format!("/v1/batches/{a}")).await;
    let life = ["started", "heartbeat", "written", "committed", "fail_after_publish", "superseded"];
    assert_eq!(kinds_of(&record), life, "the row's events in their place: {record}");
    let (_, record) = app.get(&format!("/v1/batches/{b}")).await;
    assert_eq!(kinds_of(&record), ["started", "committed"], "{record}");
    let (started, committed) = (&record["events"][0], &record["events"][1]);
    assert_eq!(
        (&started["at"], &started["detail"]["lease_expires_at"]),
        (&record["started_at"], &record["lease_expires_at"])
    );
    assert_eq!((&started["detail"]["trigger"], &started["detail"]["residue"]), (&json!("scheduled"), &json!([])));
    assert_eq!(committed["at"], record["decided_at"]);
    assert_eq!(committed["detail"], json!({"state": "published", "marker": record["marker"]}));
    let mut moved = Vec::new();
    for id in [&a, &b, &c, &d, &e, &f] {
        let (_, before) = app.get_bytes(&format!("/v1/batches/{id}")).await;
        moved.push(store_row_events(&app, id).await);
        assert_eq!(
            app.get_bytes(&format!("/v1/batches/{id}")).await.1,
            before,
            "{id}: the row's events as stored rows"
        );
    }
    assert_eq!(moved, [2, 2, 1, 1, 1, 0]);
    let mut kinds = Vec::new();
    for id in [&a, &b, &c, &d, &e, &f] {
        kinds.extend(served_as_stored(&app, id).await);
    }
    // A published batch's checks are stored without what its record gives
    // back: the volume check's baseline aside, a number each.
    let stored_checks = |id: &str| format!("SELECT CAST(checks AS TEXT) FROM batches WHERE batch_id = '{id}'");
    let stored = app.sql_rows(&stored_checks(&b)).await[0][0].clone().expect("checks");
    let Packed(stored): Packed<Value> = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored, json!([1, 9, 17, 25, 33, 41, 54, 63]), "{stored}");
    // Checks as rows written before stored them, as shown before issue 14
    // and compact since: served the same, and so are their listings, the
    // console's page and the replayed commit.
    for id in [&b, &c] {
        let (_, before) = app.get_bytes(&format!("/v1/batches/{id}")).await;
        let (status, listed) =
            app.get_bytes(&format!("/v1/batches?dataset={}", if id == &b { DS } else { "d.rejected" })).await;
        assert!(status == StatusCode::OK && listed.contains(r#""checks":[{"#), "{listed}");
        let console = app.client.get(format!("{}/ui/batches/{id}", app.base)).send().await.expect("console");
        let console = console.text().await.expect("page");
        let (_, shown) = app.get(&format!("/v1/batches/{id}")).await;
        let shown: Vec<CheckResult> = serde_json::from_value(shown["checks"].clone()).unwrap();
        for old in [serde_json::to_string(&shown).unwrap(), serde_json::to_string(&Compact(&shown)).unwrap()] {
            app.sql(&format!("UPDATE batches SET checks = '{}' WHERE batch_id = '{id}'", old.replace('\'', "''")))
                .await;
            assert_eq!(app.get_bytes(&format!("/v1/batches/{id}")).await.1, before, "old checks {old}, same bytes");
            let again =
                app.get_bytes(&format!("/v1/batches?dataset={}", if id == &b { DS } else { "d.rejected" })).await;
            assert_eq!(again.1, listed, "listed the same");
            let page = app.client.get(format!("{}/ui/batches/{id}", app.base)).send().await.expect("console");
            assert_eq!(page.text().await.expect("page"), console, "the console shows them the same");
            served_as_stored(&app, id).await;
        }
    }
    let (status, replayed) = app.commit(&c, &bad).await;
    assert_eq!((status, replayed), (StatusCode::UNPROCESSABLE_ENTITY, rejected), "a repeated commit, the same answer");
    // A start's retry advice: stored as a number, served whole; stored whole
    // as rows written before issue 14 kept it: served the same.
    let started = |id: &str| {
        format!("SELECT CAST(detail AS TEXT) FROM batch_events WHERE batch_id = '{id}' AND kind = 'started'")
    };
    let stored: Value =
        serde_json::from_str(app.sql_rows(&started(&a)).await[0][0].as_deref().expect("detail")).unwrap();
    assert!(stored["r"].is_u64(), "{stored}");
    let (_, before) = app.get_bytes(&format!("/v1/batches/{a}")).await;
    let (_, shown) = app.get(&format!("/v1/batches/{a}")).await;
    assert_eq!(shown["events"][0]["detail"]["retry"]["safe"], true, "{shown}");
    // With the API's keys and the advice as a number, as stored from issue
    // 14 until the one-letter keys: served the same.
    let mut keyed = shown["events"][0]["detail"].clone();
    keyed["retry"] = stored["r"].clone();
    let keyed = keyed.to_string().replace('\'', "''");
    app.sql(&format!("UPDATE batch_events SET detail = '{keyed}' WHERE batch_id = '{a}' AND kind = 'started'")).await;
    assert_eq!(app.get_bytes(&format!("/v1/batches/{a}")).await.1, before, "keyed started detail, same bytes");
    let whole = shown["events"][0]["detail"].to_string().replace('\'', "''");
    app.sql(&format!("UPDATE batch_events SET detail = '{whole}' WHERE batch_id = '{a}' AND kind = 'started'")).await;
    let stored: Value =
        serde_json::from_str(app.sql_rows(&started(&a)).await[0][0].as_deref().expect("detail")).unwrap();
    assert!(stored["retry"].is_object(), "{stored}");
    assert_eq!(app.get_bytes(&format!("/v1/batches/{a}")).await.1, before, "old started detail, same bytes");
    // A publish's marker: left out of the stored detail, served from the
    // batch; kept in it as rows written before issue 14 did: served the same.
    let committed =
        format!("SELECT CAST(detail AS TEXT) FROM batch_events WHERE batch_id = '{b}' AND kind = 'committed'");
    let stored: Value = serde_json::from_str(app.sql_rows(&committed).await[0][0].as_deref().expect("detail")).unwrap();
    assert_eq!(stored, json!({"state": "published"}));
    let (_, before) = app.get_bytes(&format!("/v1/batches/{b}")).await;
    let (_, shown) = app.get(&format!("/v1/batches/{b}")).await;
    let event = shown["events"].as_array().unwrap().iter().find(|e| e["kind"] == "committed").unwrap().clone();
    assert_eq!(event["detail"], json!({"state": "published", "marker": shown["marker"]}), "{shown}");
    let whole = event["detail"].to_string().replace('\'', "''");
    app.sql(&format!("UPDATE batch_events SET detail = '{whole}' WHERE batch_id = '{b}' AND kind = 'committed'")).await;
    assert_eq!(app.get_bytes(&format!("/v1/batches/{b}")).await.1, before, "old committed detail, same bytes");
    served_as_stored(&app, &b).await;
    kinds.sort();
    kinds.dedup();
    let every: Vec<&str> =
        ["abandoned", "committed", "fail_after_publish", "failed", "heartbeat", "started", "superseded", "written"]
            .into();
    assert_eq!(kinds, every, "every event kind is covered");
    let (_, record) = app.get(&format!("/v1/batches/{a}")).await;
    assert_eq!(record["source"], json!({"row_count": 5, "metrics": {}}));
    let heartbeat = record["events"].as_array().unwrap().iter().find(|e| e["kind"] == "heartbeat").unwrap();
    assert_eq!(heartbeat["detail"]["count"], 2);
}

/// The first version wrote a `started` event without retry advice or
/// cleaned batch ids, and one `heartbeat` event per heartbeat holding only
/// the lease it set.
async fn events_written_by_earlier_versions_read_and_show_as_stored(app: TestApp) {
    let id = app.start_ok(TASK, DS, DT, &[P]).await;
    app.sql(&format!(
        "UPDATE batches SET start_retry = NULL WHERE batch_id = '{id}';
         DELETE FROM batch_events WHERE batch_id = '{id}';
         INSERT INTO batch_events (batch_id, kind, at, detail) VALUES
           ('{id}', 'started', '2026-08-24T01:00:00+00:00',
            '{{\"trigger\": \"scheduled\", \"run_ref\": null, \"lease_expires_at\": \"2026-08-24T02:00:00Z\", \"residue\": []}}'),
           ('{id}', 'heartbeat', '2026-08-24T01:10:00+00:00', '{{\"lease_expires_at\": \"2026-08-24T02:10:00Z\"}}');"
    ))
    .await;
    let kinds = served_as_stored(&app, &id).await;
    assert_eq!(kinds, ["started", "heartbeat"]);
    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(record["events"][0]["detail"].get("retry"), None, "absent, as stored");
    assert_eq!(record["events"][1]["detail"], json!({"lease_expires_at": "2026-08-24T02:10:00Z"}));
    let page = app.client.get(format!("{}/ui/batches/{id}", app.base)).send().await.expect("console");
    assert_eq!(page.status(), StatusCode::OK, "the console shows it too");

    // The next heartbeat sums up onto the old event: it was one, at the event's time.
    assert_eq!(app.post(&format!("/v1/batches/{id}/heartbeat"), &json!({})).await.0, StatusCode::OK);
    let (_, record) = app.get(&format!("/v1/batches/{id}")).await;
    let detail = &record["events"][1]["detail"];
    assert_eq!((detail["count"].as_i64(), detail["first_at"].as_str()), (Some(2), Some("2026-08-24T01:10:00Z")));
}

async fn an_event_detail_that_is_not_its_kinds_is_a_storage_error(app: TestApp) {
    let id = app.start_ok(TASK, DS, DT, &[P]).await;
    app.sql(&format!(
        "INSERT INTO batch_events (batch_id, kind, at, detail) VALUES ('{id}', 'superseded', '2026-08-24T01:00:00+00:00', '{{}}')"
    ))
    .await;
    let (status, err) = app.get(&format!("/v1/batches/{id}")).await;
    assert_eq!((status, err["error"]["code"].as_str()), (StatusCode::INTERNAL_SERVER_ERROR, Some("storage_error")));
}
