//! Telemetry: the Prometheus metrics of one running service, the log line of
//! each decision, and the request a piece of work is done for.
//!
//! The metrics live in a [`Metrics`] each [`crate::App`] owns, not in a
//! process-wide recorder: tests run many services in one process, and each
//! must count only its own requests. `/metrics` renders it in the Prometheus
//! text format (0.0.4).

pub mod context;
mod decision;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::RwLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub use decision::{Decided, FailedCheck, Outcome};

/// The `Content-Type` of what [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReadyOutcome {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateTier {
    state: &'static str,
    tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckTier {
    check: &'static str,
    tier: &'static str,
}

/// What the service went to the database for: `read` (a connection taken
/// from the pool) or `write` (a write transaction).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DbKind {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolState {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutboxTarget {
    target: &'static str,
}

fn latency_histogram() -> Histogram {
    // 1 ms … about 16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The counters of one route: found once, then only atomics per request.
struct RouteCounters {
    duration: Histogram,
    statuses: RwLock<Vec<(u16, Counter)>>,
}

/// What the database gauges read at a scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreGauges {
    /// Partitions past their data date's deadline and not ready.
    pub partitions_late: i64,
    /// Outbox deliveries neither delivered nor given up, of every target.
    pub outbox_pending: i64,
    /// The same by target (`webhook`, `airflow`, `events`), each target
    /// named (0 when none waits).
    pub outbox_pending_by_target: Vec<(&'static str, i64)>,
    /// Age of the oldest outbox delivery waiting; 0 when none waits.
    pub oldest_pending_seconds: f64,
    pub pool_idle: i64,
    pub pool_in_use: i64,
}

/// The metrics of one service instance.
pub struct Metrics {
    registry: Registry,
    http_requests: Family<RouteStatus, Counter>,
    http_duration: Family<Route, Histogram, fn() -> Histogram>,
    routes: RwLock<HashMap<String, std::sync::Arc<RouteCounters>>>,
    ready_answers: Family<ReadyOutcome, Counter>,
    /// `outcome` → its counter: `/ready` finds its counter without allocating.
    outcomes: RwLock<Vec<(String, Counter)>>,
    longpoll_waiters: Gauge,
    batches: Family<StateTier, Counter>,
    check_failures: Family<CheckTier, Counter>,
    commit_duration: Histogram,
    partitions_late: Gauge,
    outbox_pending: Gauge,
    outbox_pending_by_target: Family<OutboxTarget, Gauge>,
    outbox_oldest: Gauge<f64, AtomicU64>,
    cache_hits: Counter,
    cache_misses: Counter,
    pool: Family<PoolState, Gauge>,
    db_operations: Family<DbKind, Counter>,
    /// `db_operations`' two series, found without a lookup per operation.
    db_reads: Counter,
    db_writes: Counter,
    db_write_retries: Counter,
    sqlite_group_writers: Histogram,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("batchgate");
        let m = Self {
            registry: Registry::default(),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(latency_histogram),
            routes: RwLock::default(),
            ready_answers: Family::default(),
            outcomes: RwLock::default(),
            longpoll_waiters: Gauge::default(),
            batches: Family::default(),
            check_failures: Family::default(),
            commit_duration: latency_histogram(),
            partitions_late: Gauge::default(),
            outbox_pending: Gauge::default(),
            outbox_pending_by_target: Family::default(),
            outbox_oldest: Gauge::default(),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            pool: Family::default(),
            db_operations: Family::default(),
            db_reads: Counter::default(),
            db_writes: Counter::default(),
            db_write_retries: Counter::default(),
            // 1, 2, 4 … 64: up to the lane's most writers per COMMIT.
            sqlite_group_writers: Histogram::new(exponential_buckets(1.0, 2.0, 7)),
        };
        // One statement each: the family's lock guard lives until the end of it.
        let db_reads = m.db_operations.get_or_create(&DbKind { kind: "read" }).clone();
        let db_writes = m.db_operations.get_or_create(&DbKind { kind: "write" }).clone();
        let m = Self { db_reads, db_writes, ..m };
        // Counters are registered without `_total`: the encoder adds it.
        r.register("http_requests", "HTTP requests by route template and status", m.http_requests.clone());
        r.register("http_request_duration_seconds", "HTTP request duration by route template", m.http_duration.clone());
        r.register("ready_answers", "/ready answers: ready, or the not-ready reason", m.ready_answers.clone());
        r.register("longpoll_waiters", "/ready long-polls waiting now", m.longpoll_waiters.clone());
        r.register("batches", "Batches decided, by state and dataset tier", m.batches.clone());
        r.register("check_failures", "Failed commit checks, by check and dataset tier", m.check_failures.clone());
        r.register("commit_duration_seconds", "Time to decide a commit", m.commit_duration.clone());
        r.register("partitions_late", "Partitions past their deadline and not ready", m.partitions_late.clone());
        // Named when only alert webhooks were pushed; counts every target.
        r.register(
            "webhook_outbox_pending",
            "Outbox deliveries (alert webhooks, Airflow asset events, CloudEvents) not yet delivered or given up",
            m.outbox_pending.clone(),
        );
        r.register(
            "outbox_pending",
            "Outbox deliveries not yet delivered or given up, by target (webhook, airflow, events)",
            m.outbox_pending_by_target.clone(),
        );
        r.register(
            "webhook_oldest_pending_seconds",
            "Age of the oldest outbox delivery not yet delivered or given up, any target (0: none)",
            m.outbox_oldest.clone(),
        );
        r.register("ready_cache_hits", "Readiness lookups answered from the cache", m.cache_hits.clone());
        r.register("ready_cache_misses", "Readiness lookups that read the database", m.cache_misses.clone());
        r.register("db_pool_connections", "Database pool connections by state", m.pool.clone());
        r.register(
            "db_operations",
            "Times this instance went to the database: kind=read (a pooled connection) or kind=write (a write transaction)",
            m.db_operations.clone(),
        );
        r.register(
            "db_write_retries",
            "Writes run again because the database broke a deadlock or a serialization conflict",
            m.db_write_retries.clone(),
        );
        r.register(
            "sqlite_group_commit_writers",
            "SQLite: writes one COMMIT made durable together (group commit; one fsync each COMMIT)",
            m.sqlite_group_writers.clone(),
        );
        Self { registry: r, ..m }
    }

    /// The registry in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// Counts one HTTP request. `route` is the matched route template, so
    /// the label set stays bounded.
    pub fn http_request(&self, route: &str, status: u16, seconds: f64) {
        let counters = self.route(route);
        counters.duration.observe(seconds);
        if let Some((_, c)) = counters.statuses.read().expect("metrics lock").iter().find(|(s, _)| *s == status) {
            c.inc();
            return;
        }
        let c = self.http_requests.get_or_create(&RouteStatus { route: route.to_owned(), status }).clone();
        c.inc();
        let mut statuses = counters.statuses.write().expect("metrics lock");
        if !statuses.iter().any(|(s, _)| *s == status) {
            statuses.push((status, c));
        }
    }

    fn route(&self, route: &str) -> std::sync::Arc<RouteCounters> {
        if let Some(c) = self.routes.read().expect("metrics lock").get(route) {
            return c.clone();
        }
        let mut routes = self.routes.write().expect("metrics lock");
        routes
            .entry(route.to_owned())
            .or_insert_with(|| {
                let duration = self.http_duration.get_or_create(&Route { route: route.to_owned() }).clone();
                std::sync::Arc::new(RouteCounters { duration, statuses: RwLock::default() })
            })
            .clone()
    }

    /// Counts a `/ready` answer: `ready`, or the not-ready reason.
    pub fn ready_answer(&self, outcome: &str) {
        if let Some((_, c)) = self.outcomes.read().expect("metrics lock").iter().find(|(o, _)| o == outcome) {
            c.inc();
            return;
        }
        let c = self.ready_answers.get_or_create(&ReadyOutcome { outcome: outcome.to_owned() }).clone();
        c.inc();
        let mut all = self.outcomes.write().expect("metrics lock");
        if !all.iter().any(|(o, _)| o == outcome) {
            all.push((outcome.to_owned(), c));
        }
    }

    /// Counts a pooled connection taken for reads.
    pub fn db_read(&self) {
        self.db_reads.inc();
    }

    /// Counts a write transaction begun.
    pub fn db_write(&self) {
        self.db_writes.inc();
    }

    /// Tests: the value of the unlabelled sample `name` as `/metrics` shows it.
    #[cfg(test)]
    pub(crate) fn sample(&self, name: &str) -> Option<String> {
        self.render().lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_owned))
    }

    /// Records how many writes a SQLite group `COMMIT` made durable.
    pub fn sqlite_group_committed(&self, writers: usize) {
        self.sqlite_group_writers.observe(writers as f64);
    }

    /// Counts a write run again after a deadlock or serialization failure.
    pub fn db_write_retried(&self) {
        self.db_write_retries.inc();
    }

    pub fn cache_hit(&self) {
        self.cache_hits.inc();
    }

    pub fn cache_miss(&self) {
        self.cache_misses.inc();
    }

    /// Counts a long-poll waiter until the guard drops.
    pub fn long_poll(&self) -> Waiting<'_> {
        self.longpoll_waiters.inc();
        Waiting(&self.longpoll_waiters)
    }

    pub fn commit_took(&self, seconds: f64) {
        self.commit_duration.observe(seconds);
    }

    /// Counts a decided batch and logs it: one place for both, so the log
    /// and the counters cannot disagree.
    pub fn decided(&self, d: &Decided) {
        let tier = d.tier.as_str();
        self.batches.get_or_create(&StateTier { state: d.outcome.state(), tier }).inc();
        // A check that failed on two partitions is one failure of the batch.
        let checks: std::collections::BTreeSet<&'static str> =
            d.failed_checks.iter().map(|c| c.check.as_str()).collect();
        for check in checks {
            self.check_failures.get_or_create(&CheckTier { check, tier }).inc();
        }
        d.log();
    }

    /// Sets the gauges read from the database.
    pub fn set_store_gauges(&self, g: &StoreGauges) {
        self.partitions_late.set(g.partitions_late);
        self.outbox_pending.set(g.outbox_pending);
        for (target, pending) in &g.outbox_pending_by_target {
            self.outbox_pending_by_target.get_or_create(&OutboxTarget { target }).set(*pending);
        }
        self.outbox_oldest.set(g.oldest_pending_seconds);
        self.pool.get_or_create(&PoolState { state: "idle" }).set(g.pool_idle);
        self.pool.get_or_create(&PoolState { state: "in_use" }).set(g.pool_in_use);
    }
}

/// A long-poll in progress; dropping it (answer, timeout or a client that
/// went away) takes it off the gauge.
pub struct Waiting<'a>(&'a Gauge);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_carry_the_names_and_labels_of_the_contract() {
        let m = Metrics::new();
        m.http_request("/v1/batches/{batch_id}/commit", 422, 0.01);
        m.http_request("/v1/batches/{batch_id}/commit", 422, 0.02);
        m.ready_answer("running");
        m.ready_answer("running");
        m.ready_answer("ready");
        let text = m.render();
        assert!(
            text.contains("batchgate_http_requests_total{route=\"/v1/batches/{batch_id}/commit\",status=\"422\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("batchgate_http_request_duration_seconds_count{route=\"/v1/batches/{batch_id}/commit\"} 2\n")
        );
        assert!(text.contains("batchgate_ready_answers_total{outcome=\"running\"} 2\n"), "{text}");
        assert!(text.contains("batchgate_ready_answers_total{outcome=\"ready\"} 1\n"), "{text}");
        assert!(text.contains("# TYPE batchgate_longpoll_waiters gauge\n"), "{text}");
    }

    #[test]
    fn a_long_poll_leaves_the_gauge_when_it_ends() {
        let m = Metrics::new();
        let first = m.long_poll();
        let second = m.long_poll();
        assert!(m.render().contains("batchgate_longpoll_waiters 2\n"));
        drop(first);
        drop(second);
        assert!(m.render().contains("batchgate_longpoll_waiters 0\n"));
    }

    #[test]
    fn two_instances_count_apart() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.cache_hit();
        assert!(a.render().contains("batchgate_ready_cache_hits_total 1\n"));
        assert!(b.render().contains("batchgate_ready_cache_hits_total 0\n"));
    }
}
