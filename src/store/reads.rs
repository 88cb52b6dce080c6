//! Reads: records, listings, and the partition standings `/ready` needs; and
//! the [`Store`] trait wired to the operations.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use super::batches::{load_record, BATCH_COLUMNS, LOG_COLUMNS};
use super::db::{args, Arg, Conn};
use super::lineage::InputRecord;
use super::records::{BatchRow, DatasetRow, LogRow, DATASET_COLUMNS, PARTITION_COLUMNS};
use super::*;
use crate::changes::{ChangeHub, TaskLatest};
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::domain::policy::DatasetPolicy;
use crate::error::Result;

/// `$first, $first+1, …` for `n` values: an `IN (…)` list.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// A `WHERE` clause built from optional filters, numbering placeholders as it goes.
#[derive(Default)]
struct Filter {
    clauses: Vec<String>,
    args: Vec<Arg>,
}

impl Filter {
    fn push(&mut self, clause: &str, value: impl Into<Arg>) {
        self.args.push(value.into());
        self.clauses.push(clause.replace("$?", &format!("${}", self.args.len())));
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.clauses.join(" AND "))
        }
    }
}

/// Partitions as one log field: `dt=2026-08-24,dt=2026-08-25`.
fn partition_list(partitions: &[PartitionSpec]) -> String {
    partitions.iter().map(PartitionSpec::as_str).collect::<Vec<_>>().join(",")
}

/// A dataset row with every policy column given: what a policy says is
/// written, never a column's SQL `DEFAULT` (see [`crate::domain::policy`]).
/// Its values are [`dataset_args`].
const INSERT_DATASET: &str =
    "INSERT INTO datasets (name, tier, write_mode, unique_key, timezone, max_volume_change, baseline_periods, allow_empty, owner, \
       max_partitions_per_batch, deadline, webhook_url, airflow_asset, partition_key, events_url, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $14, $15, $16, $13, $13)";

fn dataset_args(name: &str, p: &DatasetPolicy, now: DateTime<Utc>) -> Vec<Arg> {
    args![
        name,
        p.tier.as_str(),
        p.write_mode.as_str(),
        sqlx::types::Json(&p.unique_key),
        p.timezone.clone(),
        p.max_volume_change,
        i64::from(p.baseline_periods),
        p.allow_empty,
        p.owner.clone(),
        i64::from(p.max_partitions_per_batch),
        p.deadline.as_ref().map(sqlx::types::Json),
        p.webhook_url.clone(),
        now,
        p.airflow_asset.clone(),
        p.partition_key.clone(),
        p.events_url.clone()
    ]
}

/// Makes a dataset nobody described (a batch names it first) with the
/// default policy, written out in full; one that exists is left as it is.
pub(super) async fn ensure_dataset(c: &mut Conn<'_>, name: &str, now: DateTime<Utc>) -> Result<()> {
    let sql = format!("{INSERT_DATASET} ON CONFLICT (name) DO NOTHING");
    c.exec(&sql, dataset_args(name, &DatasetPolicy::default(), now)).await?;
    Ok(())
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    fn hub(&self) -> &Arc<ChangeHub> {
        &self.hub
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn health(&self) -> Result<()> {
        let mut r = self.read().await?;
        let _: (i64,) = r.conn().one("SELECT CAST(1 AS BIGINT)", args![]).await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(dataset = %name))]
    async fn put_dataset(&self, name: &DatasetName, p: &DatasetPolicy) -> Result<(DatasetRecord, bool)> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let mut c = tx.conn();
        let existed: Option<(String,)> =
            c.opt("SELECT name FROM datasets WHERE name = $1", args![name.as_str()]).await?;
        let sql = format!(
            "{INSERT_DATASET} \
             ON CONFLICT (name) DO UPDATE SET tier = excluded.tier, write_mode = excluded.write_mode, unique_key = excluded.unique_key, \
               timezone = excluded.timezone, max_volume_change = excluded.max_volume_change, baseline_periods = excluded.baseline_periods, \
               allow_empty = excluded.allow_empty, owner = excluded.owner, max_partitions_per_batch = excluded.max_partitions_per_batch, \
               deadline = excluded.deadline, webhook_url = excluded.webhook_url, airflow_asset = excluded.airflow_asset, \
               partition_key = excluded.partition_key, events_url = excluded.events_url, updated_at = excluded.updated_at \
             RETURNING {DATASET_COLUMNS}"
        );
        let row: DatasetRow = c.one(&sql, dataset_args(name.as_str(), p, now)).await?;
        tx.commit().await?;
        Ok((row.into(), existed.is_none()))
    }

    async fn get_dataset(&self, name: &str) -> Result<Option<DatasetRecord>> {
        let mut r = self.read().await?;
        let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE name = $1");
        Ok(r.conn().opt::<DatasetRow>(&sql, args![name]).await?.map(Into::into))
    }

    async fn list_datasets(&self) -> Result<Vec<DatasetRecord>> {
        let mut r = self.read().await?;
        let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets ORDER BY name");
        Ok(r.conn().all::<DatasetRow>(&sql, args![]).await?.into_iter().map(Into::into).collect())
    }

    #[tracing::instrument(skip_all, fields(dataset = %req.dataset, task = req.task.as_str(), dt = %req.dt, partitions = %partition_list(&req.partitions), batch_id = tracing::field::Empty))]
    async fn start_batch(&self, req: StartBatch) -> Result<Started> {
        let started = self.do_start(req).await?;
        tracing::Span::current().record("batch_id", started.batch_id.as_str());
        Ok(started)
    }

    #[tracing::instrument(skip_all, fields(batch_id = %batch_id))]
    async fn heartbeat(&self, batch_id: &str) -> Result<Lease> {
        self.do_heartbeat(batch_id).await
    }

    #[tracing::instrument(skip_all, fields(batch_id = %batch_id, replayed = tracing::field::Empty))]
    async fn commit_batch(&self, batch_id: &str, evidence: CommitEvidence, fingerprint: String) -> Result<Decision> {
        let began = std::time::Instant::now();
        let decision = self.do_commit(batch_id, evidence, fingerprint).await?;
        self.metrics.commit_took(began.elapsed().as_secs_f64());
        tracing::Span::current().record("replayed", decision.replayed);
        Ok(decision)
    }

    #[tracing::instrument(skip_all, fields(batch_id = %batch_id, stage = %report.stage, replayed = tracing::field::Empty))]
    async fn fail_batch(&self, batch_id: &str, report: FailReport, fingerprint: String) -> Result<Decision> {
        let decision = self.do_fail(batch_id, report, fingerprint).await?;
        tracing::Span::current().record("replayed", decision.replayed);
        Ok(decision)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(batch_id = %batch_id))]
    async fn get_batch(&self, batch_id: &str) -> Result<Option<BatchRecord>> {
        let mut r = self.read().await?;
        load_record(&mut r.conn(), batch_id).await
    }

    async fn list_batches(&self, q: &BatchQuery) -> Result<Page<BatchRecord>> {
        let mut f = Filter::default();
        if let Some(v) = &q.task {
            f.push("task = $?", v);
        }
        if let Some(v) = &q.dataset {
            f.push("dataset = $?", v);
        }
        if let Some(v) = q.dt {
            f.push("dt = $?", v);
        }
        if let Some(v) = q.state {
            f.push("state = $?", v.as_str());
        }
        if let Some(v) = q.since {
            f.push("started_at >= $?", v);
        }
        if let Some(v) = q.until {
            f.push("started_at < $?", v);
        }
        if let Some(v) = q.after_id {
            f.push("id < $?", v);
        }
        let sql = format!("SELECT {BATCH_COLUMNS} FROM batches {} ORDER BY id DESC LIMIT {}", f.sql(), q.limit + 1);
        let mut r = self.read().await?;
        let mut c = r.conn();
        let mut rows: Vec<BatchRow> = c.all(&sql, f.args).await?;
        let more = rows.len() as i64 > q.limit;
        rows.truncate(q.limit as usize);
        let next = rows.last().filter(|_| more).map(|b| Position::Id(b.id));
        let ids: Vec<Arg> = rows.iter().map(|b| Arg::from(&b.batch_id)).collect();
        let (logs, inputs): (Vec<LogRow>, Vec<(String, String, String, i64, Option<String>)>) = if ids.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            let list = placeholders(1, ids.len());
            let logs = c
                .all(&format!("SELECT {LOG_COLUMNS} FROM task_produce_log WHERE batch_id IN ({list}) ORDER BY batch_id, target_partition"), ids.clone())
                .await?;
            let inputs = c
                .all(
                    &format!(
                        "SELECT batch_id, input_dataset, input_partition, input_version, input_batch_id FROM batch_inputs \
                         WHERE batch_id IN ({list}) ORDER BY batch_id, input_dataset, input_partition"
                    ),
                    ids,
                )
                .await?;
            (logs, inputs)
        };
        let items = rows
            .into_iter()
            .map(|b| {
                let mine = logs.iter().filter(|l| l.batch_id == b.batch_id).cloned().collect();
                let read = inputs
                    .iter()
                    .filter(|i| i.0 == b.batch_id)
                    .map(|(_, dataset, partition, version, batch_id)| InputRecord {
                        dataset: dataset.clone(),
                        partition: partition.clone(),
                        version: *version,
                        batch_id: batch_id.clone(),
                    })
                    .collect();
                BatchRecord::assemble(b, mine, read, None)
            })
            .collect();
        Ok(Page { items, next })
    }

    async fn list_partitions(&self, q: &PartitionQuery) -> Result<Page<PartitionRecord>> {
        let mut f = Filter::default();
        f.push("dataset = $?", &q.dataset);
        if let Some(v) = q.from {
            f.push("dt >= $?", v);
        }
        if let Some(v) = q.to {
            f.push("dt <= $?", v);
        }
        if let Some((dt, p)) = &q.after {
            // Newest date first, partitions of a date in name order.
            f.args.push(Arg::from(*dt));
            f.args.push(Arg::from(p));
            let (a, b) = (f.args.len() - 1, f.args.len());
            f.clauses.push(format!("(dt < ${a} OR (dt = ${a} AND partition_spec > ${b}))"));
        }
        let sql = format!(
            "SELECT {PARTITION_COLUMNS} FROM partitions {} ORDER BY dt DESC, partition_spec ASC LIMIT {}",
            f.sql(),
            q.limit + 1
        );
        let mut r = self.read().await?;
        let mut items: Vec<PartitionRecord> = r.conn().all(&sql, f.args).await?;
        let more = items.len() as i64 > q.limit;
        items.truncate(q.limit as usize);
        let next = items.last().filter(|_| more).map(|p| Position::Partition(p.dt, p.partition.clone()));
        Ok(Page { items, next })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(dataset = %dataset))]
    async fn partition_status(&self, dataset: &str, partitions: &[String]) -> Result<Vec<Option<PartitionRecord>>> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {PARTITION_COLUMNS} FROM partitions WHERE dataset = $1 AND partition_spec IN ({})",
            placeholders(2, partitions.len())
        );
        let mut a = args![dataset];
        a.extend(partitions.iter().map(Arg::from));
        let mut r = self.read().await?;
        let found: Vec<PartitionRecord> = r.conn().all(&sql, a).await?;
        Ok(partitions.iter().map(|p| found.iter().find(|f| &f.partition == p).cloned()).collect())
    }

    async fn latest_task_batch(&self, task: &str, dt: NaiveDate) -> Result<Option<TaskLatest>> {
        let mut r = self.read().await?;
        let mut c = r.conn();
        let latest: Option<(String, String)> = c
            .opt(
                "SELECT batch_id, dataset FROM batches WHERE task = $1 AND dt = $2 ORDER BY seq DESC LIMIT 1",
                args![task, dt],
            )
            .await?;
        let Some((batch_id, dataset)) = latest else {
            return Ok(None);
        };
        let parts: Vec<(String,)> = c
            .all(
                "SELECT target_partition FROM task_produce_log WHERE batch_id = $1 ORDER BY target_partition",
                args![&batch_id],
            )
            .await?;
        Ok(Some(TaskLatest { batch_id, dataset, partitions: parts.into_iter().map(|(p,)| p).collect() }))
    }

    #[tracing::instrument(skip_all, fields(batch_id = %batch_id))]
    async fn record_written(&self, batch_id: &str, partitions: Vec<(PartitionSpec, i64)>) -> Result<BatchRecord> {
        self.do_record_written(batch_id, partitions).await
    }

    #[tracing::instrument(skip_all)]
    async fn expire_leases(&self) -> Result<Vec<String>> {
        self.do_expire_leases().await
    }

    #[tracing::instrument(skip_all)]
    async fn check_deadlines(&self) -> Result<usize> {
        self.do_check_deadlines().await
    }

    async fn list_alerts(&self, q: &AlertQuery) -> Result<Page<AlertRecord>> {
        self.do_list_alerts(q).await
    }

    async fn claim_deliveries(&self, limit: i64) -> Result<Vec<OutboxItem>> {
        self.do_claim_deliveries(limit).await
    }

    async fn delivery_sent(&self, id: i64) -> Result<()> {
        self.do_delivery_sent(id).await
    }

    async fn delivery_failed(&self, id: i64, error: &str, retry_at: DateTime<Utc>) -> Result<()> {
        self.do_delivery_failed(id, error, retry_at).await
    }

    async fn delivery_given_up(&self, id: i64, reason: &str) -> Result<()> {
        self.do_delivery_given_up(id, reason).await
    }

    async fn release_delivery(&self, id: i64) -> Result<()> {
        self.do_release_delivery(id).await
    }

    async fn list_deliveries(&self, q: &DeliveryQuery) -> Result<Page<DeliveryRecord>> {
        self.do_list_deliveries(q).await
    }

    #[tracing::instrument(skip_all, fields(%kind, dataset = %dataset, partition))]
    async fn raise_push_alert(
        &self,
        kind: crate::domain::alerts::AlertKind,
        dataset: &str,
        partition: Option<&str>,
        dedup_key: &str,
        message: &str,
    ) -> Result<()> {
        self.do_raise_push_alert(kind, dataset, partition, dedup_key, message).await
    }

    #[tracing::instrument(skip_all, fields(%cutoff))]
    async fn prune(&self, cutoff: DateTime<Utc>) -> Result<Pruned> {
        self.do_prune(cutoff).await
    }

    async fn changes_horizon(&self) -> Result<i64> {
        self.do_changes_horizon().await
    }

    #[tracing::instrument(skip_all, fields(dataset = %dataset, partition = %partition))]
    async fn invalidate_partition(&self, dataset: &str, partition: &str, reason: &str) -> Result<()> {
        self.do_invalidate(dataset, partition, reason).await
    }

    async fn list_changes(&self, after: i64, dataset: Option<&str>, limit: i64) -> Result<Vec<ChangeRecord>> {
        self.do_list_changes(after, dataset, limit).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(dataset = %dataset, partition = %partition, ?direction, depth))]
    async fn lineage(&self, dataset: &str, partition: &str, direction: Direction, depth: u32) -> Result<LineageGraph> {
        self.do_lineage(dataset, partition, direction, depth).await
    }

    #[tracing::instrument(skip_all, fields(dataset = %repair.dataset, partitions = %partition_list(&repair.partitions), action = %repair.action))]
    async fn create_repair(&self, repair: NewRepair) -> Result<crate::domain::repair::RepairPlan> {
        self.do_create_repair(repair).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(repair_id = id))]
    async fn get_repair(&self, id: i64) -> Result<Option<crate::domain::repair::RepairPlan>> {
        self.do_get_repair(id).await
    }

    async fn list_repairs(&self, limit: i64) -> Result<Vec<RepairSummary>> {
        self.do_list_repairs(limit).await
    }

    #[tracing::instrument(skip_all, fields(run_id = event.run_id.as_deref(), event_type = event.event_type.as_deref()))]
    async fn record_lineage_event(&self, event: &LineageEvent) -> Result<Recorded> {
        self.do_record_lineage_event(event).await
    }

    #[tracing::instrument(skip_all, fields(event_id = id))]
    async fn set_lineage_outcome(&self, id: i64, outcome: &serde_json::Value) -> Result<()> {
        self.do_set_lineage_outcome(id, outcome).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(run_id = %run_id))]
    async fn lineage_batches(&self, run_id: &str) -> Result<Vec<BatchRecord>> {
        self.do_lineage_batches(run_id).await
    }

    #[tracing::instrument(skip_all, fields(name = %token.name))]
    async fn create_token(&self, token: &NewToken) -> Result<TokenRecord> {
        self.do_create_token(token).await
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        self.do_list_tokens().await
    }

    #[tracing::instrument(skip_all, fields(name = %name))]
    async fn revoke_token(&self, name: &str) -> Result<bool> {
        self.do_revoke_token(name).await
    }

    async fn find_token(&self, secret_hash: &str) -> Result<Option<TokenRecord>> {
        self.do_find_token(secret_hash).await
    }

    async fn touch_token(&self, name: &str, at: DateTime<Utc>) -> Result<()> {
        self.do_touch_token(name, at).await
    }

    async fn record_audit(&self, entries: &[AuditEntry]) -> Result<()> {
        self.do_record_audit(entries).await
    }

    async fn list_audit(&self, q: &AuditQuery) -> Result<Page<AuditRecord>> {
        self.do_list_audit(q).await
    }

    async fn gauges(&self) -> Result<StoreGauges> {
        self.do_gauges().await
    }
}
