//! Alerts and their webhook outbox. An alert is raised in the transaction
//! that made the state change it reports, together with its outbox rows, so
//! an alert is never lost between the registry and the webhook.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use super::db::{args, Conn};
use super::lineage::{walk, Direction, DOWNSTREAM_DEPTH};
use super::records::BatchRow;
use super::records::{fitness_of, load_partition};
use crate::domain::alerts::{severity, Action, Advice, AlertKind, AlertState, Severity};
use crate::domain::batch::{FailCategory, FailStage};
use crate::domain::checks::CheckResult;
use crate::domain::policy::DatasetPolicy;
use crate::domain::readiness::Fitness;
use crate::error::Result;

/// An alert about to be raised.
#[derive(Debug, Clone)]
pub(super) struct NewAlert {
    pub kind: AlertKind,
    /// At most one alert per key: raising twice is a no-op. (An alert
    /// resolved by [`resolve_by_key`] gives its key up.)
    pub dedup_key: String,
    pub severity: Severity,
    pub task: Option<String>,
    pub dataset: String,
    pub dt: Option<NaiveDate>,
    pub partitions: Vec<String>,
    pub batch_id: Option<String>,
    pub stage: Option<FailStage>,
    pub category: Option<FailCategory>,
    /// The failed checks of a rejection.
    pub failing_checks: Vec<CheckResult>,
    pub owner: Option<String>,
    pub action: Action,
    pub retryable: bool,
    pub message: String,
}

impl NewAlert {
    /// An alert about one batch; the caller adds stage, category and checks.
    pub(super) fn about_batch(
        kind: AlertKind,
        b: &BatchRow,
        policy: &DatasetPolicy,
        partitions: Vec<String>,
        advice: Advice,
        message: String,
    ) -> Self {
        Self {
            kind,
            dedup_key: format!("{kind}:{}", b.batch_id),
            severity: severity(policy.tier),
            task: Some(b.task.clone()),
            dataset: b.dataset.clone(),
            dt: Some(b.dt),
            partitions,
            batch_id: Some(b.batch_id.clone()),
            stage: None,
            category: None,
            failing_checks: Vec::new(),
            owner: policy.owner.clone(),
            action: advice.action,
            retryable: advice.retryable,
            message,
        }
    }
}

pub(super) const ALERT_COLUMNS: &str =
    "id, kind, state, severity, task, dataset, dt, partitions, batch_id, stage, category, \
     failing_checks, downstream, owner, recommended_action, retryable, message, raised_at, resolved_at";

/// An alert: raised once per cause, resolved when every partition it names
/// is ready. Also POSTed to webhooks (BATCHGATE_WEBHOOK_URL and the
/// dataset's webhook_url) with an `Idempotency-Key: batchgate-alert-<id>`
/// header, at least once, with exponential backoff.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = Alert)]
pub struct AlertRecord {
    pub id: i64,
    pub kind: AlertKind,
    pub state: AlertState,
    /// From the dataset tier: core → critical, standard → warning, scratch → info.
    pub severity: Severity,
    pub task: Option<String>,
    pub dataset: String,
    pub dt: Option<NaiveDate>,
    #[schema(value_type = Vec<String>)]
    pub partitions: Json<Vec<String>>,
    pub batch_id: Option<String>,
    pub stage: Option<FailStage>,
    pub category: Option<FailCategory>,
    #[schema(value_type = Vec<CheckResult>)]
    pub failing_checks: Json<Vec<CheckResult>>,
    /// Every partition built on these, transitively, with its fitness when the alert was raised.
    #[schema(value_type = Vec<AffectedPartition>)]
    pub downstream: Json<Vec<AffectedPartition>>,
    pub owner: Option<String>,
    pub recommended_action: Action,
    pub retryable: bool,
    pub message: String,
    pub raised_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
}

/// A partition downstream of an alert's partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AffectedPartition {
    pub dataset: String,
    pub partition: String,
    /// Its fitness when the alert was raised.
    pub state: Fitness,
}

/// Raises an alert unless one with the same key exists, and queues it for
/// every webhook. Returns the new alert's id.
pub(super) async fn raise(
    c: &mut Conn<'_>,
    a: NewAlert,
    webhooks: &[String],
    now: DateTime<Utc>,
) -> Result<Option<i64>> {
    let sql = format!(
        "INSERT INTO alerts (dedup_key, kind, state, severity, task, dataset, dt, partitions, batch_id, stage, category, \
           failing_checks, downstream, owner, recommended_action, retryable, message, raised_at) \
         VALUES ($1, $2, 'open', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
         ON CONFLICT (dedup_key) DO NOTHING RETURNING {ALERT_COLUMNS}"
    );
    // Who else is affected: every partition built on these, transitively.
    let mut downstream = Vec::new();
    for p in &a.partitions {
        let graph = walk(c, &a.dataset, p, Direction::Downstream, DOWNSTREAM_DEPTH).await?;
        for n in graph.nodes.into_iter().skip(1) {
            let entry = AffectedPartition { dataset: n.dataset, partition: n.partition, state: n.state };
            if !downstream.contains(&entry) {
                downstream.push(entry);
            }
        }
    }
    let inserted: Option<AlertRecord> = c
        .opt(
            &sql,
            args![
                a.dedup_key,
                a.kind,
                a.severity,
                a.task,
                &a.dataset,
                a.dt,
                Json(&a.partitions),
                a.batch_id,
                a.stage,
                a.category,
                Json(&a.failing_checks),
                Json(&downstream),
                a.owner,
                a.action,
                a.retryable,
                a.message,
                now
            ],
        )
        .await?;
    let Some(alert) = inserted else {
        return Ok(None);
    };
    let payload = serde_json::to_value(&alert).map_err(anyhow::Error::from)?;
    let mut urls: Vec<&String> = webhooks.iter().collect();
    urls.dedup();
    for url in urls {
        c.exec(
            "INSERT INTO outbox (target, alert_id, url, idempotency_key, payload, next_attempt_at, created_at) \
             VALUES ('webhook', $1, $2, $3, $4, $5, $5)",
            args![alert.id, url, format!("batchgate-alert-{}", alert.id), payload.clone(), now],
        )
        .await?;
    }
    Ok(Some(alert.id))
}

/// Resolves the open alert raised under `dedup_key`, if there is one, and
/// frees the key (the resolved alert keeps it with `:resolved:<id>` added),
/// so the same trouble later raises a new alert. Whether one was resolved.
pub(super) async fn resolve_by_key(c: &mut Conn<'_>, dedup_key: &str, now: DateTime<Utc>) -> Result<bool> {
    let resolved = c
        .exec(
            "UPDATE alerts SET state = 'resolved', resolved_at = $2, \
               dedup_key = dedup_key || ':resolved:' || CAST(id AS TEXT) \
             WHERE dedup_key = $1 AND state = 'open'",
            args![dedup_key, now],
        )
        .await?;
    Ok(resolved > 0)
}

/// Resolves every open alert of a data date whose partitions are all ready.
pub(super) async fn resolve_ready(c: &mut Conn<'_>, dataset: &str, dt: NaiveDate, now: DateTime<Utc>) -> Result<()> {
    let open: Vec<(i64, Json<Vec<String>>)> = c
        .all("SELECT id, partitions FROM alerts WHERE dataset = $1 AND dt = $2 AND state = 'open'", args![dataset, dt])
        .await?;
    for (id, parts) in open {
        let mut all_ready = true;
        for p in &parts.0 {
            all_ready &= fitness_of(load_partition(c, dataset, p).await?.as_ref()).is_ready();
        }
        if all_ready {
            c.exec("UPDATE alerts SET state = 'resolved', resolved_at = $2 WHERE id = $1", args![id, now]).await?;
        }
    }
    Ok(())
}
