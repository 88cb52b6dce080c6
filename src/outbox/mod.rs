//! Sending what the outbox holds (`crate::store` writes it, in the
//! transaction of the decision it reports): alert webhooks, Airflow asset
//! events ([`airflow`]) and CloudEvents. The scanner claims due deliveries
//! and hands each to [`Sender::deliver`].
//!
//! Every delivery is sent only to an allowed host ([`AllowList`], asked
//! again before each attempt, so a URL stored before the list changed is not
//! used), over http or https (rustls: the system's roots plus
//! `--webhook-ca-file`), and redirects are not followed: a receiver cannot
//! send the service elsewhere.

pub mod airflow;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::alerts::AlertKind;
use crate::domain::outbound::AllowList;
use crate::domain::push::{PendingAssetEvent, Target};
use crate::store::{OutboxItem, SqlStore};

/// Longest wait between two delivery attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The wait before attempt `attempt + 1`, after `attempt` failures:
/// `base`, `2·base`, `4·base`, … capped at five minutes.
pub fn backoff(base: Duration, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1));
    base.checked_mul(factor).unwrap_or(MAX_BACKOFF).min(MAX_BACKOFF)
}

/// What became of one delivery attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The receiver has it.
    Sent,
    /// To be tried again later.
    Failed,
    /// Its host is not allowed: given up for good.
    Refused,
}

/// Sends deliveries and records what became of them.
pub struct Sender {
    store: Arc<SqlStore>,
    clock: Arc<dyn Clock>,
    http: reqwest::Client,
    backoff: Duration,
    allow: Arc<AllowList>,
    airflow: airflow::Airflow,
}

impl Sender {
    /// The sender for `settings`: fails on an unreadable `--webhook-ca-file`.
    pub fn new(
        store: Arc<SqlStore>,
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
        let http = http.build().context("cannot build the outbound HTTP client")?;
        let airflow = airflow::Airflow::new(http.clone(), clock.clone(), settings.airflow_auth.clone());
        Ok(Self { store, clock, http, backoff: settings.webhook_backoff, allow, airflow })
    }

    /// Makes one attempt at a claimed delivery, if its host is still allowed,
    /// and records the outcome.
    pub async fn deliver(&self, item: &OutboxItem) -> Delivery {
        if let Err(refusal) = self.allow.check(&item.url) {
            let reason = format!("not sent: {refusal}");
            tracing::warn!(id = item.id, target = %item.target, url = %item.url, %reason, "delivery given up");
            if let Err(e) = self.store.delivery_given_up(item.id, &reason).await {
                tracing::error!(error = ?e, id = item.id, "could not record the refused delivery");
            }
            return Delivery::Refused;
        }
        let outcome = match item.target {
            Target::Webhook => self.post(item, "application/json").await,
            Target::Events => self.post(item, "application/cloudevents+json").await,
            Target::Airflow => self.asset_event(item).await,
        };
        match outcome {
            Ok(()) => {
                if let Err(e) = self.store.delivery_sent(item.id).await {
                    tracing::error!(error = ?e, id = item.id, "delivered, but could not record it: it will be sent again");
                }
                Delivery::Sent
            }
            Err(error) => {
                let failures = u32::try_from(item.attempts + 1).unwrap_or(u32::MAX);
                let wait = backoff(self.backoff, failures);
                let retry_at =
                    self.clock.now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(300));
                tracing::warn!(id = item.id, target = %item.target, url = %item.url, attempt = failures, %error,
                    retry_in = ?wait, "delivery failed");
                if let Err(e) = self.store.delivery_failed(item.id, &error, retry_at).await {
                    tracing::error!(error = ?e, id = item.id, "could not record the failed delivery");
                }
                Delivery::Failed
            }
        }
    }

    /// POSTs the payload as it is (an alert, or a CloudEvent in structured mode).
    async fn post(&self, item: &OutboxItem, content_type: &str) -> Result<(), String> {
        let body = serde_json::to_vec(&item.payload.0).map_err(|e| format!("cannot encode the payload: {e}"))?;
        let sent = self
            .http
            .post(&item.url)
            .header("Idempotency-Key", &item.idempotency_key)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(format!("receiver answered {}", resp.status())),
            Err(e) => Err(format!("cannot reach receiver: {e}")),
        }
    }

    /// Sends an asset event to Airflow, unless an earlier attempt whose
    /// outcome is unknown already did. An asset Airflow does not know raises
    /// an alert (once) and is tried again later: the DAG naming it may not be
    /// parsed yet. The event of a retried row that goes through resolves
    /// that alert: Airflow knows the asset now.
    async fn asset_event(&self, item: &OutboxItem) -> Result<(), String> {
        let event: PendingAssetEvent = serde_json::from_value(item.payload.0.clone())
            .map_err(|e| format!("outbox row {} is not an asset event: {e}", item.id))?;
        let dataset = item.dataset.as_deref().unwrap_or_default();
        let key = format!("airflow_asset_unknown:{dataset}:{}", event.asset);
        match self.airflow.send(&item.url, &event, item.attempted_before()).await {
            Ok(()) => {
                // Only a row tried before can have met the unknown asset.
                if item.attempted_before() {
                    if let Err(e) = self.store.resolve_push_alert(&key).await {
                        tracing::error!(error = ?e, id = item.id, "could not resolve the unknown-asset alert");
                    }
                }
                Ok(())
            }
            Err(airflow::Failure::UnknownAsset) => {
                let message = format!(
                    "Airflow at {} has no asset {:?} (the airflow_asset of {dataset}): asset events of {dataset} wait \
                     until a DAG names it",
                    item.url, event.asset
                );
                if let Err(e) = self
                    .store
                    .raise_push_alert(
                        AlertKind::AirflowAssetUnknown,
                        dataset,
                        item.partition_spec.as_deref(),
                        &key,
                        &message,
                    )
                    .await
                {
                    tracing::error!(error = ?e, id = item.id, "could not raise the unknown-asset alert");
                }
                Err(message)
            }
            Err(airflow::Failure::Other(why)) => Err(why),
        }
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
