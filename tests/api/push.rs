//! Push, not poll: published partitions become Airflow asset events, and
//! every change-feed entry a CloudEvent, through the one outbox, against
//! local receivers on 127.0.0.1 (a fake Airflow that checks what it is sent,
//! wants a token and fails when told to; a CloudEvents receiver that fails
//! its first requests).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use batchgate::config::AirflowAuth;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::console::html;
use crate::helpers::{clean, enc, Backend, Receiver, TestApp};
use crate::per_backend;

const DT: &str = "2026-08-24";
const P: &str = "dt=2026-08-24";
const ASSET: &str = "dws.order_detail";

/// What the fake Airflow holds and how it misbehaves.
#[derive(Default)]
struct AirflowState {
    /// `(id, name, uri)`.
    assets: Vec<(i64, String, String)>,
    events: Vec<Value>,
    /// POSTs of events answered 503 without storing the event.
    fail_posts: usize,
    /// POSTs of events stored, then answered 503 (the answer is lost).
    lose_answers: usize,
    posts: usize,
    lookups: usize,
    token_requests: usize,
    tokens: Vec<String>,
    /// Seconds an issued JWT lives.
    token_ttl: i64,
    /// Requests refused for a missing or unknown token.
    unauthorized: usize,
    /// Bodies that did not have the shape Airflow wants.
    bad_bodies: Vec<String>,
}

type Shared = Arc<Mutex<AirflowState>>;

/// Airflow 3's REST API as far as batchgate uses it, with SimpleAuthManager's
/// password exchange (user `bg`, password `pw`).
struct FakeAirflow {
    url: String,
    state: Shared,
}

fn authorized(state: &mut AirflowState, headers: &HeaderMap) -> bool {
    let token = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let ok = token.is_some_and(|t| state.tokens.iter().any(|known| known == t));
    if !ok {
        state.unauthorized += 1;
    }
    ok
}

/// Whether an event body has the shape the issue promises.
fn check_body(state: &AirflowState, body: &Value) -> Result<(), String> {
    let asset_id = body["asset_id"].as_i64().ok_or("asset_id is not an integer")?;
    if !state.assets.iter().any(|(id, _, _)| *id == asset_id) {
        return Err(format!("no asset {asset_id}"));
    }
    body["partition_key"].as_str().ok_or("no partition_key")?;
    let extra = &body["extra"];
    extra["batch_id"].as_str().ok_or("extra.batch_id")?;
    let version = extra["version"].as_i64().ok_or("extra.version")?;
    extra["row_count"].as_i64().ok_or("extra.row_count")?;
    chrono::DateTime::parse_from_rfc3339(extra["published_at"].as_str().ok_or("extra.published_at")?)
        .map_err(|e| format!("extra.published_at: {e}"))?;
    if version > 1 {
        if extra["restatement"] != json!(true) || extra["superseded_version"] != json!(version - 1) {
            return Err(format!("a restatement must say so: {extra}"));
        }
        extra["superseded_row_count"].as_i64().ok_or("extra.superseded_row_count")?;
    } else if extra.get("restatement").is_some() {
        return Err("a first version is no restatement".into());
    }
    Ok(())
}

impl FakeAirflow {
    async fn start(fail_posts: usize) -> Self {
        let state: Shared = Arc::new(Mutex::new(AirflowState {
            assets: vec![(1, format!("{ASSET}_v2"), format!("{ASSET}_v2")), (7, ASSET.into(), ASSET.into())],
            fail_posts,
            token_ttl: 3600,
            ..AirflowState::default()
        }));
        let app = axum::Router::new()
            .route("/auth/token", post(token))
            .route("/api/v2/assets", get(assets))
            .route("/api/v2/assets/events", get(events).post(post_event))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, state }
    }

    fn with<T>(&self, f: impl FnOnce(&mut AirflowState) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    fn events(&self) -> Vec<Value> {
        self.with(|s| s.events.clone())
    }
}

async fn token(State(state): State<Shared>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let mut s = state.lock().unwrap();
    s.token_requests += 1;
    if body != json!({"username": "bg", "password": "pw"}) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"detail": "Invalid credentials"})));
    }
    let exp = chrono::Utc::now().timestamp() + s.token_ttl;
    let claims = URL_SAFE_NO_PAD.encode(json!({"sub": "bg", "exp": exp, "n": s.token_requests}).to_string());
    let jwt = format!("eyJhbGciOiJIUzUxMiJ9.{claims}.sig");
    s.tokens.push(jwt.clone());
    (StatusCode::CREATED, Json(json!({"access_token": jwt})))
}

async fn assets(
    State(state): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> (StatusCode, Json<Value>) {
    let mut s = state.lock().unwrap();
    if !authorized(&mut s, &headers) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"detail": "Not authenticated"})));
    }
    // Like Airflow: a pattern matches any part of the name (or URI).
    let found: Vec<Value> = s
        .assets
        .iter()
        .filter(|(_, name, uri)| match (q.get("name_pattern"), q.get("uri_pattern")) {
            (Some(p), _) => name.contains(p.as_str()),
            (None, Some(p)) => uri.contains(p.as_str()),
            (None, None) => true,
        })
        .map(|(id, name, uri)| json!({"id": id, "name": name, "uri": uri, "group": "asset", "extra": {}}))
        .collect();
    let total = found.len();
    (StatusCode::OK, Json(json!({"assets": found, "total_entries": total})))
}

async fn events(
    State(state): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> (StatusCode, Json<Value>) {
    let mut s = state.lock().unwrap();
    if !authorized(&mut s, &headers) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"detail": "Not authenticated"})));
    }
    s.lookups += 1;
    assert_eq!(q.get("order_by").map(String::as_str), Some("-timestamp"), "newest first");
    let asset: Option<i64> = q.get("asset_id").and_then(|a| a.parse().ok());
    let mut found: Vec<Value> =
        s.events.iter().filter(|e| asset.is_none_or(|a| e["asset_id"] == json!(a))).cloned().collect();
    found.reverse();
    let total = found.len();
    (StatusCode::OK, Json(json!({"asset_events": found, "total_entries": total})))
}

async fn post_event(
    State(state): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let mut s = state.lock().unwrap();
    if !authorized(&mut s, &headers) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"detail": "Not authenticated"})));
    }
    s.posts += 1;
    // As Airflow answers an asset id it does not have.
    let asset_id = body["asset_id"].as_i64();
    if !s.assets.iter().any(|(id, _, _)| Some(*id) == asset_id) {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"detail": format!("Asset with ID: `{}` was not found", body["asset_id"])})),
        );
    }
    if let Err(why) = check_body(&s, &body) {
        s.bad_bodies.push(why.clone());
        return (StatusCode::BAD_REQUEST, Json(json!({"detail": why})));
    }
    if s.fail_posts > 0 {
        s.fail_posts -= 1;
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"detail": "down"})));
    }
    let mut extra = body["extra"].clone();
    extra["from_rest_api"] = json!(true);
    let event = json!({"id": s.events.len() + 1, "asset_id": body["asset_id"], "partition_key": body["partition_key"],
        "extra": extra, "timestamp": chrono::Utc::now().to_rfc3339(), "created_dagruns": []});
    s.events.push(event.clone());
    if s.lose_answers > 0 {
        s.lose_answers -= 1;
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"detail": "answer lost"})));
    }
    (StatusCode::OK, Json(event))
}

async fn with_airflow(backend: Backend, airflow: &FakeAirflow) -> Option<TestApp> {
    let url = airflow.url.clone();
    TestApp::spawn_with(backend, move |s| {
        s.airflow_url = Some(url.clone());
        s.airflow_auth = AirflowAuth::Password { username: "bg".into(), password: "pw".into() };
    })
    .await
}

async fn deliveries(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, body) = app.get(&format!("/v1/deliveries?{query}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["items"].as_array().unwrap().clone()
}

/// Scans until nothing is pending (advancing the clock past each backoff), at most `rounds` times.
async fn drain(app: &TestApp, rounds: usize) {
    for _ in 0..rounds {
        app.scan().await;
        if deliveries(app, "state=pending").await.is_empty() {
            return;
        }
        app.clock.advance(chrono::Duration::minutes(6));
    }
    panic!("deliveries still pending: {:?}", deliveries(app, "state=pending").await);
}

/// A published partition becomes one asset event, sent with a JWT got for
/// the password, retried while Airflow fails; a running, rejected or failed
/// batch sends nothing; a restatement says what it replaced.
async fn a_published_partition_becomes_an_airflow_asset_event(backend: Backend) {
    let airflow = FakeAirflow::start(2).await;
    let Some(app) = with_airflow(backend, &airflow).await else { return };
    app.put_dataset("d.push", &json!({"airflow_asset": ASSET})).await;

    let running = app.start_ok("t", "d.push", DT, &[P]).await;
    app.scan().await;
    let (status, _) =
        app.commit(&running, &json!({"partitions": [{"partition": P, "rows_written": 10, "row_count": 9}]})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "rejected");
    let failed = app.start_ok("t", "d.push", DT, &[P]).await;
    let (status, _) =
        app.post(&format!("/v1/batches/{failed}/fail"), &json!({"stage": "write", "category": "resource"})).await;
    assert_eq!(status, StatusCode::OK);
    app.scan().await;
    assert_eq!(airflow.with(|s| s.posts), 0, "nothing while running, after a rejection or a failure");
    assert!(deliveries(&app, "target=airflow").await.is_empty());

    let first = app.publish("t", "d.push", DT, P, 100).await;
    let report = app.scan().await;
    assert_eq!((report.delivered, report.failed_deliveries), (0, 1));
    let pending = deliveries(&app, "target=airflow&state=pending").await;
    assert_eq!(pending.len(), 1);
    assert!(pending[0]["last_error"].as_str().unwrap().contains("503"), "{}", pending[0]);
    assert_eq!(pending[0]["attempts"], 1);
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.scan().await.failed_deliveries, 1);
    assert_eq!(app.scan().await.delivered, 0, "not before its backoff");
    app.clock.advance(chrono::Duration::seconds(2));
    assert_eq!(app.scan().await.delivered, 1);

    let events = airflow.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["asset_id"], 7, "the asset named exactly, not the one whose name contains it");
    assert_eq!(events[0]["partition_key"], DT);
    assert_eq!(events[0]["extra"]["batch_id"], first["batch_id"]);
    assert_eq!(
        (events[0]["extra"]["version"].clone(), events[0]["extra"]["row_count"].clone()),
        (json!(1), json!(100))
    );
    assert_eq!(airflow.with(|s| (s.token_requests, s.unauthorized, s.bad_bodies.clone())), (1, 0, vec![]));
    let sent = deliveries(&app, "target=airflow&state=delivered").await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["payload"]["partition_key"], DT);
    assert!(sent[0]["delivered_at"].is_string());

    // Two hours on the token has expired: a new one is got before the next call.
    app.clock.advance(chrono::Duration::hours(2));
    let second = app.publish("t", "d.push", DT, P, 120).await;
    app.scan().await;
    let events = airflow.events();
    assert_eq!(events.len(), 2);
    let extra = &events[1]["extra"];
    assert_eq!(extra["batch_id"], second["batch_id"]);
    assert_eq!((extra["version"].clone(), extra["restatement"].clone()), (json!(2), json!(true)));
    assert_eq!((extra["superseded_version"].clone(), extra["superseded_row_count"].clone()), (json!(1), json!(100)));
    assert_eq!(airflow.with(|s| (s.token_requests, s.unauthorized)), (2, 0), "renewed before it expired");
}

/// Batchgate stops after Airflow stored the event but before it heard so:
/// the next attempt finds the event in Airflow and does not post it again.
async fn a_restart_mid_delivery_does_not_duplicate_the_event(backend: Backend) {
    let airflow = FakeAirflow::start(0).await;
    airflow.with(|s| s.lose_answers = 1);
    let Some(app) = with_airflow(backend, &airflow).await else { return };
    app.put_dataset("d.push", &json!({"airflow_asset": ASSET})).await;
    app.publish("t", "d.push", DT, P, 100).await;
    assert_eq!(app.scan().await.failed_deliveries, 1, "the answer was lost");
    assert_eq!(airflow.events().len(), 1, "but Airflow has the event");

    let app = app.restart().await;
    app.clock.advance(chrono::Duration::seconds(5));
    assert_eq!(app.scan().await.delivered, 1);
    assert_eq!(airflow.with(|s| (s.posts, s.events.len())), (1, 1), "looked up, not posted again");
    assert!(airflow.with(|s| s.lookups) >= 1);

    // Stopped after taking the delivery, before any answer was recorded:
    // the event reached Airflow (posted by hand here), the row only says it was taken.
    let app = app.restart().await;
    let second = app.publish("t", "d.push", "2026-08-25", "dt=2026-08-25", 50).await;
    let row = deliveries(&app, "target=airflow&state=pending").await;
    assert_eq!(row.len(), 1);
    app.sql(&format!("UPDATE outbox SET claims = 1 WHERE id = {}", row[0]["id"])).await;
    airflow.with(|s| {
        let mut event =
            json!({"id": 99, "asset_id": 7, "partition_key": "2026-08-25", "extra": row[0]["payload"]["extra"]});
        event["extra"]["from_rest_api"] = json!(true);
        s.events.push(event);
    });
    assert_eq!(app.scan().await.delivered, 1);
    assert_eq!(airflow.with(|s| s.posts), 1, "the second event was found, not posted");
    assert_eq!(airflow.events().iter().filter(|e| e["extra"]["batch_id"] == second["batch_id"]).count(), 1);
    // Without the by-hand event the same row would have been posted: the lookup decides.
    assert_eq!(airflow.with(|s| s.bad_bodies.len()), 0);
}

/// An asset Airflow does not know is an alert, not a silent drop; the
/// event waits and goes once the asset exists.
async fn an_unknown_airflow_asset_is_an_alert(backend: Backend) {
    let airflow = FakeAirflow::start(0).await;
    let Some(app) = with_airflow(backend, &airflow).await else { return };
    app.put_dataset("d.unknown", &json!({"airflow_asset": "dws.not_yet", "owner": "team-dws"})).await;
    app.publish("t", "d.unknown", DT, P, 100).await;
    assert_eq!(app.scan().await.failed_deliveries, 1);
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.scan().await.failed_deliveries, 1);
    let (status, alerts) = app.get("/v1/alerts?kind=airflow_asset_unknown").await;
    assert_eq!(status, StatusCode::OK);
    let items = alerts["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one alert, however often it is tried: {alerts}");
    assert_eq!((items[0]["dataset"].as_str(), items[0]["owner"].as_str()), (Some("d.unknown"), Some("team-dws")));
    assert!(items[0]["message"].as_str().unwrap().contains("dws.not_yet"));
    assert_eq!(items[0]["recommended_action"], "fix_airflow_asset");
    let pending = deliveries(&app, "target=airflow&state=pending").await;
    assert!(pending[0]["last_error"].as_str().unwrap().contains("has no asset"), "{}", pending[0]);
    assert_eq!(airflow.with(|s| s.posts), 0);

    airflow.with(|s| s.assets.push((8, "dws.not_yet".into(), "dws.not_yet".into())));
    app.clock.advance(chrono::Duration::seconds(5));
    assert_eq!(app.scan().await.delivered, 1);
    assert_eq!(airflow.events()[0]["asset_id"], 8);
    // The event went through: Airflow knows the asset, the alert is resolved.
    let alerts_of = |state: &'static str| {
        let app = &app;
        async move {
            let (status, page) = app.get(&format!("/v1/alerts?kind=airflow_asset_unknown&state={state}")).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            page["items"].as_array().unwrap().clone()
        }
    };
    assert_eq!(alerts_of("open").await, Vec::<Value>::new(), "resolved once the event went through");
    let resolved = alerts_of("resolved").await;
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["id"], items[0]["id"]);

    // The asset goes away again (a new instance has no cached id): a new alert.
    airflow.with(|s| s.assets.clear());
    let app = app.restart().await;
    app.publish("t", "d.unknown", "2026-08-25", "dt=2026-08-25", 100).await;
    assert_eq!(app.scan().await.failed_deliveries, 1);
    let (_, open) = app.get("/v1/alerts?kind=airflow_asset_unknown&state=open").await;
    let open = open["items"].as_array().unwrap();
    assert_eq!(open.len(), 1, "the same trouble again is a new alert: {open:?}");
    assert_ne!(open[0]["id"], items[0]["id"]);
}

/// An asset made again in Airflow under a new id (its DAG file changed):
/// the cached id is answered 404 once, looked up again, and the event goes
/// to the new one.
async fn an_asset_made_again_under_a_new_id_is_looked_up_again(backend: Backend) {
    let airflow = FakeAirflow::start(0).await;
    let Some(app) = with_airflow(backend, &airflow).await else { return };
    app.put_dataset("d.moved", &json!({"airflow_asset": ASSET})).await;
    app.publish("t", "d.moved", DT, P, 100).await;
    assert_eq!(app.scan().await.delivered, 1);
    assert_eq!(airflow.events()[0]["asset_id"], 7);

    airflow.with(|s| {
        s.assets.retain(|(id, _, _)| *id != 7);
        s.assets.push((12, ASSET.into(), ASSET.into()));
    });
    app.publish("t", "d.moved", "2026-08-25", "dt=2026-08-25", 50).await;
    assert_eq!(app.scan().await.failed_deliveries, 1, "the cached id is gone");
    let pending = deliveries(&app, "target=airflow&state=pending").await;
    assert!(pending[0]["last_error"].as_str().unwrap().contains("404"), "{}", pending[0]);
    app.clock.advance(chrono::Duration::seconds(5));
    assert_eq!(app.scan().await.delivered, 1, "looked up again");
    let events = airflow.events();
    assert_eq!((events.len(), &events[1]["asset_id"]), (2, &json!(12)));
    assert_eq!(airflow.with(|s| s.bad_bodies.len()), 0);
}

/// Deliveries of one partition go in order: while the first waits for its
/// retry the second is held back; another partition is not held up.
async fn asset_events_go_in_order_per_partition(backend: Backend) {
    let airflow = FakeAirflow::start(1).await;
    let Some(app) = with_airflow(backend, &airflow).await else { return };
    app.put_dataset("d.order", &json!({"airflow_asset": ASSET, "partition_key": "{region}|{dt}"})).await;
    let (cn, us) = ("dt=2026-08-24/region=cn", "dt=2026-08-24/region=us");
    app.publish("t", "d.order", DT, cn, 10).await;
    app.publish("t", "d.order", DT, cn, 11).await;
    app.publish("t2", "d.order", DT, us, 20).await;
    let report = app.scan().await;
    assert_eq!((report.failed_deliveries, report.delivered), (1, 1), "cn v1 failed, cn v2 held back, us sent");
    let keys = |events: Vec<Value>| -> Vec<(String, i64)> {
        events
            .iter()
            .map(|e| (e["partition_key"].as_str().unwrap().to_owned(), e["extra"]["version"].as_i64().unwrap()))
            .collect()
    };
    assert_eq!(keys(airflow.events()), [("us|2026-08-24".to_owned(), 1)]);
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.scan().await.delivered, 2);
    assert_eq!(
        keys(airflow.events()),
        [("us|2026-08-24".to_owned(), 1), ("cn|2026-08-24".to_owned(), 1), ("cn|2026-08-24".to_owned(), 2)]
    );
}

/// Every change-feed entry is POSTed as a CloudEvent; the receiver fails
/// its first requests; in the end each change arrived (once by id), in
/// order per partition, with ids equal to the feed's cursors.
async fn every_change_is_a_cloud_event_once_in_order_per_partition(backend: Backend) {
    let receiver = Receiver::start(3).await;
    let url = receiver.url.clone();
    let Some(app) = TestApp::spawn_with(backend, move |s| s.events_urls = vec![url.clone()]).await else { return };
    build(&app, "ods.a", &[], 10).await;
    build(&app, "dwd.b", &["ods.a"], 10).await;
    app.scan().await;
    build(&app, "ods.a", &[], 12).await; // restated; dwd.b goes stale
    let app = app.restart().await; // deliveries survive a restart
    app.scan().await;
    let (status, body) =
        app.post(&format!("/v1/partitions/ods.a/{}/invalidate", enc(P)), &json!({"reason": "dup"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    build(&app, "ods.a", &[], 11).await;
    build(&app, "dwd.b", &["ods.a"], 10).await; // restated, fresh again
    drain(&app, 20).await;

    let (status, feed) = app.get("/v1/changes?limit=1000").await;
    assert_eq!(status, StatusCode::OK);
    let feed = feed["items"].as_array().unwrap().clone();
    let kinds: HashSet<&str> = feed.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    for k in ["published", "restated", "stale", "invalidated", "fresh_again"] {
        assert!(kinds.contains(k), "the scenario makes a {k} change: {kinds:?}");
    }
    let seen: Vec<Value> = receiver.seen.lock().unwrap().iter().map(|(_, body)| body.clone()).collect();
    assert!(seen.len() > feed.len(), "the receiver failed some requests, which were sent again");
    let mut first_seen: Vec<&Value> = Vec::new();
    for e in &seen {
        if !first_seen.iter().any(|f| f["id"] == e["id"]) {
            first_seen.push(e);
        }
    }
    assert_eq!(first_seen.len(), feed.len(), "every change, each id once");
    for change in &feed {
        let e = first_seen.iter().find(|e| e["id"] == change["cursor"]).expect("each change was delivered");
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(e["type"], format!("io.batchgate.partition.{}", change["kind"].as_str().unwrap()));
        assert_eq!(
            e["subject"],
            format!("{}/{}", change["dataset"].as_str().unwrap(), change["partition"].as_str().unwrap())
        );
        assert_eq!(e["data"]["cursor"], change["cursor"]);
        assert_eq!(e["data"]["version"], change["version"]);
    }
    let position = |id: &Value| feed.iter().position(|c| c["cursor"] == *id).unwrap();
    let mut by_subject: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for e in &first_seen {
        by_subject.entry(e["subject"].as_str().unwrap().to_owned()).or_default().push(position(&e["id"]));
    }
    for (subject, order) in by_subject {
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{subject} out of order: {order:?}");
    }
    let rows = deliveries(&app, "target=events&limit=500").await;
    assert_eq!(rows.len(), feed.len(), "one outbox row per change and receiver");
    assert!(rows.iter().all(|r| r["state"] == "delivered" && r["cursor"].is_string()));
    let keys: Vec<Option<String>> = receiver.seen.lock().unwrap().iter().map(|(k, _)| k.clone()).collect();
    assert!(keys.iter().zip(&seen).all(|(k, e)| k.as_deref() == e["id"].as_str()), "Idempotency-Key is the id");
}

/// Starts a batch on `dataset` at `P` reading `inputs`, commits clean evidence.
async fn build(app: &TestApp, dataset: &str, inputs: &[&str], rows: u64) -> Value {
    let inputs: Vec<Value> = inputs.iter().map(|d| json!({"dataset": d, "partition": P})).collect();
    let task = format!("build_{}", dataset.replace('.', "_"));
    let (status, started) = app
        .post("/v1/batches", &json!({"task": task, "dataset": dataset, "dt": DT, "partitions": [P], "inputs": inputs}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let (status, record) = app.commit(started["batch_id"].as_str().unwrap(), &clean(P, rows)).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    record
}

/// A dataset's own events_url gets its changes; /v1/deliveries filters by
/// target and state and shows the last error.
async fn a_dataset_events_url_and_the_deliveries_listing(backend: Backend) {
    let receiver = Receiver::start(1).await;
    let hook = Receiver::start(0).await;
    let hook_url = hook.url.clone();
    let Some(app) = TestApp::spawn_with(backend, move |s| {
        s.webhook_allow = vec!["127.0.0.1".into()];
        s.webhook_url = Some(hook_url.clone());
    })
    .await
    else {
        return;
    };
    app.put_dataset("d.own", &json!({"events_url": receiver.url})).await;
    app.publish("t", "d.own", DT, P, 10).await;
    app.publish("t", "d.other", DT, P, 10).await; // no events_url: no CloudEvent
    let failed = app.start_ok("t2", "d.own", DT, &["dt=2026-08-25"]).await;
    app.post(&format!("/v1/batches/{failed}/fail"), &json!({"stage": "write", "category": "resource"})).await;
    let report = app.scan().await;
    assert_eq!((report.delivered, report.failed_deliveries), (1, 1), "the webhook went, the event failed once");

    let pending = deliveries(&app, "target=events&state=pending").await;
    assert_eq!(pending.len(), 1);
    assert_eq!((pending[0]["dataset"].as_str(), pending[0]["partition"].as_str()), (Some("d.own"), Some(P)));
    assert!(pending[0]["last_error"].as_str().unwrap().contains("500"), "{}", pending[0]);
    let hooks = deliveries(&app, "target=webhook").await;
    assert_eq!(hooks.len(), 1);
    assert_eq!((hooks[0]["state"].as_str(), hooks[0]["alert_id"].is_i64()), (Some("delivered"), true));
    assert!(deliveries(&app, "target=airflow").await.is_empty());
    assert_eq!(deliveries(&app, "dataset=d.other").await.len(), 0);

    // The dataset's console page shows them: the event waiting with its
    // error, the receiver by its origin only.
    let origin = receiver.url.trim_end_matches("/hook");
    let page = html(&app, "/ui/datasets/d.own").await;
    let shown = page.split("id=\"deliveries-h\"").nth(1).expect("a Deliveries section");
    assert!(shown.contains("badge s-pending") && shown.contains("next attempt"), "{shown}");
    assert!(shown.contains(pending[0]["last_error"].as_str().unwrap()), "the last error: {shown}");
    assert!(shown.contains(origin) && !shown.contains(&receiver.url), "origin only: {shown}");
    let other = html(&app, "/ui/datasets/d.other").await;
    assert!(other.contains("No deliveries"), "{other}");

    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.scan().await.delivered, 1);
    assert_eq!(deliveries(&app, "state=delivered").await.len(), 2);
    let page = html(&app, "/ui/datasets/d.own").await;
    let shown = page.split("id=\"deliveries-h\"").nth(1).expect("a Deliveries section");
    assert!(shown.contains("badge s-delivered") && !shown.contains("badge s-pending"), "{shown}");
    assert!(deliveries(&app, "state=given_up").await.is_empty());
    let page = deliveries(&app, "limit=1").await;
    assert_eq!(page.len(), 1);
    let (_, body) = app.get("/v1/deliveries?limit=1").await;
    let (_, next) = app.get(&format!("/v1/deliveries?limit=1&cursor={}", body["next_cursor"].as_str().unwrap())).await;
    assert_ne!(next["items"][0]["id"], body["items"][0]["id"]);

    for (query, field) in
        [("target=kafka", "target"), ("state=sent", "state"), ("limit=0", "limit"), ("bogus=1", "bogus")]
    {
        let (status, err) = app.get(&format!("/v1/deliveries?{query}")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {err}");
        assert_eq!(err["error"]["details"]["field"], field, "{query}: {err}");
    }
}

/// The push fields of a policy are checked: a 422 names the field.
async fn push_policy_fields_are_validated(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| s.webhook_allow = vec!["hooks.example".into()]).await else {
        return;
    };
    let put = |body: Value| {
        let app = &app;
        async move { app.request(reqwest::Method::PUT, "/v1/datasets/d.policy", Some(&body)).await }
    };
    for (body, field, code) in [
        (json!({"airflow_asset": ASSET, "partition_key": "{dt"}), "partition_key", "invalid_field"),
        (json!({"partition_key": "dt"}), "partition_key", "invalid_field"),
        (json!({"partition_key": "{region}|{d-t}"}), "partition_key", "invalid_field"),
        (json!({"airflow_asset": "bad\nasset"}), "airflow_asset", "invalid_field"),
        (json!({"events_url": "http://elsewhere.example/e"}), "events_url", "webhook_not_allowed"),
        (json!({"events_url": "ftp://hooks.example/e"}), "events_url", "invalid_field"),
    ] {
        let (status, err) = put(body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {err}");
        assert_eq!(
            (err["error"]["code"].as_str(), err["error"]["details"]["field"].as_str()),
            (Some(code), Some(field)),
            "{body}: {err}"
        );
    }
    assert_eq!(app.get("/v1/datasets/d.policy").await.0, StatusCode::NOT_FOUND, "nothing was stored");

    let (status, record) =
        put(json!({"airflow_asset": ASSET, "partition_key": "{region}|{dt}", "events_url": "https://hooks.example/e"}))
            .await;
    assert_eq!(status, StatusCode::CREATED, "{record}");
    assert_eq!(
        (record["airflow_asset"].as_str(), record["partition_key"].as_str()),
        (Some(ASSET), Some("{region}|{dt}"))
    );
    assert_eq!(record["events_url"], "https://hooks.example/e");
    // A batch naming a partition without a key of the template is refused, naming it.
    let (status, err) = app.start("t", "d.policy", DT, &["dt=2026-08-24/region=cn", "dt=2026-08-24"]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"]["details"]["field"], "partitions[1]");
    app.publish("t", "d.policy", DT, "dt=2026-08-24/region=cn", 5).await;
    // A template naming a key the dataset's partitions lack is refused.
    let (status, err) = put(json!({"airflow_asset": ASSET, "partition_key": "{hour}"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"]["details"]["field"], "partition_key");
    // Without an asset the template is not used: no check against partitions.
    let (status, record) = put(json!({"partition_key": "{hour}"})).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert!(record["airflow_asset"].is_null());
}

per_backend! {
    a_published_partition_becomes_an_airflow_asset_event =>
        sqlite_a_published_partition_becomes_an_airflow_asset_event, postgres_a_published_partition_becomes_an_airflow_asset_event;
    a_restart_mid_delivery_does_not_duplicate_the_event =>
        sqlite_a_restart_mid_delivery_does_not_duplicate_the_event, postgres_a_restart_mid_delivery_does_not_duplicate_the_event;
    an_unknown_airflow_asset_is_an_alert => sqlite_an_unknown_airflow_asset_is_an_alert, postgres_an_unknown_airflow_asset_is_an_alert;
    an_asset_made_again_under_a_new_id_is_looked_up_again =>
        sqlite_an_asset_made_again_under_a_new_id_is_looked_up_again,
        postgres_an_asset_made_again_under_a_new_id_is_looked_up_again;
    asset_events_go_in_order_per_partition =>
        sqlite_asset_events_go_in_order_per_partition, postgres_asset_events_go_in_order_per_partition;
    every_change_is_a_cloud_event_once_in_order_per_partition =>
        sqlite_every_change_is_a_cloud_event_once_in_order_per_partition,
        postgres_every_change_is_a_cloud_event_once_in_order_per_partition;
    a_dataset_events_url_and_the_deliveries_listing =>
        sqlite_a_dataset_events_url_and_the_deliveries_listing, postgres_a_dataset_events_url_and_the_deliveries_listing;
    push_policy_fields_are_validated => sqlite_push_policy_fields_are_validated, postgres_push_policy_fields_are_validated;
}
