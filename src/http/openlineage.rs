//! `POST /api/v1/lineage`: OpenLineage `RunEvent`s, where Airflow's and
//! Spark's OpenLineage integrations post (`OPENLINEAGE_URL` plus the HTTP
//! transport's default endpoint `api/v1/lineage`).
//!
//! Every event is stored as received before anything else happens (an exact
//! repeat of a stored event is stored once, and keeps the latest answer), then
//! [`crate::domain::openlineage`] maps it onto the store calls `/v1/batches`
//! makes, so an OpenLineage batch goes through the same checks. The answer is
//! 200 for any JSON body: what the intake could not do is listed in
//! `warnings`, and the same answer is stored with the event, because
//! OpenLineage clients do not read answers.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};

use super::AppState;
use crate::api::{LineageAnswer, LineageBatch as BatchOutcome};
use crate::domain::batch::{BatchState, Trigger};
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::domain::openlineage::{EventType, RunEvent};
use crate::domain::policy::DatasetPolicy;
use crate::error::{Error, Result};
use crate::store::{BatchRecord, Decided, Decision, FailReport, LineageEvent, StartBatch};

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/lineage", post(intake))
}

/// OpenLineage sends no heartbeats, so a run's batch keeps the usual lease:
/// long enough for most runs, short enough that a run that died without a
/// `FAIL` does not block its retry for long.
const LEASE_SECONDS: i64 = crate::domain::batch::DEFAULT_LEASE_SECONDS;

/// One batch the event started, committed or failed (or found decided).
impl BatchOutcome {
    fn current(b: &BatchRecord) -> Self {
        Self { dataset: b.dataset.clone(), batch_id: b.batch_id.clone(), state: b.state, failed_checks: Vec::new() }
    }

    /// From what a commit or fail decided (or the recorded decision it replayed).
    fn decided(d: Decision) -> Self {
        let failed_checks = match d.decided {
            Decided::Rejected { failed_checks } => failed_checks,
            Decided::Published | Decided::Failed => Vec::new(),
        };
        Self { dataset: d.record.dataset, batch_id: d.record.batch_id, state: d.record.state, failed_checks }
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/lineage",
    tag = "openlineage",
    operation_id = "postLineageEvent",
    summary = "Receive an OpenLineage RunEvent",
    description = "Point an OpenLineage HTTP transport here: `OPENLINEAGE_URL` is the service's base URL (the transport's default endpoint is `api/v1/lineage`). Every event is stored as received, with the answer below.\n\nKeyed by `run.runId`, one batch per output dataset (Idempotency-Key `openlineage:<runId>:<dataset>`, `run_ref` the runId):\n- `START` starts a batch. Task: `job.name` with characters outside `[A-Za-z0-9_.-]` replaced by `_`. Dataset: the output's `name`, or, for a table named by its location (Spark), its `symlinks` `TABLE` identifier. Data date: `run.facets.nominalTime.nominalStartTime` in the dataset's `timezone` (a time without offset is read as wall-clock time there). Partitions: the `subset` output facet's `partition` condition (`k=v/…` from each partition's dimensions, in order, or its identifier), else `dt=<dt>`. The scope records the business window and the OpenLineage namespaces and names.\n- `COMPLETE` commits the run's batches through the same checks as `POST /v1/batches/{batch_id}/commit`, with marker `openlineage:<runId>`: `rows_written` from `outputStatistics.rowCount`, `row_count` from `dataQualityMetrics.rowCount` (each standing in for the other when only one is sent), `distinct_keys`/`null_keys` from the `columnMetrics` of the dataset's `unique_key` column, metrics from each column's `sum`. An event without counts, or whose counts cover several partitions, commits nothing: the batch stays running.\n- `FAIL` and `ABORT` fail all of the run's batches with stage `write`, category `unknown` and the `errorMessage` facet's message.\n- `RUNNING` and `OTHER` are recorded only.\n\nRepeats are idempotent: a repeated `START` names the same batch, a repeated `COMPLETE` or `FAIL` replays the decision. Whatever the intake cannot do (no outputs, no nominal time, no batch for the run, a batch in progress, a rejected commit) is answered 200 with `warnings`: OpenLineage clients do not read answers, and a rejected commit shows as the batch's state `rejected` with its failed checks.",
    request_body = crate::api::OpenLineageRunEvent,
    responses(
        (status = 200, description = "The event was stored; what it did to the registry.", body = crate::api::LineageAnswer),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn intake(State(app): State<AppState>, body: Bytes) -> Result<Json<LineageAnswer>> {
    // Any JSON is taken, but not a repeated key, a NUL or an infinite number.
    super::strict_json::read(&body)?;
    let event = RunEvent::parse(&body).map_err(|e| Error::Request {
        status: 400,
        code: "malformed_json",
        message: format!("the body is not valid JSON: {e}"),
    })?;
    let recorded = app
        .store
        .record_lineage_event(&LineageEvent {
            run_id: event.run_id.clone(),
            event_type: event.event_type.clone(),
            job_namespace: event.job.namespace.clone(),
            job: event.job.name.clone(),
            body: event.body.clone(),
        })
        .await?;
    // An exact repeat (a client retrying) is stored once, but still processed:
    // the answer says what the registry holds now.
    let id = recorded.id;
    let mut intake = Intake { app: &app, event: &event, batches: Vec::new(), warnings: event.warnings.clone() };
    // Without a type or a run id, parsing has already said why nothing happens.
    if let (Some(kind), Some(run_id)) = (event.kind, event.run_id.as_deref()) {
        match kind {
            EventType::Start => intake.start().await?,
            EventType::Complete => intake.complete(run_id).await?,
            EventType::Fail | EventType::Abort => intake.fail(run_id).await?,
            EventType::Running | EventType::Other => {
                intake.warnings.push(format!("{} events change no batch; recorded only", kind.as_str()))
            }
        }
    }
    let answer = LineageAnswer {
        accepted: true,
        event_id: id,
        event_type: event.event_type.clone(),
        run_id: event.run_id.clone(),
        batches: intake.batches,
        warnings: intake.warnings,
    };
    let stored = serde_json::to_value(&answer).map_err(|e| Error::Internal(e.into()))?;
    app.store.set_lineage_outcome(id, &stored).await?;
    Ok(Json(answer))
}

/// What one event did, as it happens.
struct Intake<'a> {
    app: &'a AppState,
    event: &'a RunEvent,
    batches: Vec<BatchOutcome>,
    warnings: Vec<String>,
}

impl Intake<'_> {
    /// A refusal by the registry (a 4xx on `/v1/batches`) becomes a warning
    /// that starts with `what`; a server error ends the intake.
    fn refused<T>(&mut self, result: Result<T>, what: String) -> Result<Option<T>> {
        match result {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.status() < 500 => {
                self.warnings.push(format!("{what}: {e}"));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn policy(&self, dataset: &DatasetName) -> Result<DatasetPolicy> {
        Ok(self.app.store.get_dataset(dataset.as_str()).await?.map(|d| d.policy()).unwrap_or_default())
    }

    async fn start(&mut self) -> Result<()> {
        let event = self.event;
        if event.outputs.is_empty() {
            self.warnings.push("no output dataset to start a batch for".into());
        }
        for output in &event.outputs {
            let policy = self.policy(&output.dataset).await?;
            let plan = match event.start_plan(output, &policy) {
                Ok(plan) => plan,
                Err(w) => {
                    self.warnings.push(format!("{}: no batch started: {w}", output.dataset));
                    continue;
                }
            };
            // Inputs the registry does not know (a source system's tables)
            // are not batchgate's lineage and are left out; those it knows
            // are recorded even when not ready: the run already read them.
            let mut inputs = Vec::new();
            for (dataset, partition) in &plan.inputs {
                if self.app.store.get_dataset(dataset).await?.is_some() {
                    inputs.push((dataset.clone(), partition.clone()));
                }
            }
            let started = self.app.store.start_batch(StartBatch {
                task: plan.task,
                dataset: plan.dataset,
                dt: plan.dt,
                partitions: plan.partitions,
                scope: Some(plan.scope),
                trigger: Trigger::Scheduled,
                run_ref: Some(plan.run_ref),
                lease_seconds: LEASE_SECONDS,
                idempotency_key: Some(plan.idempotency_key),
                fingerprint: plan.fingerprint,
                wildcard_partitions: Vec::new(),
                cleaned_batch_ids: Vec::new(),
                allow_unready_inputs: !inputs.is_empty(),
                inputs,
                repair_id: None,
            });
            let what = format!("{}: no batch started", output.dataset);
            if let Some(s) = self.refused(started.await, what)? {
                self.batches.push(BatchOutcome {
                    dataset: output.dataset.to_string(),
                    batch_id: s.batch_id,
                    state: s.state,
                    failed_checks: Vec::new(),
                });
            }
        }
        Ok(())
    }

    async fn complete(&mut self, run_id: &str) -> Result<()> {
        let event = self.event;
        let started = self.app.store.lineage_batches(run_id).await?;
        if started.is_empty() {
            self.warnings.push(format!(
                "run {run_id} started no batch (its START never came or named no usable output): nothing to commit"
            ));
            return Ok(());
        }
        for batch in &started {
            let Some(output) = event.outputs.iter().find(|o| o.dataset.as_str() == batch.dataset) else {
                if batch.state == BatchState::Running {
                    self.warnings.push(format!(
                        "{}: batch {} is not among the event's outputs and stays running",
                        batch.dataset, batch.batch_id
                    ));
                }
                self.batches.push(BatchOutcome::current(batch));
                continue;
            };
            let policy = self.policy(&output.dataset).await?;
            let declared = batch
                .partitions
                .iter()
                .map(|p| {
                    PartitionSpec::parse(&p.partition)
                        .map_err(|e| anyhow::anyhow!("stored partition {:?}: {e}", p.partition))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let plan = match output.commit_plan(run_id, &declared, &policy) {
                Ok(plan) => plan,
                Err(w) => {
                    let hint = if batch.state == BatchState::Running {
                        format!(" (POST /v1/batches/{}/commit can commit it with per-partition stats)", batch.batch_id)
                    } else {
                        String::new()
                    };
                    self.warnings.push(format!(
                        "{}: batch {} is not committed and stays {}: {w}{hint}",
                        batch.dataset, batch.batch_id, batch.state
                    ));
                    self.batches.push(BatchOutcome::current(batch));
                    continue;
                }
            };
            self.warnings.extend(plan.warnings.iter().map(|w| format!("{}: {w}", batch.dataset)));
            let decision = self.app.store.commit_batch(&batch.batch_id, plan.evidence, plan.fingerprint).await;
            let what = format!("{}: batch {} not committed", batch.dataset, batch.batch_id);
            let outcome = match self.refused(decision, what)? {
                Some(d) => BatchOutcome::decided(d),
                None => BatchOutcome::current(batch),
            };
            self.batches.push(outcome);
        }
        for output in &event.outputs {
            if !started.iter().any(|b| b.dataset == output.dataset.as_str()) {
                self.warnings
                    .push(format!("{}: run {run_id} started no batch for it: nothing to commit", output.dataset));
            }
        }
        Ok(())
    }

    async fn fail(&mut self, run_id: &str) -> Result<()> {
        let started = self.app.store.lineage_batches(run_id).await?;
        if started.is_empty() {
            self.warnings.push(format!("run {run_id} started no batch: nothing to fail"));
        }
        let plan = self.event.fail_plan();
        for batch in &started {
            let report = FailReport { stage: plan.stage, category: plan.category, message: Some(plan.message.clone()) };
            let decision = self.app.store.fail_batch(&batch.batch_id, report, plan.fingerprint.clone()).await;
            let what = format!("{}: batch {} not failed", batch.dataset, batch.batch_id);
            let outcome = match self.refused(decision, what)? {
                Some(d) => BatchOutcome::decided(d),
                None => BatchOutcome::current(batch),
            };
            self.batches.push(outcome);
        }
        Ok(())
    }
}
