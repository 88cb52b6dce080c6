//! What the background scans do: lease expiry, deadlines, webhook outbox;
//! and the `written` report. Each decision is taken under the registry's
//! write lock after re-reading the row, so with several replicas scanning at
//! once a batch is abandoned, or an alert raised, exactly once.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};

use super::alerts::{self, AlertRecord, NewAlert, ALERT_COLUMNS};
use super::batches::{event, load_batch, load_policy, load_record, not_found, to_details, BatchAndState};
use super::db::{args, Arg, Dialect};
use super::events;
use super::reads::IN_STATE_INDEX;
use super::records::{partition_columns, BatchRecord, DatasetRow, PartitionRecord, DATASET_COLUMNS};
use super::{AlertQuery, Backend, Page, Position, SqlStore};
use crate::changes::Change;
use crate::domain::alerts::{self as alert_rules, AlertKind};
use crate::domain::batch::{BatchState, EventKind};
use crate::domain::names::PartitionSpec;
use crate::domain::policy::DatasetPolicy;
use crate::domain::push::Target;
use crate::domain::readiness::Fitness;
use crate::error::{Error, Result};
use crate::telemetry::StoreGauges;

/// A data date past its deadline, with the partitions that are not fit to
/// read (and why).
pub(super) struct Overdue {
    pub dataset: String,
    pub policy: DatasetPolicy,
    pub dt: NaiveDate,
    pub due: DateTime<Utc>,
    pub blocked: Vec<(String, Fitness)>,
}

/// The running batches whose lease expired before `$1`, oldest first: a
/// seek of `batches_state`, whose condition it repeats
/// ([`IN_STATE_INDEX`]), to the running ones. `$1` is an instant bound as
/// [`Arg::Time`](super::db::Arg::Time).
pub fn expiry_sql(d: Dialect) -> String {
    format!(
        "SELECT batch_id, dataset FROM batches WHERE state = 'running' AND {IN_STATE_INDEX} AND {} < $1 \
         ORDER BY id",
        d.split_instant("lease_expires_at")
    )
}

impl SqlStore {
    /// Records that the task's write to the target committed.
    #[tracing::instrument(skip_all, fields(batch_id = %batch_id))]
    pub async fn record_written(&self, batch_id: &str, partitions: Vec<(PartitionSpec, i64)>) -> Result<BatchRecord> {
        let now = self.now();
        let (mut tx, b) = self.lock_batch(batch_id).await?;
        if b.state() != BatchState::Running {
            return Err(Error::conflict(
                "batch_not_running",
                format!("batch {batch_id} is {}, not running", b.state),
                to_details(BatchAndState { batch_id, state: b.state })?,
            ));
        }
        let mut c = tx.conn();
        for (i, (p, rows)) in partitions.iter().enumerate() {
            let n = c
                .exec(
                    "UPDATE task_produce_log SET rows_written = $3 WHERE batch_id = $1 AND target_partition = $2",
                    args![batch_id, p.as_str(), *rows],
                )
                .await?;
            if n == 0 {
                return Err(Error::invalid_code(
                    "unknown_partition",
                    format!("partitions[{i}].partition"),
                    format!("{p} is not one of the partitions batch {batch_id} declared"),
                ));
            }
        }
        c.exec("UPDATE batches SET written_at = $2 WHERE batch_id = $1", args![batch_id, now]).await?;
        let detail = events::Written {
            partitions: partitions
                .iter()
                .map(|(p, n)| events::WrittenPartition { partition: p.to_string(), rows_written: Some(*n) })
                .collect(),
        };
        event(&mut c, batch_id, EventKind::Written, now, detail).await?;
        let record = load_record(&mut c, batch_id).await?.ok_or_else(|| not_found(batch_id))?;
        tx.commit().await?;
        Ok(record)
    }

    /// Abandons every running batch whose lease has expired; returns their ids.
    #[tracing::instrument(skip_all)]
    pub async fn expire_leases(&self) -> Result<Vec<String>> {
        let now = self.now();
        let candidates: Vec<(String, String)> = {
            let mut r = self.read().await?;
            r.conn().all(&expiry_sql(self.dialect()), args![now]).await?
        };
        let mut abandoned = Vec::new();
        for (batch_id, dataset) in candidates {
            let mut tx = self.begin_write().await?;
            let mut c = tx.conn();
            // Another replica may have got here first, or a heartbeat came.
            let Some(b) = load_batch(&mut c, &batch_id).await? else {
                continue;
            };
            if b.state() != BatchState::Running || b.lease_expires_at >= now {
                continue;
            }
            let policy = load_policy(&mut c, &dataset).await?.policy();
            let (parts, decided) = self.abandon(&mut c, &b, None, &policy, now).await?;
            self.finish(tx, vec![Change { dataset, partitions: Some(parts) }]).await?;
            self.metrics.decided(&decided);
            abandoned.push(batch_id);
        }
        Ok(abandoned)
    }

    /// The data dates past their deadline that still have partitions not
    /// ready: what raises `deadline_missed` and what `partitions_late` counts.
    pub(super) async fn overdue(&self, now: DateTime<Utc>) -> Result<Vec<Overdue>> {
        let datasets: Vec<DatasetRow> = {
            let mut r = self.read().await?;
            let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE deadline IS NOT NULL ORDER BY name");
            r.conn().all(&sql, args![]).await?
        };
        let mut out = Vec::new();
        for ds in datasets {
            let policy = ds.policy();
            let Some(deadline) = &policy.deadline else {
                continue;
            };
            // Time zones are checked when a policy is written: one that no
            // longer parses was changed behind the service's back. Say so and
            // leave that dataset out, rather than place its deadline in UTC.
            let tz: chrono_tz::Tz = match policy.timezone.parse() {
                Ok(tz) => tz,
                Err(_) => {
                    tracing::error!(dataset = %ds.name, timezone = %policy.timezone, "stored time zone is not an IANA zone; deadline not checked");
                    continue;
                }
            };
            // Every data date with a partition not fit to read (the rule
            // `/ready` applies), and what holds it up.
            let rows: Vec<PartitionRecord> = {
                let mut r = self.read().await?;
                let sql = format!(
                    "SELECT {} FROM partitions WHERE dataset = $1 \
                     AND (state <> 'ready' OR invalidated_reason IS NOT NULL OR stale_upstream IS NOT NULL) \
                     ORDER BY dt, partition_spec",
                    partition_columns(self.dialect(), None)
                );
                r.conn().all(&sql, args![&ds.name]).await?
            };
            let mut late: BTreeMap<NaiveDate, Vec<(String, Fitness)>> = BTreeMap::new();
            for p in rows.into_iter().filter(|p| !p.fitness().is_ready()) {
                let fitness = p.fitness();
                late.entry(p.dt).or_default().push((p.partition, fitness));
            }
            for (dt, blocked) in late {
                let due = match deadline.instant(dt, tz) {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::warn!(dataset = %ds.name, %dt, error = %e, "cannot place the deadline");
                        continue;
                    }
                };
                if now >= due {
                    out.push(Overdue { dataset: ds.name.clone(), policy: policy.clone(), dt, due, blocked });
                }
            }
        }
        Ok(out)
    }

    /// Raises `deadline_missed` for data dates past their deadline; returns how many.
    #[tracing::instrument(skip_all)]
    pub async fn check_deadlines(&self) -> Result<usize> {
        let now = self.now();
        let mut raised = 0;
        for Overdue { dataset, policy, dt, due, blocked } in self.overdue(now).await? {
            let mut tx = self.begin_write().await?;
            let mut c = tx.conn();
            let advice = alert_rules::for_deadline(blocked[0].1);
            let names: Vec<String> = blocked.iter().map(|(p, _)| p.clone()).collect();
            let alert = NewAlert {
                kind: AlertKind::DeadlineMissed,
                dedup_key: format!("deadline_missed:{}:{dt}", dataset),
                severity: alert_rules::severity(policy.tier),
                task: None,
                dataset: dataset.clone(),
                dt: Some(dt),
                partitions: names.clone(),
                batch_id: None,
                stage: None,
                category: None,
                failing_checks: Vec::new(),
                owner: policy.owner.clone(),
                action: advice.action,
                retryable: advice.retryable,
                message: format!(
                    "{} {dt} was due by {} and is not published: {}",
                    dataset,
                    due.to_rfc3339(),
                    blocked.iter().map(|(p, s)| format!("{p} is {s}")).collect::<Vec<_>>().join(", ")
                ),
            };
            if alerts::raise(&mut c, alert, &self.webhooks(&policy), now).await?.is_some() {
                raised += 1;
            }
            tx.commit().await?;
        }
        Ok(raised)
    }

    /// The gauges `/metrics` reads from the database.
    pub async fn gauges(&self) -> Result<StoreGauges> {
        let now = self.now();
        let partitions_late = self.overdue(now).await?.iter().map(|o| o.blocked.len() as i64).sum();
        let mut r = self.read().await?;
        let mut c = r.conn();
        let waiting: Vec<(String, i64)> = c
            .all(
                "SELECT target, COUNT(*) FROM outbox WHERE delivered_at IS NULL AND given_up_at IS NULL GROUP BY target",
                args![],
            )
            .await?;
        let outbox_pending_by_target: Vec<(&'static str, i64)> =
            Target::ALL.iter().map(|t| (*t, waiting.iter().filter(|(w, _)| w == t).map(|(_, n)| n).sum())).collect();
        let outbox_pending = waiting.iter().map(|(_, n)| n).sum();
        let oldest: Option<(DateTime<Utc>,)> = c
            .opt(
                "SELECT created_at FROM outbox WHERE delivered_at IS NULL AND given_up_at IS NULL ORDER BY id LIMIT 1",
                args![],
            )
            .await?;
        drop(r);
        let oldest_pending_seconds = oldest.map_or(0.0, |(at,)| (now - at).num_milliseconds().max(0) as f64 / 1000.0);
        let (size, idle) = match &self.backend {
            Backend::Sqlite(p, _) => (p.size(), p.num_idle()),
            Backend::Postgres(p) => (p.size(), p.num_idle()),
        };
        let pool_idle = i64::try_from(idle).unwrap_or(i64::MAX);
        Ok(StoreGauges {
            partitions_late,
            outbox_pending,
            outbox_pending_by_target,
            oldest_pending_seconds,
            pool_idle,
            pool_in_use: (i64::from(size) - pool_idle).max(0),
        })
    }

    pub async fn list_alerts(&self, q: &AlertQuery) -> Result<Page<AlertRecord>> {
        let mut clauses = Vec::new();
        let mut a: Vec<Arg> = Vec::new();
        for (col, v) in [("state", &q.state), ("dataset", &q.dataset), ("severity", &q.severity), ("kind", &q.kind)] {
            if let Some(v) = v {
                a.push(v.into());
                clauses.push(format!("{col} = ${}", a.len()));
            }
        }
        if let Some(id) = q.after_id {
            a.push(id.into());
            clauses.push(format!("id < ${}", a.len()));
        }
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        let sql = format!("SELECT {ALERT_COLUMNS} FROM alerts {filter} ORDER BY id DESC LIMIT {}", q.limit + 1);
        let mut r = self.read().await?;
        let mut items: Vec<AlertRecord> = r.conn().all(&sql, a).await?;
        let more = items.len() as i64 > q.limit;
        items.truncate(q.limit as usize);
        let next = items.last().filter(|_| more).map(|x| Position::Id(x.id));
        Ok(Page { items, next })
    }
}
