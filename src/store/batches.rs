//! The batch lifecycle in the registry: start, heartbeat, abandonment, and
//! the helpers the decisions share (`decide.rs` commits and fails). Each
//! operation is one transaction under the registry's write lock.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::types::Json;

use super::alerts::{self, NewAlert};
use super::db::{args, select_columns, Conn, Dialect, Tx, Writes};
use super::events;
use super::lineage::{self, UnreadyInput};
use super::records::{
    record_sql, record_with_events_sql, row_events, BatchRecord, BatchRow, DatasetRow, RecordRow, RecordWithEvents,
    Residue, DATASET_COLUMNS,
};
use super::{Lease, SqlStore, StartBatch, Started};
use crate::changes::Change;
use crate::domain::alerts::{self as alert_rules, AlertKind};
use crate::domain::batch::{leaves_residue, touches_table, BatchState, EventKind, FailStage};
use crate::domain::checks::CheckResult;
use crate::domain::names::BatchId;
use crate::domain::policy::{DatasetPolicy, WriteMode};
use crate::domain::readiness::{partition_state, PartitionState};
use crate::domain::retry;
use crate::error::{Error, Result};
use crate::telemetry::{Decided, Outcome};

pub(super) const BATCH_COLUMNS: &str = "id, batch_id, task, dataset, dt, seq, state, trigger_kind, run_ref, scope, idempotency_key, \
     request_fingerprint, lease_seconds, lease_expires_at, started_at, decided_at, marker, source, checks, fail_stage, \
     fail_category, fail_message, superseded_by, decision_kind, decision_fingerprint, written_at, allow_unready_inputs, repair_id, start_retry, published_in_row";

/// The instants of a batch's row, kept as numbers on SQLite (migration
/// 0022, [`Dialect::split_instant`]).
pub(super) const BATCH_INSTANTS: &[&str] = &["lease_expires_at", "started_at", "decided_at"];

/// [`BATCH_COLUMNS`] as a `SELECT` of `batches` (aliased `alias`) lists them.
pub(super) fn batch_columns(d: Dialect, alias: Option<&str>) -> String {
    select_columns(d, alias, BATCH_COLUMNS, BATCH_INSTANTS)
}

/// The number of a task's next batch of a date (`$3` task, `$4` date, as
/// the start's [`at_start`] binds them): its last plus one. Batches are never
/// deleted, and a start that rolls back frees its number, so the numbers are
/// gap-free. One index seek on `UNIQUE (task, dt, seq)` (the query-plan tests
/// read its plan).
pub const NEXT_SEQ_SQL: &str = "SELECT COALESCE(MAX(seq), 0) + 1 FROM batches WHERE task = $3 AND dt = $4";

pub(super) async fn load_batch(c: &mut Conn<'_>, batch_id: &str) -> Result<Option<BatchRow>> {
    let sql = format!("SELECT {} FROM batches WHERE batch_id = $1", batch_columns(c.dialect(), None));
    Ok(c.opt(&sql, args![batch_id]).await?)
}

pub(super) async fn load_record(c: &mut Conn<'_>, batch_id: &str) -> Result<Option<BatchRecord>> {
    let sql = record_with_events_sql(c.dialect(), "WHERE batch_id = $1");
    let Some(RecordWithEvents { record, events: Json(events) }) = c.opt(&sql, args![batch_id]).await? else {
        return Ok(None);
    };
    let marker = record.batch.marker.clone();
    let stored = events.into_iter().map(|e| e.into_event(marker.as_deref())).collect::<Result<Vec<_>>>()?;
    let events = row_events(&record.batch, stored)?;
    Ok(Some(BatchRecord::assemble(record, Some(events))?))
}

/// A batch's checks, rebuilt from its record as [`load_record`] shows them
/// (without reading its events); empty until it is committed.
pub(super) async fn load_checks(c: &mut Conn<'_>, batch_id: &str) -> Result<Vec<CheckResult>> {
    let sql = record_sql(c.dialect(), "WHERE batch_id = $1", "");
    let row = c.opt::<RecordRow>(&sql, args![batch_id]).await?;
    Ok(row.map(|row| BatchRecord::assemble(row, None)).transpose()?.map(|r| r.checks).unwrap_or_default())
}

pub(super) async fn event(
    c: &mut Conn<'_>,
    batch_id: &str,
    kind: EventKind,
    at: DateTime<Utc>,
    detail: impl serde::Serialize,
) -> Result<()> {
    let mut w = Writes::default();
    push_event(&mut w, batch_id, kind, at, detail);
    Ok(c.exec_writes(w).await?)
}

/// [`event`], added to writes that run together.
pub(super) fn push_event(
    w: &mut Writes,
    batch_id: &str,
    kind: EventKind,
    at: DateTime<Utc>,
    detail: impl serde::Serialize,
) {
    w.push(
        "INSERT INTO batch_events (batch_id, kind, at, detail) VALUES ($1, $2, $3, $4)",
        args![batch_id, kind, at, Json(detail)],
    );
}

/// An error's `details` from its typed form.
pub(super) fn to_details(details: impl Serialize) -> Result<Value> {
    Ok(serde_json::to_value(details).map_err(anyhow::Error::from)?)
}

/// `details` of `upstream_not_ready`.
#[derive(Serialize)]
struct UnreadyInputs<'a> {
    inputs: &'a [UnreadyInput],
}

/// A running batch that holds partitions a start names.
#[derive(Serialize)]
struct Running<'a> {
    batch_id: &'a str,
    partitions: &'a [String],
    lease_expires_at: DateTime<Utc>,
}

/// `details` of `batch_in_progress`: the first running batch, and all of them.
#[derive(Serialize)]
struct InProgress<'a> {
    batch_id: &'a str,
    partitions: &'a [String],
    lease_expires_at: DateTime<Utc>,
    running: Vec<Running<'a>>,
}

/// `details` of `batch_not_running` to a heartbeat.
#[derive(Serialize)]
struct NotRunning<'a> {
    batch_id: &'a str,
    state: BatchState,
    superseded_by: Option<&'a str>,
}

/// `details` naming a batch and its state.
#[derive(Serialize)]
pub(super) struct BatchAndState<'a> {
    pub batch_id: &'a str,
    pub state: BatchState,
}

pub(super) fn not_found(batch_id: &str) -> Error {
    Error::not_found("batch_not_found", format!("no batch {batch_id:?}"))
}

/// Recomputes a partition's standing from its history in `task_produce_log`;
/// returns the state it wrote.
pub(super) async fn refresh_partition(
    c: &mut Conn<'_>,
    dataset: &str,
    partition: &str,
    now: DateTime<Utc>,
) -> Result<PartitionState> {
    let history: Vec<(String, BatchState, Option<FailStage>)> = c
        .all(
            "SELECT l.batch_id, l.status, b.fail_stage FROM task_produce_log l JOIN batches b ON b.batch_id = l.batch_id \
             WHERE l.target_table = $1 AND l.target_partition = $2 ORDER BY l.batch_seq DESC",
            args![dataset, partition],
        )
        .await?;
    let (version,): (i64,) = c
        .one("SELECT version FROM partitions WHERE dataset = $1 AND partition_spec = $2", args![dataset, partition])
        .await?;
    let latest = history.iter().find(|(_, status, stage)| touches_table(*status, *stage));
    let state = partition_state(latest.map(|(_, s, _)| *s), version > 0);
    let batch_id = latest.or(history.first()).map(|(b, _, _)| b.clone());
    let d = c.dialect();
    c.exec(
        &format!(
            "UPDATE partitions SET state = $3, batch_id = $4, {} WHERE dataset = $1 AND partition_spec = $2",
            d.set_instant("updated_at", "$5")
        ),
        args![dataset, partition, state, batch_id, d.instant(now)],
    )
    .await?;
    Ok(state)
}

pub(super) async fn partitions_of(c: &mut Conn<'_>, batch_id: &str) -> Result<Vec<String>> {
    let rows: Vec<(String,)> = c
        .all(
            "SELECT target_partition FROM task_produce_log WHERE batch_id = $1 ORDER BY target_partition",
            args![batch_id],
        )
        .await?;
    Ok(rows.into_iter().map(|(p,)| p).collect())
}

/// Ends a batch: its state, its `task_produce_log` rows, its partitions' standing.
pub(super) async fn settle(
    c: &mut Conn<'_>,
    b: &BatchRow,
    state: BatchState,
    now: DateTime<Utc>,
) -> Result<Vec<String>> {
    let d = c.dialect();
    c.exec(
        &format!("UPDATE batches SET state = $2, {} WHERE batch_id = $1", d.set_instant("decided_at", "$3")),
        args![&b.batch_id, state.as_str(), d.instant(now)],
    )
    .await?;
    settle_logs(c, b, state, now).await
}

/// [`settle`] for a decision that wrote the batch's state and `decided_at`
/// with the rest of its row: one row version fewer (PostgreSQL keeps each
/// until vacuumed).
pub(super) async fn settle_logs(
    c: &mut Conn<'_>,
    b: &BatchRow,
    state: BatchState,
    now: DateTime<Utc>,
) -> Result<Vec<String>> {
    c.exec(
        "UPDATE task_produce_log SET status = $2, finish_time = $3 WHERE batch_id = $1",
        args![&b.batch_id, state.as_str(), now],
    )
    .await?;
    refresh_partitions(c, b, now).await
}

/// The standing of a batch's partitions, after its `task_produce_log` rows
/// were settled.
pub(super) async fn refresh_partitions(c: &mut Conn<'_>, b: &BatchRow, now: DateTime<Utc>) -> Result<Vec<String>> {
    let parts = partitions_of(c, &b.batch_id).await?;
    for p in &parts {
        refresh_partition(c, &b.dataset, p, now).await?;
    }
    Ok(parts)
}

/// A partition as a start finds it: its state and batch (`None` when no
/// batch ever named it), and the earlier batches that did not publish and
/// may have left rows in it (its residue), oldest first; with the number
/// the start's batch takes ([`NEXT_SEQ_SQL`]), so that a start does not pay
/// a round trip for it. One statement.
struct AtStart {
    standing: Option<(PartitionState, Option<String>)>,
    residue: Vec<(String, BatchState)>,
    next_seq: i64,
}

/// The statement of [`at_start`]: `$1` dataset, `$2` partition, `$3` task,
/// `$4` date.
static AT_START_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT p.state, p.batch_id, l.batch_id, l.status, b.fail_stage, ({NEXT_SEQ_SQL}) FROM (SELECT 1 AS one) k \
         LEFT JOIN partitions p ON p.dataset = $1 AND p.partition_spec = $2 \
         LEFT JOIN (task_produce_log l JOIN batches b ON b.batch_id = l.batch_id) \
           ON l.target_table = $1 AND l.target_partition = $2 \
           AND l.batch_seq > COALESCE((SELECT MAX(x.batch_seq) FROM task_produce_log x \
             WHERE x.target_table = $1 AND x.target_partition = $2 AND x.status IN ('published', 'superseded')), 0) \
         ORDER BY l.batch_seq"
    )
});

async fn at_start(c: &mut Conn<'_>, req: &StartBatch, partition: &str) -> Result<AtStart> {
    type Row = (Option<PartitionState>, Option<String>, Option<String>, Option<BatchState>, Option<FailStage>, i64);
    // One row for the partition (NULLs without one) times its residue rows
    // (NULLs without residue): the batches after its latest publish.
    let rows: Vec<Row> =
        c.all(&AT_START_SQL, args![req.dataset.as_str(), partition, req.task.as_str(), req.dt]).await?;
    let first = rows.first().ok_or_else(|| anyhow::anyhow!("the start's standing query returned no row"))?;
    let (standing, next_seq) = (first.0.map(|state| (state, first.1.clone())), first.5);
    let residue = rows
        .into_iter()
        .filter_map(|(_, _, batch_id, status, stage, _)| Some((batch_id?, status?, stage)))
        .filter(|(_, status, stage)| leaves_residue(*status, *stage))
        .map(|(b, s, _)| (b, s))
        .collect();
    Ok(AtStart { standing, residue, next_seq })
}

pub(super) async fn load_policy(c: &mut Conn<'_>, dataset: &str) -> Result<DatasetRow> {
    let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE name = $1");
    Ok(c.one(&sql, args![dataset]).await?)
}

impl SqlStore {
    #[tracing::instrument(skip_all, fields(dataset = %req.dataset, task = req.task.as_str(), dt = %req.dt, partitions = %super::partition_list(&req.partitions), batch_id = tracing::field::Empty))]
    pub async fn start_batch(&self, req: StartBatch) -> Result<Started> {
        let started = super::retrying(&self.metrics, || self.do_start(req.clone())).await?;
        tracing::Span::current().record("batch_id", started.batch_id.as_str());
        Ok(started)
    }

    async fn do_start(&self, req: StartBatch) -> Result<Started> {
        let now = self.now();
        let dataset = req.dataset.as_str();
        // The batch's number is the task's last of the date plus one (read
        // below): on PostgreSQL, starts of one task and date number their
        // batches one at a time, whatever datasets they write.
        let keys: Vec<String> = [super::dataset_key(dataset), format!("seq:{}:{}", req.task.as_str(), req.dt)]
            .into_iter()
            .chain(req.idempotency_key.iter().map(|k| format!("idempotency:{k}")))
            .collect();
        let mut tx = self.begin_write_under(&keys).await?;
        let mut c = tx.conn();

        if let Some(key) = &req.idempotency_key {
            let sql = format!("SELECT {} FROM batches WHERE idempotency_key = $1", batch_columns(c.dialect(), None));
            if let Some(b) = c.opt::<BatchRow>(&sql, args![key]).await? {
                if !super::records::same_request(&b.request_fingerprint, &req.fingerprint) {
                    return Err(Error::invalid_code(
                        "idempotency_key_reused",
                        "Idempotency-Key",
                        format!("Idempotency-Key {key:?} was used for batch {} with a different request", b.batch_id),
                    ));
                }
                let started = match b.started_in_row() {
                    Some(detail) => detail.ok(),
                    None => c
                        .opt::<(Option<Json<events::Started>>,)>(
                            "SELECT detail FROM batch_events WHERE batch_id = $1 AND kind = 'started'",
                            args![&b.batch_id],
                        )
                        .await?
                        .and_then(|(d,)| d)
                        .map(|Json(s)| s),
                };
                let (residue, retry) = started.and_then(|s| Some((s.residue, s.retry?))).ok_or_else(|| {
                    anyhow::anyhow!("batch {} has no started event with its retry advice", b.batch_id)
                })?;
                let inputs = lineage::inputs_of(&mut c, &b.batch_id).await?;
                return Ok(Started {
                    inputs,
                    state: b.state(),
                    batch_id: b.batch_id,
                    seq: b.seq,
                    lease_expires_at: b.lease_expires_at,
                    residue,
                    retry,
                    created: false,
                });
            }
        }

        let policy = super::datasets::ensure_dataset(&mut c, dataset, now).await?.policy();
        guard_scope(&policy, &req)?;
        guard_partition_key(&policy, &req)?;
        if let Some(repair) = req.repair_id {
            let found: Option<(i64,)> = c.opt("SELECT id FROM repairs WHERE id = $1", args![repair]).await?;
            if found.is_none() {
                return Err(Error::invalid("repair_id", format!("no repair plan {repair}")));
            }
        }
        let (inputs, unready) = lineage::resolve_inputs(&mut c, &req.inputs).await?;
        if !unready.is_empty() && !req.allow_unready_inputs {
            return Err(Error::conflict(
                "upstream_not_ready",
                format!(
                    "inputs not ready: {}",
                    unready
                        .iter()
                        .map(|u| format!("{} {} ({})", u.dataset, u.partition, u.reason))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                to_details(UnreadyInputs { inputs: &unready })?,
            ));
        }

        // Who else is writing these partitions, and what earlier attempts
        // may have left there?
        let mut blocking: BTreeMap<String, (BatchRow, Vec<String>)> = BTreeMap::new();
        let mut expired: BTreeMap<String, BatchRow> = BTreeMap::new();
        let mut found = Vec::with_capacity(req.partitions.len());
        let mut seq = None;
        for p in &req.partitions {
            let AtStart { standing, residue, next_seq } = at_start(&mut c, &req, p.as_str()).await?;
            // The same on every partition's row: nothing starts a batch of
            // this task and date meanwhile (PostgreSQL's `seq:` key above,
            // SQLite's one writer), and abandoning adds no batch.
            seq.get_or_insert(next_seq);
            found.push(residue);
            let Some((state, Some(running_id))) = standing else {
                continue;
            };
            if state != PartitionState::Running {
                continue;
            }
            let b = load_batch(&mut c, &running_id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("partition points at missing batch {running_id}"))?;
            if b.lease_expires_at > now {
                blocking.entry(running_id).or_insert_with(|| (b, Vec::new())).1.push(p.to_string());
            } else {
                expired.insert(running_id, b);
            }
        }
        if let Some((id, (b, parts))) = blocking.iter().next() {
            return Err(Error::conflict(
                "batch_in_progress",
                format!(
                    "batch {id} is running on {} and its lease runs until {}",
                    parts.join(", "),
                    b.lease_expires_at.to_rfc3339()
                ),
                to_details(InProgress {
                    batch_id: id,
                    partitions: parts,
                    lease_expires_at: b.lease_expires_at,
                    running: blocking
                        .iter()
                        .map(|(id, (b, ps))| Running {
                            batch_id: id,
                            partitions: ps,
                            lease_expires_at: b.lease_expires_at,
                        })
                        .collect(),
                })?,
            ));
        }

        let seq = seq.ok_or_else(|| Error::invalid("partitions", "a batch declares at least one partition"))?;
        let batch_id = BatchId::new(req.task.clone(), req.dt, seq).to_string();

        let mut changed: BTreeSet<String> = req.partitions.iter().map(|p| p.to_string()).collect();
        let mut abandoned = Vec::new();
        for old in expired.values() {
            let (parts, decided) = self.abandon(&mut c, old, Some(&batch_id), &policy, now).await?;
            changed.extend(parts);
            abandoned.push(decided);
        }

        // An abandoned batch is residue now: read again after abandoning.
        if !expired.is_empty() {
            found.clear();
            for p in &req.partitions {
                found.push(at_start(&mut c, &req, p.as_str()).await?.residue);
            }
        }
        let mut residue: BTreeMap<String, Residue> = BTreeMap::new();
        for (p, left) in req.partitions.iter().zip(found) {
            for (id, state) in left {
                residue
                    .entry(id.clone())
                    .or_insert_with(|| Residue { batch_id: id, state, partitions: vec![] })
                    .partitions
                    .push(p.to_string());
            }
        }
        let residue: Vec<Residue> = residue.into_values().collect();
        let residue_ids: Vec<String> = residue.iter().map(|r| r.batch_id.clone()).collect();
        let retry = retry::advise(
            policy.write_mode,
            dataset,
            !policy.unique_key.is_empty(),
            &residue_ids,
            &req.cleaned_batch_ids,
        )
        .map_err(|r| Error::conflict(r.code, r.message, r.details))?;

        let lease_expires_at = now + Duration::seconds(req.lease_seconds);
        let started = events::Started {
            trigger: req.trigger,
            run_ref: req.run_ref.clone(),
            lease_expires_at,
            residue: residue.clone(),
            retry: Some(retry.clone()),
            cleaned_batch_ids: Some(req.cleaned_batch_ids.clone()),
        };
        // An ordinary start's event is its row's (migration 0013).
        let start_retry = started.row_number(now, req.lease_seconds);
        let d = c.dialect();
        let (lease_col, lease_val) = d.insert_instant("lease_expires_at", "$12");
        let (started_col, started_val) = d.insert_instant("started_at", "$13");
        let (id,): (i64,) = c
            .one(
                &format!(
                    "INSERT INTO batches (batch_id, task, dataset, dt, seq, state, trigger_kind, run_ref, scope, idempotency_key, \
                       request_fingerprint, lease_seconds, {lease_col}, {started_col}, allow_unready_inputs, repair_id, start_retry) \
                     VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8, $9, $10, $11, {lease_val}, {started_val}, $14, $15, $16) \
                     RETURNING id"
                ),
                args![
                    &batch_id, req.task.as_str(), dataset, req.dt, seq, req.trigger.as_str(), req.run_ref.clone(), req.scope.clone(),
                    req.idempotency_key.clone(), super::records::fingerprint(&req.fingerprint), req.lease_seconds,
                    d.instant(lease_expires_at), d.instant(now), req.allow_unready_inputs, req.repair_id, start_retry.map(i64::from)
                ],
            )
            .await?;
        // The rest of the start's writes, which return nothing: together.
        let mut w = Writes::default();
        for p in &req.partitions {
            w.push(
                "INSERT INTO task_produce_log (batch_id, target_partition, task_name, dt, target_table, status, batch_seq, start_time) \
                 VALUES ($1, $2, $3, $4, $5, 'running', $6, $7)",
                args![&batch_id, p.as_str(), req.task.as_str(), req.dt, dataset, id, now],
            );
            let (updated_col, updated_val) = d.insert_instant("updated_at", "$6");
            w.push(
                format!(
                    "INSERT INTO partitions (dataset, partition_spec, dt, baseline_key, state, batch_id, {updated_col}) \
                     VALUES ($1, $2, $3, $4, 'running', $5, {updated_val}) \
                     ON CONFLICT (dataset, partition_spec) DO UPDATE SET state = 'running', batch_id = excluded.batch_id, \
                       dt = excluded.dt, baseline_key = excluded.baseline_key, {}",
                    d.set_instant("updated_at", &d.excluded_instant("updated_at"))
                ),
                args![dataset, p.as_str(), req.dt, p.baseline_key(req.dt), &batch_id, d.instant(now)],
            );
        }
        lineage::record_inputs(&mut w, &batch_id, &inputs);
        if start_retry.is_none() {
            push_event(&mut w, &batch_id, EventKind::Started, now, started.stored());
        }
        c.exec_writes(w).await?;

        // Running is not ready: no long-poll is answered by a start.
        let change = Change { dataset: dataset.to_owned(), partitions: Some(changed.into_iter().collect()) };
        self.finish_unready(tx, vec![change]).await?;
        self.batch_datasets.remember(&batch_id, dataset);
        for decided in &abandoned {
            self.metrics.decided(decided);
        }
        Ok(Started {
            batch_id,
            seq,
            state: BatchState::Running,
            lease_expires_at,
            residue,
            retry,
            inputs,
            created: true,
        })
    }

    /// The webhooks an alert of this dataset goes to.
    pub(super) fn webhooks(&self, policy: &DatasetPolicy) -> Vec<String> {
        self.receivers.webhook.iter().chain(policy.webhook_url.iter()).cloned().collect()
    }

    /// Marks a running batch abandoned (its lease ran out), by a newer batch
    /// starting on its partitions or by the lease scan, and raises the alert.
    pub(super) async fn abandon(
        &self,
        c: &mut Conn<'_>,
        b: &BatchRow,
        by: Option<&str>,
        policy: &DatasetPolicy,
        now: DateTime<Utc>,
    ) -> Result<(Vec<String>, Decided)> {
        if let Some(by) = by {
            c.exec("UPDATE batches SET superseded_by = $2 WHERE batch_id = $1", args![&b.batch_id, by]).await?;
        }
        let parts = settle(c, b, BatchState::Abandoned, now).await?;
        let detail = events::Abandoned { lease_expired_at: b.lease_expires_at, by: by.map(str::to_owned) };
        event(c, &b.batch_id, EventKind::Abandoned, now, detail).await?;
        let advice = alert_rules::for_abandoned();
        let written =
            if b.written_at.is_some() { "after its write committed" } else { "before it reported a committed write" };
        let message = format!(
            "batch {} stopped heartbeating; its lease expired at {} {written}",
            b.batch_id,
            b.lease_expires_at.to_rfc3339()
        );
        let alert = NewAlert::about_batch(AlertKind::Abandoned, b, policy, parts.clone(), advice, message);
        alerts::raise(c, alert, &self.webhooks(policy), now).await?;
        let decided = Decided {
            batch_id: b.batch_id.clone(),
            dataset: b.dataset.clone(),
            tier: policy.tier,
            partitions: parts.clone(),
            outcome: Outcome::Abandoned { superseded_by: by.map(str::to_owned) },
            failed_checks: Vec::new(),
        };
        Ok((parts, decided))
    }

    /// Takes the write lock and loads a batch under it.
    pub(super) async fn lock_batch(&self, batch_id: &str) -> Result<(Tx, BatchRow)> {
        let mut tx = self.begin_write_for_batch(batch_id).await?;
        let b = load_batch(&mut tx.conn(), batch_id).await?.ok_or_else(|| not_found(batch_id))?;
        Ok((tx, b))
    }

    #[tracing::instrument(skip_all, fields(batch_id = %batch_id))]
    pub async fn heartbeat(&self, batch_id: &str) -> Result<Lease> {
        let now = self.now();
        let (mut tx, b) = self.lock_batch(batch_id).await?;
        if b.state() != BatchState::Running {
            return Err(Error::conflict(
                "batch_not_running",
                format!("batch {batch_id} is {}, not running", b.state),
                to_details(NotRunning { batch_id, state: b.state, superseded_by: b.superseded_by.as_deref() })?,
            ));
        }
        let lease_expires_at = now + Duration::seconds(b.lease_seconds);
        let mut c = tx.conn();
        let d = c.dialect();
        c.exec(
            &format!("UPDATE batches SET {} WHERE batch_id = $1", d.set_instant("lease_expires_at", "$2")),
            args![batch_id, d.instant(lease_expires_at)],
        )
        .await?;
        record_heartbeat(&mut c, batch_id, now, lease_expires_at).await?;
        tx.commit().await?;
        Ok(Lease { batch_id: batch_id.to_owned(), state: BatchState::Running, lease_expires_at })
    }
}

/// Heartbeats are summed up in one `heartbeat` event per batch instead of one
/// event each (a long run beats thousands of times): the event is at the first
/// heartbeat, and its detail says `{"first_at", "last_at", "count",
/// "lease_expires_at"}` (the lease the last one set).
async fn record_heartbeat(
    c: &mut Conn<'_>,
    batch_id: &str,
    now: DateTime<Utc>,
    lease_expires_at: DateTime<Utc>,
) -> Result<()> {
    let last: Option<(i64, DateTime<Utc>, Option<Json<events::Heartbeats>>)> = c
        .opt(
            "SELECT id, at, detail FROM batch_events WHERE batch_id = $1 AND kind = 'heartbeat' ORDER BY id DESC LIMIT 1",
            args![batch_id],
        )
        .await?;
    let Some((id, at, detail)) = last else {
        let detail = events::Heartbeats {
            first_at: Some(now),
            last_at: Some(now),
            count: Some(1),
            lease_expires_at: Some(lease_expires_at),
        };
        return event(c, batch_id, EventKind::Heartbeat, now, detail).await;
    };
    // A heartbeat event written before the summary kept no count and no
    // first time: it was one, at the event's time.
    let (count, first_at) = detail.map_or((1, None), |j| (j.0.count(), j.0.first_at));
    let detail = events::Heartbeats {
        first_at: Some(first_at.unwrap_or(at)),
        last_at: Some(now),
        count: Some(count + 1),
        lease_expires_at: Some(lease_expires_at),
    };
    c.exec("UPDATE batch_events SET detail = $2 WHERE id = $1", args![id, Json(detail)]).await?;
    Ok(())
}

/// The overwrite guard: an `overwrite_partition` batch replaces whole
/// partitions, so it must name concrete ones, and not too many at once.
/// A dataset that reports to Airflow needs every key of its partition key
/// template in each partition a batch names.
fn guard_partition_key(policy: &DatasetPolicy, req: &StartBatch) -> Result<()> {
    if policy.airflow_asset.is_none() {
        return Ok(());
    }
    let template = policy
        .partition_key_template()
        .map_err(|e| anyhow::anyhow!("stored policy of dataset {:?}: {e}", req.dataset.as_str()))?;
    for (i, p) in req.partitions.iter().enumerate() {
        if let Some(key) = template.missing_key(p.as_str()) {
            return Err(Error::invalid(
                format!("partitions[{i}]"),
                format!(
                    "{:?} has no key {key:?}, which the dataset's partition_key names (its Airflow asset events need it)",
                    p.as_str()
                ),
            ));
        }
    }
    Ok(())
}

/// Other write modes take a wildcard as a malformed spec.
fn guard_scope(policy: &DatasetPolicy, req: &StartBatch) -> Result<()> {
    let overwrite = policy.write_mode == WriteMode::OverwritePartition;
    if let Some((i, raw)) = req.wildcard_partitions.first() {
        if overwrite {
            return Err(Error::invalid_code(
                "overwrite_scope_too_wide",
                format!("partitions[{i}]"),
                format!(
                    "{raw:?} is a wildcard: an overwrite_partition batch must name the concrete partitions it replaces"
                ),
            ));
        }
        return Err(Error::invalid_code(
            "invalid_partition",
            format!("partitions[{i}]"),
            format!("{raw:?} is a wildcard, not a partition"),
        ));
    }
    let n = req.partitions.len();
    if overwrite && n > policy.max_partitions_per_batch as usize {
        return Err(Error::invalid_code(
            "overwrite_scope_too_wide",
            "partitions",
            format!(
                "{n} partitions in one overwrite; the dataset allows at most {} (max_partitions_per_batch)",
                policy.max_partitions_per_batch
            ),
        ));
    }
    Ok(())
}
