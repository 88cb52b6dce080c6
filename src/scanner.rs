//! The background scans: expire leases, raise missed deadlines, send what
//! the outbox holds (webhooks, Airflow asset events, CloudEvents: see
//! [`crate::outbox`]), prune history older than `--retain`. Every replica
//! runs them; the store makes each transition happen once, and the outbox
//! claim makes each delivery attempt happen once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};

use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::outbound::AllowList;
use crate::outbox::{Delivery, Sender};
use crate::store::SqlStore;

pub use crate::outbox::{backoff, MAX_BACKOFF};

/// Deliveries taken per scan.
const BATCH: i64 = 50;

/// Least time between two pruning passes (by the service's clock).
const PRUNE_EVERY: chrono::Duration = chrono::Duration::hours(1);

pub struct Scanner {
    store: Arc<SqlStore>,
    clock: Arc<dyn Clock>,
    sender: Sender,
    retain: Option<chrono::Duration>,
    last_prune: Mutex<Option<DateTime<Utc>>>,
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanReport {
    pub abandoned: Vec<String>,
    pub deadlines_missed: usize,
    pub delivered: usize,
    pub failed_deliveries: usize,
    /// Deliveries given up because their host is not allowed (any more).
    pub refused_deliveries: usize,
    /// Rows pruned (history older than `--retain`).
    pub pruned: u64,
}

impl Scanner {
    /// The scanner for `settings`: fails on a bad `--webhook-allow` entry or
    /// an unreadable `--webhook-ca-file`.
    pub fn new(
        store: Arc<SqlStore>,
        clock: Arc<dyn Clock>,
        allow: Arc<AllowList>,
        settings: &Settings,
    ) -> anyhow::Result<Self> {
        let sender = Sender::new(store.clone(), clock.clone(), allow, settings)?;
        let retain = match settings.retain {
            Some(d) => Some(chrono::Duration::from_std(d).context("--retain is too long")?),
            None => None,
        };
        Ok(Self { store, clock, sender, retain, last_prune: Mutex::new(None) })
    }

    /// One pass of every scan. A failing scan is logged and the others still run.
    pub async fn run_once(&self) -> ScanReport {
        let mut report = ScanReport::default();
        match self.store.expire_leases().await {
            Ok(ids) => report.abandoned = ids,
            Err(e) => tracing::error!(error = ?e, "lease scan failed"),
        }
        match self.store.check_deadlines().await {
            Ok(n) => report.deadlines_missed = n,
            Err(e) => tracing::error!(error = ?e, "deadline scan failed"),
        }
        match self.store.claim_deliveries(BATCH).await {
            Ok(items) => {
                // A delivery that failed holds back the later ones of its
                // partition and receiver: they go back unsent, in order.
                let mut held = Vec::new();
                for item in &items {
                    let key = item.order_key();
                    if key.is_some() && held.contains(&key) {
                        if let Err(e) = self.store.release_delivery(item.id).await {
                            tracing::error!(error = ?e, id = item.id, "could not hand a delivery back");
                        }
                        continue;
                    }
                    match self.sender.deliver(item).await {
                        Delivery::Sent => report.delivered += 1,
                        Delivery::Failed => {
                            report.failed_deliveries += 1;
                            held.push(key);
                        }
                        Delivery::Refused => report.refused_deliveries += 1,
                    }
                }
            }
            Err(e) => tracing::error!(error = ?e, "outbox scan failed"),
        }
        report.pruned = self.prune().await;
        report
    }

    /// Prunes history older than `--retain`, at most once per [`PRUNE_EVERY`].
    async fn prune(&self) -> u64 {
        let Some(retain) = self.retain else { return 0 };
        let now = self.clock.now();
        {
            let mut last = self.last_prune.lock().expect("the prune clock is never poisoned");
            if last.is_some_and(|at| now - at < PRUNE_EVERY) {
                return 0;
            }
            *last = Some(now);
        }
        // A retention longer than the calendar reaches back: nothing is that old.
        let Some(cutoff) = now.checked_sub_signed(retain) else { return 0 };
        match self.store.prune(cutoff).await {
            Ok(p) => {
                if p.total() > 0 {
                    tracing::info!(
                        changes = p.changes,
                        alerts = p.alerts,
                        webhooks = p.webhooks,
                        openlineage_events = p.openlineage_events,
                        "pruned history older than --retain"
                    );
                }
                p.total()
            }
            Err(e) => {
                tracing::error!(error = ?e, "pruning failed");
                0
            }
        }
    }

    /// Runs a pass every `every` until the task is dropped.
    pub fn spawn(self: Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let r = self.run_once().await;
                if !r.abandoned.is_empty()
                    || r.deadlines_missed > 0
                    || r.delivered > 0
                    || r.failed_deliveries > 0
                    || r.refused_deliveries > 0
                {
                    tracing::info!(abandoned = ?r.abandoned, deadlines_missed = r.deadlines_missed, delivered = r.delivered,
                        failed = r.failed_deliveries, refused = r.refused_deliveries, "scan");
                }
            }
        })
    }
}
