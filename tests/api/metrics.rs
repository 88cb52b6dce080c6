//! `/metrics`: the Prometheus text is parsed (not grepped) before and after
//! a publish, a rejection, a failure, an abandonment and a long-poll, and
//! the counters and gauges must have moved by exactly what happened.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{clean, Receiver, TestApp};
use crate::on_both_backends;

on_both_backends!(
    publishing_rejecting_and_long_polling_move_the_counters,
    failures_and_abandonments_are_counted_by_state_and_tier,
    the_database_gauges_show_late_partitions_and_pending_webhooks,
    a_cached_ready_answer_is_the_full_answer_counted_with_a_request_id,
    a_commit_of_a_batch_started_here_reads_the_database_once,
);

const DT: &str = "2026-08-24";
const PART: &str = "dt=2026-08-24";

/// One sample: its labels and value.
type Sample = (BTreeMap<String, String>, f64);

/// A parsed scrape: the samples by metric name, and the `# TYPE` of each family.
#[derive(Debug, Default)]
pub(crate) struct Scrape {
    samples: BTreeMap<String, Vec<Sample>>,
    types: BTreeMap<String, String>,
}

impl Scrape {
    /// Parses the Prometheus text format (0.0.4): `# TYPE` lines, and
    /// `name{label="value",…} value` samples with escaped label values.
    fn parse(text: &str) -> Self {
        let mut out = Scrape::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
                out.types.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("no value in {line:?}"));
            let name = &line[..name_end];
            let mut labels = BTreeMap::new();
            let mut rest = &line[name_end..];
            if let Some(inner) = rest.strip_prefix('{') {
                let mut chars = inner.char_indices();
                let mut key = String::new();
                loop {
                    let (i, c) = chars.next().unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
                    match c {
                        '}' => {
                            rest = &inner[i + 1..];
                            break;
                        }
                        ',' => {}
                        '=' => {
                            assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "label value is quoted in {line:?}");
                            let mut value = String::new();
                            loop {
                                match chars.next().unwrap_or_else(|| panic!("unclosed value in {line:?}")).1 {
                                    '"' => break,
                                    '\\' => match chars.next().expect("escape").1 {
                                        'n' => value.push('\n'),
                                        other => value.push(other),
                                    },
                                    c => value.push(c),
                                }
                            }
                            labels.insert(std::mem::take(&mut key), value);
                        }
                        c => key.push(c),
                    }
                }
            }
            let value = rest.split_whitespace().next().unwrap_or_else(|| panic!("no value in {line:?}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value {v:?} in {line:?}")),
            };
            out.samples.entry(name.to_owned()).or_default().push((labels, value));
        }
        out
    }

    /// The value of the sample whose labels include `want`; 0 when absent
    /// (a labelled counter appears only once it counted something).
    pub(crate) fn value(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        let matching: Vec<f64> = self
            .samples
            .get(name)
            .into_iter()
            .flatten()
            .filter(|(labels, _)| want.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, v)| *v)
            .collect();
        assert!(matching.len() <= 1, "{name} {want:?} matches several samples: {matching:?}");
        matching.first().copied().unwrap_or(0.0)
    }

    /// The values a label takes across a metric's samples.
    pub(crate) fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        self.samples.get(name).into_iter().flatten().filter_map(|(l, _)| l.get(label).cloned()).collect()
    }
}

pub(crate) async fn scrape(app: &TestApp) -> Scrape {
    let resp = app.client.get(format!("{}/metrics", app.base)).send().await.expect("scrape");
    assert_eq!(resp.status(), StatusCode::OK);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    Scrape::parse(&resp.text().await.expect("body"))
}

fn rejected_evidence() -> serde_json::Value {
    json!({"marker": "m", "partitions": [{"partition": PART, "rows_written": 100, "row_count": 90}]})
}

async fn publishing_rejecting_and_long_polling_move_the_counters(app: TestApp) {
    let before = scrape(&app).await;
    let commit = "/v1/batches/{batch_id}/commit";

    // A publish.
    app.put_dataset("d.core", &json!({"tier": "core"})).await;
    app.publish("t", "d.core", DT, PART, 100).await;
    // A rejection.
    let rejected = app.start_ok("t", "d.rej", DT, &[PART]).await;
    let (status, _) = app.commit(&rejected, &rejected_evidence()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // Plain readiness answers: ready (twice: the second from the cache) and rejected.
    assert_eq!(app.ready("d.core", &[PART]).await.0, StatusCode::OK);
    assert_eq!(app.ready("d.core", &[PART]).await.0, StatusCode::OK);
    assert_eq!(app.ready("d.rej", &[PART]).await.0, StatusCode::NOT_FOUND);

    // A long-poll: counted as a waiter while it waits, answered by the publish.
    let waited = app.start_ok("t", "d.wait", DT, &[PART]).await;
    let url = format!("{}/ready?dataset=d.wait&partition=dt%3D2026-08-24&wait=30", app.base);
    let client = app.client.clone();
    let poll = tokio::spawn(async move { client.get(url).send().await.unwrap().status() });
    let mut during = scrape(&app).await;
    for _ in 0..100 {
        if during.value("batchgate_longpoll_waiters", &[]) >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        during = scrape(&app).await;
    }
    assert_eq!(during.value("batchgate_longpoll_waiters", &[]), 1.0, "one long-poll is waiting");
    let (status, _) = app.commit(&waited, &clean(PART, 10)).await;
    assert_eq!(status, StatusCode::OK);
    let answered = tokio::time::timeout(Duration::from_secs(10), poll).await.expect("the long-poll answered");
    assert_eq!(answered.unwrap(), StatusCode::OK);

    let after = scrape(&app).await;
    let moved = |name: &str, labels: &[(&str, &str)]| after.value(name, labels) - before.value(name, labels);

    assert_eq!(after.value("batchgate_longpoll_waiters", &[]), 0.0, "the answered long-poll left the gauge");
    assert_eq!(moved("batchgate_batches_total", &[("state", "published"), ("tier", "core")]), 1.0);
    assert_eq!(moved("batchgate_batches_total", &[("state", "published"), ("tier", "standard")]), 1.0);
    assert_eq!(moved("batchgate_batches_total", &[("state", "rejected"), ("tier", "standard")]), 1.0);
    assert_eq!(moved("batchgate_check_failures_total", &[("check", "rows_match_written"), ("tier", "standard")]), 1.0);
    assert_eq!(moved("batchgate_commit_duration_seconds_count", &[]), 3.0, "three commits decided");
    assert!(after.value("batchgate_commit_duration_seconds_sum", &[]) > 0.0);

    assert_eq!(moved("batchgate_http_requests_total", &[("route", commit), ("status", "200")]), 2.0);
    assert_eq!(moved("batchgate_http_requests_total", &[("route", commit), ("status", "422")]), 1.0);
    assert_eq!(moved("batchgate_http_request_duration_seconds_count", &[("route", commit)]), 3.0);
    assert_eq!(moved("batchgate_http_requests_total", &[("route", "/ready"), ("status", "200")]), 3.0);
    assert_eq!(moved("batchgate_http_requests_total", &[("route", "/ready"), ("status", "404")]), 1.0);
    let routes = after.label_values("batchgate_http_requests_total", "route");
    assert!(routes.iter().all(|r| !r.contains(DT)), "routes are templates, never raw paths: {routes:?}");

    assert_eq!(moved("batchgate_ready_answers_total", &[("outcome", "ready")]), 3.0, "two reads and the long-poll");
    assert_eq!(moved("batchgate_ready_answers_total", &[("outcome", "rejected")]), 1.0);
    let hits = moved("batchgate_ready_cache_hits_total", &[]);
    let misses = moved("batchgate_ready_cache_misses_total", &[]);
    assert!(hits >= 1.0, "the repeated read came from the cache ({hits} hits, {misses} misses)");
    assert!(misses >= 2.0, "first reads after a change go to the database ({misses} misses)");

    let pool = after.value("batchgate_db_pool_connections", &[("state", "idle")])
        + after.value("batchgate_db_pool_connections", &[("state", "in_use")]);
    assert!(pool >= 1.0, "the pool holds connections: {pool}");
    // Two starts, three commits, a dataset's policy and their audit rows were
    // written; the commits' answers and the uncached /ready were read.
    let writes = moved("batchgate_db_operations_total", &[("kind", "write")]);
    let reads = moved("batchgate_db_operations_total", &[("kind", "read")]);
    assert!(writes >= 6.0, "each start, commit and policy is a write transaction: {writes}");
    assert!(reads >= 3.0, "each commit's answer and each uncached /ready is a read: {reads}");
    assert_eq!(moved("batchgate_db_write_retries_total", &[]), 0.0, "no deadlock here");
    // SQLite's group commit: every write transaction above ended in a COMMIT
    // that carried it (alone or with others); PostgreSQL has no such group.
    let grouped = moved("batchgate_sqlite_group_commit_writers_sum", &[]);
    let commits = moved("batchgate_sqlite_group_commit_writers_count", &[]);
    if app.backend == crate::helpers::Backend::Sqlite {
        assert_eq!(grouped, writes, "each write was made durable by one group COMMIT");
        assert!(commits >= 1.0 && commits <= writes, "{commits} COMMITs for {writes} writes");
    } else {
        assert_eq!((grouped, commits), (0.0, 0.0));
    }

    for (family, kind) in [
        ("batchgate_http_requests_total", "counter"),
        ("batchgate_http_request_duration_seconds", "histogram"),
        ("batchgate_commit_duration_seconds", "histogram"),
        ("batchgate_longpoll_waiters", "gauge"),
        ("batchgate_partitions_late", "gauge"),
        ("batchgate_webhook_outbox_pending", "gauge"),
        ("batchgate_outbox_pending", "gauge"),
        ("batchgate_webhook_oldest_pending_seconds", "gauge"),
        ("batchgate_ready_cache_hits_total", "counter"),
        ("batchgate_ready_cache_misses_total", "counter"),
        ("batchgate_db_pool_connections", "gauge"),
        ("batchgate_db_operations_total", "counter"),
        ("batchgate_db_write_retries_total", "counter"),
        ("batchgate_sqlite_group_commit_writers", "histogram"),
        ("batchgate_batches_total", "counter"),
        ("batchgate_check_failures_total", "counter"),
        ("batchgate_ready_answers_total", "counter"),
    ] {
        assert_eq!(after.types.get(family).map(String::as_str), Some(kind), "# TYPE of {family}");
    }
}

/// A ready partition in the cache is answered ahead of the router's layers
/// (the sensors' hot path): the same bytes as the first, uncached answer,
/// a request id (the client's own when it sent one), and the same counters.
async fn a_cached_ready_answer_is_the_full_answer_counted_with_a_request_id(app: TestApp) {
    app.publish("t", "d.hot", DT, PART, 10).await;
    let url = format!("{}/ready?dataset=d.hot&partition=dt%3D2026-08-24", app.base);
    let get = |id: Option<&'static str>| {
        let req = app.client.get(&url);
        match id {
            Some(id) => req.header("x-request-id", id),
            None => req,
        }
        .send()
    };
    let first = get(None).await.expect("first /ready");
    let (status, headers) = (first.status(), first.headers().clone());
    let body = first.bytes().await.expect("body");
    assert_eq!(status, StatusCode::OK, "{body:?}");

    // On PostgreSQL a replica also hears its own publish, asynchronously,
    // and drops the entry then: one extra miss per change, which may land in
    // the measured window on a busy machine. That can happen once; a window
    // that met it is measured again.
    for attempt in 1..=3 {
        let warm = get(None).await.expect("warming /ready");
        assert_eq!(warm.bytes().await.expect("body"), body);
        let before = scrape(&app).await;
        let cached = get(None).await.expect("cached /ready");
        let cached_headers = cached.headers().clone();
        assert_eq!(cached.status(), StatusCode::OK);
        assert_eq!(cached.bytes().await.expect("body"), body, "the cached answer is the full path's bytes");
        assert_eq!(cached_headers["content-type"], headers["content-type"]);
        let (a, b) = (&headers["x-request-id"], &cached_headers["x-request-id"]);
        assert!(!b.is_empty() && a != b, "each answer has its own request id: {a:?} {b:?}");
        let traced = get(Some("sensor-trace-7")).await.expect("traced /ready");
        assert_eq!(traced.headers()["x-request-id"], "sensor-trace-7", "the client's request id comes back");
        assert_eq!(traced.bytes().await.expect("body"), body);

        let after = scrape(&app).await;
        let moved = |name: &str, labels: &[(&str, &str)]| after.value(name, labels) - before.value(name, labels);
        if moved("batchgate_ready_cache_misses_total", &[]) > 0.0 && attempt < 3 {
            continue;
        }
        assert_eq!(moved("batchgate_ready_cache_hits_total", &[]), 2.0, "both answered from the cache");
        assert_eq!(moved("batchgate_ready_cache_misses_total", &[]), 0.0);
        assert_eq!(moved("batchgate_ready_answers_total", &[("outcome", "ready")]), 2.0);
        assert_eq!(moved("batchgate_http_requests_total", &[("route", "/ready"), ("status", "200")]), 2.0);
        assert_eq!(moved("batchgate_http_request_duration_seconds_count", &[("route", "/ready")]), 2.0);
        break;
    }
}

/// A commit goes to the database for its transaction and for reading its
/// answer back, and for nothing else when this instance started the batch:
/// the batch's dataset, which the auth gate and (on PostgreSQL) the dataset
/// lock need, is remembered from the start (issue 14). Before, it was read
/// once on SQLite and twice on PostgreSQL, each a pooled connection.
async fn a_commit_of_a_batch_started_here_reads_the_database_once(app: TestApp) {
    const OPERATIONS: &str = "batchgate_db_operations_total";
    let reads = |s: &Scrape| s.value(OPERATIONS, &[("kind", "read")]);
    let writes = |s: &Scrape| s.value(OPERATIONS, &[("kind", "write")]);
    // The first commit an instance audits also stores the name of its
    // action in `audit_names` (a write of its own, once per name and
    // instance): one is made before the commit measured.
    let first = app.start_ok("t", "d.once", "2026-08-23", &["dt=2026-08-23"]).await;
    assert_eq!(app.commit(&first, &clean("dt=2026-08-23", 10)).await.0, StatusCode::OK);
    let id = app.start_ok("t", "d.once", DT, &[PART]).await;
    // A scrape reads the database gauges: what one costs is measured first.
    let (a, b) = (scrape(&app).await, scrape(&app).await);
    let per_scrape = reads(&b) - reads(&a);
    assert!(per_scrape >= 1.0, "a scrape reads the gauges, and is counted");
    assert_eq!(writes(&b), writes(&a), "nothing wrote between two scrapes");

    let (status, body) = app.commit(&id, &clean(PART, 10)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let c = scrape(&app).await;
    assert_eq!(reads(&c) - reads(&b) - per_scrape, 1.0, "the commit's reads: its answer read back, nothing else");
    assert_eq!(writes(&c) - writes(&b), 2.0, "the commit's writes: its transaction and its audit row");
}

async fn failures_and_abandonments_are_counted_by_state_and_tier(app: TestApp) {
    app.put_dataset("d.scratch", &json!({"tier": "scratch"})).await;
    let before = scrape(&app).await;

    let failed = app.start_ok("t", "d.scratch", DT, &[PART]).await;
    let (status, _) =
        app.post(&format!("/v1/batches/{failed}/fail"), &json!({"stage": "compute", "category": "resource"})).await;
    assert_eq!(status, StatusCode::OK);
    let body = json!({"task": "t2", "dataset": "d.lease", "dt": DT, "partitions": [PART], "lease_seconds": 60});
    assert_eq!(app.post("/v1/batches", &body).await.0, StatusCode::CREATED);
    app.clock.advance(chrono::Duration::seconds(120));
    assert_eq!(app.scan().await.abandoned.len(), 1);

    let after = scrape(&app).await;
    let moved = |name: &str, labels: &[(&str, &str)]| after.value(name, labels) - before.value(name, labels);
    assert_eq!(moved("batchgate_batches_total", &[("state", "failed"), ("tier", "scratch")]), 1.0);
    assert_eq!(moved("batchgate_batches_total", &[("state", "abandoned"), ("tier", "standard")]), 1.0);
    assert_eq!(moved("batchgate_batches_total", &[("state", "published"), ("tier", "scratch")]), 0.0);
    assert_eq!(moved("batchgate_commit_duration_seconds_count", &[]), 0.0, "no commit was decided");
}

async fn the_database_gauges_show_late_partitions_and_pending_webhooks(app: TestApp) {
    let receiver = Receiver::start(usize::MAX).await;
    // This scenario needs the service-wide webhook: an instance of its own.
    let app = TestApp::spawn_with_webhook(app.backend, &receiver.url).await.expect("the backend is up");
    let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&chrono::Utc);
    app.clock.set(at("2026-08-24T12:00:00Z"));
    // Its changes also go to the receiver as CloudEvents (which it refuses).
    let events = json!({"deadline": {"time": "06:00", "days_after_dt": 1}, "events_url": receiver.url});
    app.put_dataset("d.late", &events).await;
    let late = app.start_ok("t", "d.late", DT, &["dt=2026-08-24/r=a", "dt=2026-08-24/r=b"]).await;
    let first = scrape(&app).await;
    assert_eq!(first.value("batchgate_partitions_late", &[]), 0.0, "not yet due");
    assert_eq!(first.value("batchgate_webhook_outbox_pending", &[]), 0.0);
    assert_eq!(first.value("batchgate_webhook_oldest_pending_seconds", &[]), 0.0);

    // Past the deadline with both partitions running; a rejection raises an
    // alert whose webhook is not delivered yet.
    app.clock.set(at("2026-08-25T07:00:00Z"));
    let rejected = app.start_ok("t", "d.rej", DT, &[PART]).await;
    assert_eq!(app.commit(&rejected, &rejected_evidence()).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    app.clock.advance(chrono::Duration::seconds(90));
    let due = scrape(&app).await;
    assert_eq!(due.value("batchgate_partitions_late", &[]), 2.0, "two partitions past the deadline, not ready");
    assert_eq!(due.value("batchgate_webhook_outbox_pending", &[]), 1.0);
    assert_eq!(due.value("batchgate_webhook_oldest_pending_seconds", &[]), 90.0);

    // Published: no longer late.
    let parts = ["dt=2026-08-24/r=a", "dt=2026-08-24/r=b"];
    let ev = json!({"marker": "m", "partitions": parts.iter().map(|p| json!({"partition": p, "rows_written": 5, "row_count": 5})).collect::<Vec<_>>()});
    assert_eq!(app.commit(&late, &ev).await.0, StatusCode::OK);
    let fixed = scrape(&app).await;
    assert_eq!(fixed.value("batchgate_partitions_late", &[]), 0.0);

    // Each target's deliveries apart: the alert's webhook, and a CloudEvent
    // for each published partition; the unlabelled gauge counts them all.
    let pending = |target| fixed.value("batchgate_outbox_pending", &[("target", target)]);
    assert_eq!((pending("webhook"), pending("events"), pending("airflow")), (1.0, 2.0, 0.0));
    assert_eq!(fixed.value("batchgate_webhook_outbox_pending", &[]), 3.0);
    assert_eq!(due.value("batchgate_outbox_pending", &[("target", "events")]), 0.0, "nothing published before");
}

/// The shipped Grafana dashboard queries only metrics the service exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_uses_only_exported_metrics() {
    let app = TestApp::spawn(crate::helpers::Backend::Sqlite).await.expect("SQLite is always available");
    // A labelled family shows in a scrape once it counted something.
    app.publish("t", "d.ok", DT, PART, 10).await;
    let rejected = app.start_ok("t", "d.rej", DT, &[PART]).await;
    assert_eq!(app.commit(&rejected, &rejected_evidence()).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.ready("d.ok", &[PART]).await.0, StatusCode::OK);
    let scraped = scrape(&app).await;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docker/grafana/batchgate-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    assert!(exprs.len() >= 10, "the dashboard has its panels: {exprs:?}");
    let mut used = std::collections::BTreeSet::new();
    for expr in &exprs {
        for (i, _) in expr.match_indices("batchgate_") {
            let name: String = expr[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            used.insert(name);
        }
    }
    for name in &used {
        let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        assert!(
            scraped.types.contains_key(name.as_str()) || scraped.types.contains_key(family),
            "the dashboard queries {name}, which /metrics does not export"
        );
    }
    assert!(used.len() >= 12, "the dashboard covers the metrics: {used:?}");
}
