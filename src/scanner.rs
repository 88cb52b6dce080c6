//! The background scans: expire leases, raise missed deadlines, deliver
//! webhooks, prune history older than `--retain`. Every replica runs them;
//! the store makes each transition happen once, and the outbox claim makes
//! each delivery attempt happen once.
//!
//! Webhooks are sent only to allowed hosts ([`AllowList`], asked again before
//! each delivery, so a URL stored before the list changed is not sent), over
//! http or https (rustls: the system's roots plus `--webhook-ca-file`), and
//! redirects are not followed: a receiver cannot send the service elsewhere.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};

use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::outbound::AllowList;
use crate::store::{OutboxItem, Store};

/// Longest wait between two delivery attempts of one webhook.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Deliveries taken per scan.
const BATCH: i64 = 50;

/// Least time between two pruning passes (by the service's clock).
const PRUNE_EVERY: chrono::Duration = chrono::Duration::hours(1);

pub struct Scanner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    http: reqwest::Client,
    backoff: Duration,
    allow: Arc<AllowList>,
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

/// The wait before attempt `attempt + 1`, after `attempt` failures:
/// `base`, `2·base`, `4·base`, … capped at five minutes.
pub fn backoff(base: Duration, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1));
    base.checked_mul(factor).unwrap_or(MAX_BACKOFF).min(MAX_BACKOFF)
}

impl Scanner {
    /// The scanner for `settings`: fails on a bad `--webhook-allow` entry or
    /// an unreadable `--webhook-ca-file`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        allow: Arc<AllowList>,
        settings: &Settings,
    ) -> anyhow::Result<Self> {
        let mut http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .use_rustls_tls();
        if let Some(path) = &settings.webhook_ca_file {
            let pem =
                std::fs::read(path).with_context(|| format!("cannot read --webhook-ca-file {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--webhook-ca-file {}: not PEM certificates", path.display()))?;
            anyhow::ensure!(!certs.is_empty(), "--webhook-ca-file {}: no certificate in it", path.display());
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http.build().context("cannot build the webhook HTTP client")?;
        let retain = match settings.retain {
            Some(d) => Some(chrono::Duration::from_std(d).context("--retain is too long")?),
            None => None,
        };
        Ok(Self { store, clock, http, backoff: settings.webhook_backoff, allow, retain, last_prune: Mutex::new(None) })
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
        match self.store.claim_webhooks(BATCH).await {
            Ok(items) => {
                for item in items {
                    match self.deliver(&item).await {
                        Delivery::Sent => report.delivered += 1,
                        Delivery::Failed => report.failed_deliveries += 1,
                        Delivery::Refused => report.refused_deliveries += 1,
                    }
                }
            }
            Err(e) => tracing::error!(error = ?e, "webhook outbox scan failed"),
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

    /// POSTs one alert, if its host is still allowed.
    async fn deliver(&self, item: &OutboxItem) -> Delivery {
        if let Err(refusal) = self.allow.check(&item.url) {
            let reason = format!("not sent: {refusal}");
            tracing::warn!(id = item.id, url = %item.url, %reason, "webhook delivery given up");
            if let Err(e) = self.store.webhook_given_up(item.id, &reason).await {
                tracing::error!(error = ?e, id = item.id, "could not record the refused delivery");
            }
            return Delivery::Refused;
        }
        let sent = self
            .http
            .post(&item.url)
            .header("Idempotency-Key", &item.idempotency_key)
            .json(&item.payload.0)
            .send()
            .await;
        let error = match sent {
            Ok(resp) if resp.status().is_success() => {
                if let Err(e) = self.store.webhook_delivered(item.id).await {
                    tracing::error!(error = ?e, id = item.id, "delivered, but could not record it: it will be sent again");
                }
                return Delivery::Sent;
            }
            Ok(resp) => format!("receiver answered {}", resp.status()),
            Err(e) => format!("cannot reach receiver: {e}"),
        };
        let failures = u32::try_from(item.attempts + 1).unwrap_or(u32::MAX);
        let wait = backoff(self.backoff, failures);
        let retry_at = self.clock.now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(300));
        tracing::warn!(id = item.id, url = %item.url, attempt = failures, %error, retry_in = ?wait, "webhook delivery failed");
        if let Err(e) = self.store.webhook_failed(item.id, &error, retry_at).await {
            tracing::error!(error = ?e, id = item.id, "could not record the failed delivery");
        }
        Delivery::Failed
    }
}

/// What became of one delivery attempt.
enum Delivery {
    /// The receiver answered 2xx.
    Sent,
    /// To be tried again later.
    Failed,
    /// Its host is not allowed: given up for good.
    Refused,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps_at_five_minutes() {
        let s = Duration::from_secs(1);
        assert_eq!(backoff(s, 1), Duration::from_secs(1));
        assert_eq!(backoff(s, 2), Duration::from_secs(2));
        assert_eq!(backoff(s, 4), Duration::from_secs(8));
        assert_eq!(backoff(s, 9), Duration::from_secs(256));
        assert_eq!(backoff(s, 10), MAX_BACKOFF);
        assert_eq!(backoff(s, 60), MAX_BACKOFF);
    }
}
