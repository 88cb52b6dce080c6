//! The background scans: expire leases, raise missed deadlines, deliver
//! webhooks. Every replica runs them; the store makes each transition happen
//! once, and the outbox claim makes each delivery attempt happen once.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::store::{OutboxItem, Store};

/// Longest wait between two delivery attempts of one webhook.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Deliveries taken per scan.
const BATCH: i64 = 50;

pub struct Scanner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    http: reqwest::Client,
    backoff: Duration,
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanReport {
    pub abandoned: Vec<String>,
    pub deadlines_missed: usize,
    pub delivered: usize,
    pub failed_deliveries: usize,
}

/// The wait before attempt `attempt + 1`, after `attempt` failures:
/// `base`, `2·base`, `4·base`, … capped at five minutes.
pub fn backoff(base: Duration, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1));
    base.checked_mul(factor).unwrap_or(MAX_BACKOFF).min(MAX_BACKOFF)
}

impl Scanner {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, backoff: Duration) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("an HTTP client without TLS builds");
        Self { store, clock, http, backoff }
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
                    if self.deliver(&item).await {
                        report.delivered += 1;
                    } else {
                        report.failed_deliveries += 1;
                    }
                }
            }
            Err(e) => tracing::error!(error = ?e, "webhook outbox scan failed"),
        }
        report
    }

    /// Runs a pass every `every` until the task is dropped.
    pub fn spawn(self: Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let r = self.run_once().await;
                if !r.abandoned.is_empty() || r.deadlines_missed > 0 || r.delivered > 0 || r.failed_deliveries > 0 {
                    tracing::info!(abandoned = ?r.abandoned, deadlines_missed = r.deadlines_missed, delivered = r.delivered,
                        failed = r.failed_deliveries, "scan");
                }
            }
        })
    }

    /// POSTs one alert; true when the receiver took it (2xx).
    async fn deliver(&self, item: &OutboxItem) -> bool {
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
                return true;
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
        false
    }
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
