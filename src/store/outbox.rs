//! The outbox: every delivery that leaves the process (alert webhooks,
//! Airflow asset events, CloudEvents) is a row written in the transaction
//! that made the decision it reports, and sent by the scanner
//! (`crate::outbox`) at least once.
//!
//! Deliveries of one partition to one receiver are sent in the order they
//! were written: a row is taken only when every earlier undelivered row of
//! the same partition and receiver is due and free, and taken with it (see
//! [`CLAIMABLE_SQL`]). A change is queued at most once per receiver (unique
//! index `outbox_change`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::types::Json;

use super::alerts::{self, NewAlert};
use super::batches::load_policy;
use super::db::{args, Arg, Conn};
use super::events::ChangeDetail;
use super::staleness::Ripple;
use super::{Page, Position, SqlStore};
use crate::domain::alerts::{severity, Action, AlertKind};
use crate::domain::policy::DatasetPolicy;
use crate::domain::push::{feed_cursor, AssetEventExtra, CloudEvent, PendingAssetEvent, Target};
use crate::error::Result;

/// How long a replica holds a claimed delivery before another may take it
/// over (it died mid-delivery).
const CLAIM_SECONDS: i64 = 60;

/// One delivery to make.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxItem {
    pub id: i64,
    pub target: Target,
    pub alert_id: Option<i64>,
    pub change_id: Option<i64>,
    pub dataset: Option<String>,
    pub partition_spec: Option<String>,
    pub url: String,
    pub idempotency_key: String,
    pub payload: Json<Value>,
    pub attempts: i64,
    /// How often a sender took it before: more than `attempts` when one
    /// stopped mid-delivery, so the outcome of that attempt is unknown.
    pub claims: i64,
}

impl OutboxItem {
    /// Whether a sender took this delivery before (its outcome may be unknown).
    pub fn attempted_before(&self) -> bool {
        self.claims > 0 || self.attempts > 0
    }

    /// Deliveries with the same key go out in id order (`None`: any order).
    pub fn order_key(&self) -> Option<(&str, &str, &str, &str)> {
        Some((self.target.as_str(), &self.url, self.dataset.as_deref()?, self.partition_spec.as_deref()?))
    }
}

const ITEM_COLUMNS: &str =
    "id, target, alert_id, change_id, dataset, partition_spec, url, idempotency_key, payload, attempts, claims";

/// Due, free deliveries, oldest first, that no earlier pending delivery of
/// the same partition to the same receiver holds back (one that is waiting
/// for its retry, or being sent by someone else).
const CLAIMABLE_SQL: &str = "FROM outbox o \
     WHERE o.delivered_at IS NULL AND o.given_up_at IS NULL AND o.next_attempt_at <= $1 \
       AND (o.claimed_until IS NULL OR o.claimed_until < $1) \
       AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.dataset = o.dataset AND e.partition_spec = o.partition_spec \
         AND e.target = o.target AND e.url = o.url AND e.id < o.id AND e.delivered_at IS NULL AND e.given_up_at IS NULL \
         AND NOT (e.next_attempt_at <= $1 AND (e.claimed_until IS NULL OR e.claimed_until < $1)))";

/// One delivery of the outbox: an alert webhook, an Airflow asset event or
/// a CloudEvent. Written in the transaction of the decision it reports, sent
/// at least once (retried with backoff, in order per partition and
/// receiver), only to allowed hosts.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = Delivery)]
pub struct DeliveryRecord {
    pub id: i64,
    pub target: Target,
    #[schema(value_type = crate::api::schemas::DeliveryState)]
    pub state: String,
    /// The receiver (for `airflow`: Airflow's base URL).
    pub url: String,
    pub dataset: Option<String>,
    #[serde(rename = "partition")]
    #[sqlx(rename = "partition_spec")]
    pub partition: Option<String>,
    /// The alert a webhook delivery reports.
    pub alert_id: Option<i64>,
    /// The change-feed cursor of the change an `airflow` or `events`
    /// delivery reports (a CloudEvent's `id`).
    #[sqlx(skip)]
    pub cursor: Option<String>,
    #[serde(skip)]
    pub change_id: Option<i64>,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub next_attempt_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub given_up_at: Option<DateTime<Utc>>,
    /// What is (or was) sent: the alert, the CloudEvent, or the asset event
    /// `{asset, partition_key, extra}` (the asset's id is looked up when sent).
    #[schema(value_type = Object)]
    pub payload: Json<Value>,
}

const DELIVERY_STATE_SQL: &str = "CASE WHEN delivered_at IS NOT NULL THEN 'delivered' \
     WHEN given_up_at IS NOT NULL THEN 'given_up' ELSE 'pending' END";

/// Filters of `GET /v1/deliveries`.
#[derive(Debug, Clone, Default)]
pub struct DeliveryQuery {
    pub target: Option<Target>,
    /// `pending`, `delivered` or `given_up`.
    pub state: Option<String>,
    pub dataset: Option<String>,
    pub limit: i64,
    /// Id of the last delivery of the previous page (newest first).
    pub after_id: Option<i64>,
}

/// Where readiness changes go besides each dataset's own receivers.
#[derive(Debug, Clone, Default)]
pub struct Receivers {
    /// `--webhook-url`: every alert.
    pub webhook: Option<String>,
    /// `--events-url`: every change, as a CloudEvent.
    pub events: Vec<String>,
    /// `--airflow-url`: asset events of datasets with an `airflow_asset`.
    pub airflow: Option<String>,
}

/// A change-feed entry just written, to be queued for its receivers.
pub(super) struct NewChange<'a> {
    pub id: i64,
    pub kind: &'a str,
    pub dataset: &'a str,
    pub partition: &'a str,
    pub version: i64,
    pub batch_id: Option<&'a str>,
    pub detail: &'a ChangeDetail,
    pub at: DateTime<Utc>,
}

/// The `data` of a change's CloudEvent: the feed entry, with its cursor.
#[derive(serde::Serialize)]
struct ChangeData<'a> {
    cursor: String,
    kind: &'a str,
    dataset: &'a str,
    partition: &'a str,
    version: i64,
    batch_id: Option<&'a str>,
    at: DateTime<Utc>,
    detail: &'a ChangeDetail,
}

async fn queue(c: &mut Conn<'_>, target: Target, change: &NewChange<'_>, url: &str, payload: Value) -> Result<()> {
    c.exec(
        "INSERT INTO outbox (target, change_id, dataset, partition_spec, url, idempotency_key, payload, next_attempt_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ON CONFLICT (target, url, change_id) DO NOTHING",
        args![target.as_str(), change.id, change.dataset, change.partition, url, feed_cursor(change.id), payload, change.at],
    )
    .await?;
    Ok(())
}

/// Queues a change for its receivers, in the transaction that wrote it: a
/// CloudEvent for every events URL (the service's and the dataset's), and,
/// for a published version of a dataset with an `airflow_asset`, an asset
/// event for Airflow. `policy` is the changed dataset's.
pub(super) async fn on_change(
    c: &mut Conn<'_>,
    ripple: &Ripple,
    policy: &DatasetPolicy,
    change: NewChange<'_>,
) -> Result<()> {
    let wants_airflow = matches!(change.kind, "published" | "restated") && ripple.receivers.airflow.is_some();
    let mut urls: Vec<&String> = ripple.receivers.events.iter().chain(policy.events_url.iter()).collect();
    urls.sort();
    urls.dedup();
    if !urls.is_empty() {
        let cursor = feed_cursor(change.id);
        let data = ChangeData {
            cursor,
            kind: change.kind,
            dataset: change.dataset,
            partition: change.partition,
            version: change.version,
            batch_id: change.batch_id,
            at: change.at,
            detail: change.detail,
        };
        let data = serde_json::to_value(&data).map_err(anyhow::Error::from)?;
        let event = CloudEvent::of_change(change.id, change.kind, change.dataset, change.partition, change.at, data);
        let payload = serde_json::to_value(&event).map_err(anyhow::Error::from)?;
        for url in urls {
            queue(c, Target::Events, &change, url, payload.clone()).await?;
        }
    }
    if let (true, Some(airflow), Some(asset)) = (wants_airflow, &ripple.receivers.airflow, &policy.airflow_asset) {
        let partition_key = match policy.partition_key_template().and_then(|t| t.render(change.partition)) {
            Ok(k) => k,
            Err(why) => {
                // Batches naming such a partition are refused at start; the
                // template changed since this one started.
                tracing::warn!(dataset = change.dataset, partition = change.partition, %why, "no asset event");
                return Ok(());
            }
        };
        let (row_count, published_at, superseded_row_count): (Option<i64>, Option<DateTime<Utc>>, Option<i64>) = c
            .one(
                &format!(
                    "SELECT published_row_count, {} AS published_at, prev_published_row_count FROM partitions \
                     WHERE dataset = $1 AND partition_spec = $2",
                    c.dialect().split_instant("published_at")
                ),
                args![change.dataset, change.partition],
            )
            .await?;
        let extra = AssetEventExtra::new(
            change.batch_id.unwrap_or_default().to_owned(),
            change.version,
            row_count,
            published_at.unwrap_or(change.at),
            superseded_row_count,
        );
        let event = PendingAssetEvent { asset: asset.clone(), partition_key, extra };
        let payload = serde_json::to_value(&event).map_err(anyhow::Error::from)?;
        queue(c, Target::Airflow, &change, airflow, payload).await?;
    }
    Ok(())
}

impl SqlStore {
    /// Takes up to `limit` due deliveries for [`CLAIM_SECONDS`], so that no
    /// other replica sends them meanwhile. A delivery whose claim is lost to
    /// another replica holds back the later ones of its partition.
    pub async fn claim_deliveries(&self, limit: i64) -> Result<Vec<OutboxItem>> {
        let now = self.now();
        let until = now + chrono::Duration::seconds(CLAIM_SECONDS);
        let mut r = self.read().await?;
        let mut c = r.conn();
        let due: Vec<OutboxItem> =
            c.all(&format!("SELECT {ITEM_COLUMNS} {CLAIMABLE_SQL} ORDER BY o.id LIMIT {limit}"), args![now]).await?;
        let mut claimed: Vec<OutboxItem> = Vec::new();
        let mut lost: Vec<OutboxItem> = Vec::new();
        for item in due {
            let key = item.order_key();
            if key.is_some() && lost.iter().any(|l| l.order_key() == key) {
                continue;
            }
            // Conditional update: of two replicas racing for a row, one wins.
            let n = c
                .exec(
                    "UPDATE outbox SET claimed_until = $2, claims = claims + 1 \
                     WHERE id = $1 AND delivered_at IS NULL AND given_up_at IS NULL AND (claimed_until IS NULL OR claimed_until < $3)",
                    args![item.id, until, now],
                )
                .await?;
            if n == 1 {
                claimed.push(item);
            } else {
                lost.push(item);
            }
        }
        Ok(claimed)
    }

    pub async fn delivery_sent(&self, id: i64) -> Result<()> {
        let now = self.now();
        let mut r = self.read().await?;
        r.conn()
            .exec(
                "UPDATE outbox SET delivered_at = $2, attempts = attempts + 1, claimed_until = NULL WHERE id = $1",
                args![id, now],
            )
            .await?;
        Ok(())
    }

    pub async fn delivery_failed(&self, id: i64, error: &str, retry_at: DateTime<Utc>) -> Result<()> {
        let mut r = self.read().await?;
        r.conn()
            .exec(
                "UPDATE outbox SET attempts = attempts + 1, last_error = $2, next_attempt_at = $3, claimed_until = NULL WHERE id = $1",
                args![id, error, retry_at],
            )
            .await?;
        Ok(())
    }

    /// Gives a delivery up for good (its host is no longer allowed); `reason` is kept with it.
    pub async fn delivery_given_up(&self, id: i64, reason: &str) -> Result<()> {
        let now = self.now();
        let mut r = self.read().await?;
        r.conn()
            .exec(
                "UPDATE outbox SET given_up_at = $2, last_error = $3, claimed_until = NULL WHERE id = $1",
                args![id, now, reason],
            )
            .await?;
        Ok(())
    }

    /// Hands a claimed delivery back unsent (an earlier one of its partition failed).
    pub async fn release_delivery(&self, id: i64) -> Result<()> {
        let mut r = self.read().await?;
        r.conn().exec("UPDATE outbox SET claimed_until = NULL WHERE id = $1", args![id]).await?;
        Ok(())
    }

    /// Deliveries, newest first.
    pub async fn list_deliveries(&self, q: &DeliveryQuery) -> Result<Page<DeliveryRecord>> {
        let mut clauses = Vec::new();
        let mut a: Vec<Arg> = Vec::new();
        if let Some(t) = q.target {
            a.push(t.as_str().into());
            clauses.push(format!("target = ${}", a.len()));
        }
        if let Some(d) = &q.dataset {
            a.push(d.into());
            clauses.push(format!("dataset = ${}", a.len()));
        }
        match q.state.as_deref() {
            Some("delivered") => clauses.push("delivered_at IS NOT NULL".into()),
            Some("given_up") => clauses.push("delivered_at IS NULL AND given_up_at IS NOT NULL".into()),
            Some(_) => clauses.push("delivered_at IS NULL AND given_up_at IS NULL".into()),
            None => {}
        }
        if let Some(id) = q.after_id {
            a.push(id.into());
            clauses.push(format!("id < ${}", a.len()));
        }
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        let sql = format!(
            "SELECT id, target, {DELIVERY_STATE_SQL} AS state, url, dataset, partition_spec, alert_id, change_id, attempts, \
               last_error, next_attempt_at, created_at, delivered_at, given_up_at, payload \
             FROM outbox {filter} ORDER BY id DESC LIMIT {}",
            q.limit + 1
        );
        let mut r = self.read().await?;
        let mut items: Vec<DeliveryRecord> = r.conn().all(&sql, a).await?;
        let more = items.len() as i64 > q.limit;
        items.truncate(q.limit as usize);
        for d in &mut items {
            d.cursor = d.change_id.map(feed_cursor);
        }
        let next = items.last().filter(|_| more).map(|x| Position::Id(x.id));
        Ok(Page { items, next })
    }

    /// Raises an alert about a dataset's pushes (once per `dedup_key`).
    #[tracing::instrument(skip_all, fields(%kind, dataset = %dataset, partition))]
    pub async fn raise_push_alert(
        &self,
        kind: AlertKind,
        dataset: &str,
        partition: Option<&str>,
        dedup_key: &str,
        message: &str,
    ) -> Result<()> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let mut c = tx.conn();
        let policy = load_policy(&mut c, dataset).await?.policy();
        let alert = NewAlert {
            kind,
            dedup_key: dedup_key.to_owned(),
            severity: severity(policy.tier),
            task: None,
            dataset: dataset.to_owned(),
            dt: None,
            partitions: partition.map(str::to_owned).into_iter().collect(),
            batch_id: None,
            stage: None,
            category: None,
            failing_checks: Vec::new(),
            owner: policy.owner.clone(),
            action: Action::FixAirflowAsset,
            retryable: true,
            message: message.to_owned(),
        };
        alerts::raise(&mut c, alert, &self.webhooks(&policy), now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Resolves the open alert raised under `dedup_key` by
    /// [`Self::raise_push_alert`], if there is one: its cause went away
    /// ([`alerts::resolve_by_key`]). Whether there was one to resolve.
    #[tracing::instrument(skip_all, fields(dedup_key = %dedup_key))]
    pub async fn resolve_push_alert(&self, dedup_key: &str) -> Result<bool> {
        const OPEN: &str = "SELECT id FROM alerts WHERE dedup_key = $1 AND state = 'open'";
        // Most deliveries have no alert to resolve: a read, and no write.
        let open: Option<(i64,)> = self.read().await?.conn().opt(OPEN, args![dedup_key]).await?;
        if open.is_none() {
            return Ok(false);
        }
        let mut tx = self.begin_write().await?;
        let resolved = alerts::resolve_by_key(&mut tx.conn(), dedup_key, self.now()).await?;
        tx.commit().await?;
        if resolved {
            tracing::info!(dedup_key, "alert resolved: its cause went away");
        }
        Ok(resolved)
    }
}
