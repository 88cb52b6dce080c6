//! Deciding a batch: commit (the checks, then publish or reject) and fail.
//! Each is one transaction under the write lock; a repeated request gets the
//! recorded answer.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;

use super::alerts::{self, NewAlert};
use super::batches::{
    batch_columns, event, load_batch, load_policy, load_record, not_found, refresh_partition, refresh_partitions,
    settle_logs,
};
use super::db::{args, placeholders, select_columns, Arg, Conn, Writes};
use super::events;
use super::records::{self, BatchRow, DatasetRow, DATASET_COLUMNS};
use super::staleness;
use super::{BatchRecord, Decided, Decision, FailReport, SqlStore};
use crate::changes::{Change, Wake};
use crate::domain::alerts::{self as alert_rules, Advice, AlertKind, OwnerOf};
use crate::domain::batch::{BatchState, EventKind, FailStage};
use crate::domain::checks::{self, CheckName, CommitEvidence, PartitionHistory};
use crate::domain::names::PartitionSpec;
use crate::domain::policy::DatasetPolicy;
use crate::domain::readiness::partition_state;
use crate::domain::staleness::Staleness;
use crate::error::{Error, Result};
use crate::telemetry::{Decided as Logged, FailedCheck, Outcome};

/// A partition a batch declared, and where it stands (`None`s when it has
/// no `partitions` row).
#[derive(sqlx::FromRow)]
struct Declared {
    target_partition: String,
    published_row_count: Option<i64>,
    version: Option<i64>,
    baseline_key: Option<String>,
    /// Why it is stale now, if it is.
    stale_upstream: Option<Json<Staleness>>,
    /// No later batch named the partition: this batch's row is its latest,
    /// so a publish decides its state (`refresh_partition`'s rule) without
    /// reading its history. Always so for a running batch (a start on its
    /// partitions abandons it first); read, not assumed.
    latest: bool,
    /// The batch read the partition it writes.
    reads_it: bool,
    /// The batch read any partition (the same in every row): only then can
    /// what it publishes be stale at birth. Its inputs are recorded at its
    /// start and never change.
    reads_any: bool,
    /// The dataset's row (the same in every row): its policy.
    #[sqlx(flatten)]
    dataset: DatasetRow,
    /// The batch's row (the same in every row).
    #[sqlx(flatten)]
    batch: BatchRow,
}

/// How many times in all a decision just stored is read back for its answer.
const READ_BACK_ATTEMPTS: u32 = 3;

/// `details` of a 409 `lease_expired`.
#[derive(Serialize)]
struct LeaseExpired<'a> {
    batch_id: &'a str,
    state: BatchState,
    lease_expired_at: DateTime<Utc>,
}

/// `details` of a 409 `superseded`.
#[derive(Serialize)]
struct SupersededBy<'a> {
    batch_id: &'a str,
    state: BatchState,
    superseded_by: Option<&'a str>,
}

/// `details` of a 409 `already_decided`.
#[derive(Serialize)]
struct AlreadyDecided<'a> {
    batch_id: &'a str,
    state: BatchState,
    /// `commit` or `fail`: which request decided it.
    decision: Option<&'a str>,
}

impl Decision {
    /// The decision a batch record taken at decision time records: its
    /// state is the outcome, and a rejection's failed checks are its checks
    /// that failed. The first answer and every replay are made here, from
    /// the same record, so they cannot differ.
    fn recorded(record: BatchRecord, replayed: bool) -> Result<Self> {
        let decided = match record.state {
            BatchState::Published => Decided::Published,
            BatchState::Failed => Decided::Failed,
            BatchState::Rejected => {
                Decided::Rejected { failed_checks: checks::failed(&record.checks).map(|c| c.name).collect() }
            }
            other => {
                return Err(anyhow::anyhow!(
                    "the recorded decision of batch {} has state {other}, which is not a decision",
                    record.batch_id
                )
                .into())
            }
        };
        Ok(Self { decided, record, replayed })
    }
}

impl SqlStore {
    #[tracing::instrument(skip_all, fields(batch_id = %batch_id, stage = %report.stage, replayed = tracing::field::Empty))]
    pub async fn fail_batch(&self, batch_id: &str, report: FailReport, fingerprint: String) -> Result<Decision> {
        let decision =
            super::retrying(&self.metrics, || self.do_fail(batch_id, report.clone(), fingerprint.clone())).await?;
        tracing::Span::current().record("replayed", decision.replayed);
        Ok(decision)
    }

    #[tracing::instrument(skip_all, fields(batch_id = %batch_id, replayed = tracing::field::Empty))]
    pub async fn commit_batch(
        &self,
        batch_id: &str,
        evidence: CommitEvidence,
        fingerprint: String,
    ) -> Result<Decision> {
        let began = std::time::Instant::now();
        let decision =
            super::retrying(&self.metrics, || self.do_commit(batch_id, evidence.clone(), fingerprint.clone())).await?;
        self.metrics.commit_took(began.elapsed().as_secs_f64());
        tracing::Span::current().record("replayed", decision.replayed);
        Ok(decision)
    }

    /// What to answer when a commit or fail arrives for a batch that is no
    /// longer running: the recorded answer if it is the same request again,
    /// else a conflict naming the state.
    async fn decided_answer(c: &mut Conn<'_>, b: &BatchRow, kind: &str, fingerprint: &str) -> Result<Decision> {
        let same = b.decision_fingerprint.as_deref().is_some_and(|f| records::same_request(f, fingerprint));
        if b.decision_kind.as_deref() == Some(kind) && same {
            return Self::replay(c, b).await;
        }
        let state = b.state();
        if state == BatchState::Abandoned && b.superseded_by.is_none() {
            return Err(Error::conflict(
                "lease_expired",
                format!(
                    "batch {}'s lease expired at {} without a heartbeat; it was abandoned",
                    b.batch_id,
                    b.lease_expires_at.to_rfc3339()
                ),
                LeaseExpired { batch_id: &b.batch_id, state, lease_expired_at: b.lease_expires_at },
            ));
        }
        if state == BatchState::Abandoned {
            return Err(Error::conflict(
                "superseded",
                format!(
                    "batch {}'s lease expired and batch {} started on its partitions",
                    b.batch_id,
                    b.superseded_by.as_deref().unwrap_or("?")
                ),
                SupersededBy { batch_id: &b.batch_id, state, superseded_by: b.superseded_by.as_deref() },
            ));
        }
        let by = b.decision_kind.as_deref().unwrap_or("decision");
        let how = if kind == "fail" && matches!(state, BatchState::Published | BatchState::Superseded) {
            "its commit went through, so its data stays ready; this fail is kept in its history, and a repair \
             plan shows the partition as committed_unacknowledged"
                .to_owned()
        } else if by == kind {
            format!("by an earlier {by} with another body; repeat that {by} exactly to get its answer again")
        } else {
            format!("by a {by}; a {kind} can no longer change it")
        };
        Err(Error::conflict(
            "already_decided",
            format!("batch {} is already {state} ({how})", b.batch_id),
            AlreadyDecided { batch_id: &b.batch_id, state, decision: b.decision_kind.as_deref() },
        ))
    }

    /// The answer a decision gave, again. Rows decided before issue 14 keep
    /// that answer (`decision_body`); since then it is rebuilt from the
    /// batch as it is now, as it was when decided ([`as_decided`]).
    async fn replay(c: &mut Conn<'_>, b: &BatchRow) -> Result<Decision> {
        let (body,): (Option<Json<serde_json::Value>>,) =
            c.one("SELECT decision_body FROM batches WHERE batch_id = $1", args![&b.batch_id]).await?;
        let record = match body {
            // The record as it was answered. (`decision_status` is no longer
            // written: the status is the HTTP layer's; rows decided before
            // carry it, and a rejection's body an `error`, which is ignored.)
            Some(Json(body)) => serde_json::from_value(body)
                .map_err(|e| anyhow::anyhow!("recorded decision of batch {}: {e}", b.batch_id))?,
            None => as_decided(load_record(c, &b.batch_id).await?.ok_or_else(|| not_found(&b.batch_id))?)?,
        };
        Decision::recorded(record, true)
    }

    /// The decision just taken and committed, made from the batch's record
    /// exactly as a replay makes it again ([`as_decided`] undoes whatever
    /// came after it). Read after the `COMMIT`, on a reader: the statements
    /// of a whole record are not spent holding the write lock.
    ///
    /// The decision is stored by then, so a failed read must not say
    /// "nothing was changed": it is tried again a few times (a reader can be
    /// briefly unavailable), and then answered 503 `answer_unavailable`,
    /// which says the decision stands and the same request gets its answer.
    async fn record_decision(&self, batch_id: &str) -> Result<Decision> {
        let pause = |attempt: u32| std::time::Duration::from_millis(50 * u64::from(attempt));
        let what = "cannot read back a decision just stored";
        super::with_attempts(what, READ_BACK_ATTEMPTS, |_| true, pause, || self.read_decision(batch_id)).await.map_err(
            |e| Error::Unanswered {
                message: format!(
                    "batch {batch_id} was decided and the decision is stored, but reading its answer back \
                     failed; repeat the same request to get it"
                ),
                cause: format!("{e:?}"),
            },
        )
    }

    async fn read_decision(&self, batch_id: &str) -> Result<Decision> {
        let mut r = self.read().await?;
        let record = load_record(&mut r.conn(), batch_id).await?.ok_or_else(|| not_found(batch_id))?;
        Decision::recorded(as_decided(record)?, false)
    }

    async fn do_commit(&self, batch_id: &str, evidence: CommitEvidence, fingerprint: String) -> Result<Decision> {
        let now = self.now();
        let mut tx = self.begin_write_for_batch(batch_id).await?;
        let mut c = tx.conn();
        // The batch, its declared partitions with their standing, and the
        // policy, in one statement under the write lock.
        let sql = format!(
            "SELECT l.target_partition, p.published_row_count, p.version, p.baseline_key, p.stale_upstream, \
               NOT EXISTS (SELECT 1 FROM task_produce_log n WHERE n.target_table = b.dataset \
                 AND n.target_partition = l.target_partition AND n.batch_seq > l.batch_seq) AS latest, \
               EXISTS (SELECT 1 FROM batch_inputs i WHERE i.batch_id = $1 AND i.input_dataset = b.dataset \
                 AND i.input_partition = l.target_partition) AS reads_it, \
               EXISTS (SELECT 1 FROM batch_inputs a WHERE a.batch_id = $1) AS reads_any, {}, {} \
             FROM task_produce_log l JOIN batches b ON b.batch_id = l.batch_id JOIN datasets d ON d.name = b.dataset \
             LEFT JOIN partitions p ON p.dataset = b.dataset AND p.partition_spec = l.target_partition \
             WHERE l.batch_id = $1 ORDER BY l.target_partition",
            select_columns(c.dialect(), Some("d"), DATASET_COLUMNS, &[]),
            batch_columns(c.dialect(), Some("b"))
        );
        let standing: Vec<Declared> = c.all(&sql, args![batch_id]).await?;
        let b = match standing.first() {
            Some(d) => d.batch.clone(),
            // Every batch declares a partition; one without log rows is
            // read alone.
            None => load_batch(&mut c, batch_id).await?.ok_or_else(|| not_found(batch_id))?,
        };
        if b.state() != BatchState::Running {
            return Self::decided_answer(&mut c, &b, "commit", &fingerprint).await;
        }
        let policy = match standing.first() {
            Some(d) => d.dataset.policy(),
            None => load_policy(&mut c, &b.dataset).await?.policy(),
        };
        let mut declared = Vec::with_capacity(standing.len());
        let mut history = BTreeMap::new();
        for d in &standing {
            let p = &d.target_partition;
            let spec = PartitionSpec::parse(p).map_err(|e| anyhow::anyhow!("stored partition {p:?}: {e}"))?;
            let (Some(version), Some(baseline_key)) = (d.version, &d.baseline_key) else {
                return Err(
                    anyhow::anyhow!("batch {batch_id} declares partition {p:?}, which has no partitions row").into()
                );
            };
            let baseline = records::baseline(&mut c, &b.dataset, baseline_key, b.dt, policy.baseline_periods).await?;
            history.insert(
                spec.clone(),
                PartitionHistory {
                    published_row_count: if version > 0 { d.published_row_count } else { None },
                    baseline,
                },
            );
            declared.push(spec);
        }
        let verdict = checks::evaluate(&policy, &declared, &history, &evidence);

        // One version of each row this decision writes: the batch's row
        // with its state, and on a publish each partition's log row with its
        // counts, version and status together.
        let state = if verdict.passed { BatchState::Published } else { BatchState::Rejected };
        let mut w = Writes::default();
        let dialect = c.dialect();
        w.push(
            format!(
                "UPDATE batches SET marker = $2, source = $3, checks = $4, decision_kind = 'commit', decision_fingerprint = $5, \
                   state = $6, {}, published_in_row = $8 WHERE batch_id = $1",
                dialect.set_instant("decided_at", "$7")
            ),
            args![
                batch_id,
                evidence.marker.clone(),
                evidence.source.as_ref().map(Json),
                c.dialect().packed(&checks::Stored {
                    checks: &verdict.checks,
                    record: &checks::Recorded::of_commit(&declared, &evidence)
                }),
                records::fingerprint(&fingerprint),
                state.as_str(),
                dialect.instant(now),
                // A publish's `committed` event is the row's (migration 0013).
                verdict.passed
            ],
        );

        let mut ripple = self.ripple();
        let mut announced = None;
        let changed = if verdict.passed {
            // Passed: `partitions_complete` blocks in every tier, so the
            // evidence names each declared partition once.
            let mut publishing = Vec::with_capacity(evidence.partitions.len());
            for p in &evidence.partitions {
                let d = standing.iter().find(|d| d.target_partition == p.partition.as_str()).ok_or_else(|| {
                    anyhow::anyhow!("batch {batch_id} published undeclared partition {}", p.partition)
                })?;
                // Only a publish moves a partition's version, and this batch's
                // dataset is this writer's until it ends: the version it
                // publishes is the one read above, plus one (the publishing
                // UPDATE below checks it).
                let version = d.version.unwrap_or_default() + 1;
                publishing.push((p, d, version));
            }
            // With the batch's row (which gives back its committed event) and
            // each partition's log row with its counts, version and status:
            // the batch's own rows, which no other writer touches, written
            // before the feed's lock, so that PostgreSQL's publishes hold it
            // that much less.
            for (p, _, version) in &publishing {
                w.push(
                    "UPDATE task_produce_log SET rows_written = $3, row_count = $4, distinct_keys = $5, null_keys = $6, metrics = $7, \
                       version = $8, status = $9, finish_time = $10 WHERE batch_id = $1 AND target_partition = $2",
                    args![
                        batch_id, p.partition.as_str(), p.rows_written, p.row_count, p.distinct_keys, p.null_keys, Json(&p.metrics),
                        *version, state.as_str(), now
                    ],
                );
            }
            c.exec_writes(w).await?;
            // The publish's own change, known already: its notice goes now,
            // not under the lock.
            let declared: Vec<String> = standing.iter().map(|d| d.target_partition.clone()).collect();
            let change = Change { dataset: b.dataset.clone(), partitions: Some(declared.clone()) };
            announced = self.announce_and_lock_feed(&mut c, change, &mut ripple).await?;
            // A batch of one partition that it does not read: nothing else in
            // this transaction reads the partition's invalidation or staleness
            // before its publish is judged (`staleness::Published::cleared`),
            // so the publishing UPDATE clears them.
            let clears = matches!(standing.as_slice(), [only] if !only.reads_it);
            // Its state and batch, by the rule `refresh_partition` applies to
            // its history, whose latest row is this publish's.
            let ready = partition_state(Some(state), true);
            let mut published = Vec::new();
            for (p, d, expected) in publishing {
                let mut set = String::new();
                let mut values = args![&b.dataset, p.partition.as_str(), batch_id, p.row_count, dialect.instant(now)];
                if d.latest {
                    set.push_str(&format!(", state = $6, batch_id = $3, {}", dialect.set_instant("updated_at", "$5")));
                    values.extend(args![ready]);
                }
                if clears {
                    set.push_str(", invalidated_reason = NULL, invalidated_at = NULL, stale_upstream = NULL");
                }
                // The earlier publisher comes back as the new
                // `prev_published_batch_id` (SET reads the row as it was).
                let (version, prev): (i64, Option<String>) = c
                    .one(
                        &format!(
                            "UPDATE partitions SET version = version + 1, published_batch_id = $3, published_row_count = $4, \
                               {}, prev_published_batch_id = published_batch_id, \
                               prev_published_row_count = published_row_count{set} \
                             WHERE dataset = $1 AND partition_spec = $2 RETURNING version, prev_published_batch_id",
                            dialect.set_instant("published_at", "$5")
                        ),
                        values,
                    )
                    .await?;
                if version != expected {
                    // Rolled back with the rest: the log rows never say a
                    // version the partition does not have.
                    return Err(anyhow::anyhow!(
                        "{} {} reached version {version} under batch {batch_id}'s publish, which wrote version {expected} \
                         in its log: another writer moved it",
                        b.dataset,
                        p.partition
                    )
                    .into());
                }
                if let Some(prev) = prev {
                    supersede(&mut c, &prev, p.partition.as_str(), batch_id, now).await?;
                }
                published.push((p.partition.as_str(), version, d));
            }
            // A partition a later batch also named (so never while this one
            // runs) has its state from its whole history, as a fail's has.
            let mut states = BTreeMap::new();
            for d in standing.iter().filter(|d| !d.latest) {
                states.insert(
                    d.target_partition.as_str(),
                    refresh_partition(&mut c, &b.dataset, &d.target_partition, now).await?,
                );
            }
            for (partition, version, d) in published {
                let publish = staleness::Published {
                    dataset: &b.dataset,
                    partition,
                    batch_id,
                    version,
                    state: states.get(partition).copied().unwrap_or(ready),
                    cleared: clears.then_some(d.stale_upstream.is_some()),
                    read_inputs: d.reads_any,
                };
                staleness::on_published(&mut c, publish, &policy, now, &mut ripple).await?;
            }
            alerts::resolve_ready(&mut c, &b.dataset, b.dt, now).await?;
            declared
        } else {
            // Each log row written once, with its counts and its status
            // together. The evidence may name a partition twice (that is one
            // reason to reject it): the last report of it counts, and the
            // log rows stay disjoint, as one statement needs them.
            let mut named = BTreeSet::new();
            for p in evidence.partitions.iter().rev() {
                if !named.insert(p.partition.as_str()) {
                    continue;
                }
                w.push(
                    "UPDATE task_produce_log SET rows_written = $3, row_count = $4, distinct_keys = $5, null_keys = $6, metrics = $7, \
                       status = $8, finish_time = $9 WHERE batch_id = $1 AND target_partition = $2",
                    args![
                        batch_id, p.partition.as_str(), p.rows_written, p.row_count, p.distinct_keys, p.null_keys, Json(&p.metrics),
                        state.as_str(), now
                    ],
                );
            }
            // The declared partitions it did not report.
            let mut rest = args![batch_id, state.as_str(), now];
            let unreported = if named.is_empty() {
                String::new()
            } else {
                let list = placeholders(rest.len() + 1, named.len());
                rest.extend(named.iter().map(|p| Arg::from(*p)));
                format!(" AND target_partition NOT IN ({list})")
            };
            w.push(
                format!("UPDATE task_produce_log SET status = $2, finish_time = $3 WHERE batch_id = $1{unreported}"),
                rest,
            );
            c.exec_writes(w).await?;
            let changed = refresh_partitions(&mut c, &b, now).await?;
            let failed: Vec<CheckName> = verdict.failed_checks().map(|c| c.name).collect();
            let names: Vec<&str> = failed.iter().map(|c| c.as_str()).collect();
            let detail = events::Committed::Rejected { failed_checks: failed.clone() };
            event(&mut c, batch_id, EventKind::Committed, now, detail).await?;
            let advice = alert_rules::for_rejection(verdict.checks.iter().map(|c| (c.name, c.status)));
            let message = format!("batch {batch_id} was rejected: {} failed", names.join(", "));
            let alert = NewAlert {
                stage: Some(FailStage::Verify),
                failing_checks: verdict.failed_checks().cloned().collect(),
                owner: owner_for(&mut c, advice, &b, &policy).await?,
                ..NewAlert::about_batch(AlertKind::Rejected, &b, &policy, changed.clone(), advice, message)
            };
            alerts::raise(&mut c, alert, &self.webhooks(&policy), now).await?;
            changed
        };

        let logged = Logged {
            batch_id: batch_id.to_owned(),
            dataset: b.dataset.clone(),
            tier: policy.tier,
            partitions: changed.clone(),
            outcome: if verdict.passed { Outcome::Published } else { Outcome::Rejected },
            failed_checks: verdict.failed_checks().map(FailedCheck::from).collect(),
        };
        let mut all = vec![Change { dataset: b.dataset.clone(), partitions: Some(changed) }];
        all.extend(ripple.changes);
        self.finish_announced(tx, all, Wake::Waiters, announced).await?;
        self.names.learn(ripple.learned);
        self.metrics.decided(&logged);
        self.record_decision(batch_id).await
    }

    async fn do_fail(&self, batch_id: &str, report: FailReport, fingerprint: String) -> Result<Decision> {
        let now = self.now();
        let (mut tx, b) = self.lock_batch(batch_id).await?;
        if b.state() != BatchState::Running {
            let answer = Self::decided_answer(&mut tx.conn(), &b, "fail", &fingerprint).await;
            if answer.is_err() && matches!(b.state(), BatchState::Published | BatchState::Superseded) {
                // The task thinks it failed, but its commit went through: it
                // never heard the acknowledgement. Keep that in the history.
                let detail = events::Failed { stage: report.stage, category: report.category, message: report.message };
                event(&mut tx.conn(), batch_id, EventKind::FailAfterPublish, now, detail).await?;
                tx.commit().await?;
            }
            return answer;
        }
        let mut c = tx.conn();
        let d = c.dialect();
        c.exec(
            &format!(
                "UPDATE batches SET fail_stage = $2, fail_category = $3, fail_message = $4, decision_kind = 'fail', \
                   decision_fingerprint = $5, state = 'failed', {} WHERE batch_id = $1",
                d.set_instant("decided_at", "$6")
            ),
            args![
                batch_id,
                report.stage.as_str(),
                report.category.as_str(),
                report.message.clone(),
                records::fingerprint(&fingerprint),
                d.instant(now)
            ],
        )
        .await?;
        let changed = settle_logs(&mut c, &b, BatchState::Failed, now).await?;
        event(
            &mut c,
            batch_id,
            EventKind::Failed,
            now,
            events::Failed { stage: report.stage, category: report.category, message: report.message.clone() },
        )
        .await?;
        let policy = load_policy(&mut c, &b.dataset).await?.policy();
        let advice = alert_rules::for_failure(report.category, report.stage);
        let message = format!(
            "batch {batch_id} failed at {} ({}){}",
            report.stage,
            report.category,
            report.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
        );
        let alert = NewAlert {
            stage: Some(report.stage),
            category: Some(report.category),
            owner: owner_for(&mut c, advice, &b, &policy).await?,
            ..NewAlert::about_batch(AlertKind::Failed, &b, &policy, changed.clone(), advice, message)
        };
        alerts::raise(&mut c, alert, &self.webhooks(&policy), now).await?;
        let logged = Logged {
            batch_id: batch_id.to_owned(),
            dataset: b.dataset.clone(),
            tier: policy.tier,
            partitions: changed.clone(),
            outcome: Outcome::Failed { stage: report.stage, category: report.category },
            failed_checks: Vec::new(),
        };
        self.finish(tx, vec![Change { dataset: b.dataset.clone(), partitions: Some(changed) }]).await?;
        self.metrics.decided(&logged);
        self.record_decision(batch_id).await
    }
}

/// A batch's record as it was when its decision was answered, from its
/// record as it is now. After its decision a batch changes only in ways
/// undone here: a newer batch re-publishes its partitions (their status, the
/// batch's state and `superseded_by`, a `superseded` event), and a late fail
/// adds a `fail_after_publish` event; the decision's own event is its last
/// one until then. Nothing else of a decided batch is written again.
fn as_decided(mut record: BatchRecord) -> Result<BatchRecord> {
    let state = match record.state {
        BatchState::Published | BatchState::Superseded => BatchState::Published,
        state @ (BatchState::Rejected | BatchState::Failed) => state,
        other => {
            return Err(anyhow::anyhow!(
                "the recorded decision of batch {} has state {other}, which is not a decision",
                record.batch_id
            )
            .into())
        }
    };
    record.state = state;
    // Only a running batch is abandoned, the one way a batch gets
    // `superseded_by` before it is decided.
    record.superseded_by = None;
    for p in &mut record.partitions {
        p.status = state;
    }
    if let Some(events) = &mut record.events {
        if let Some(i) = events.iter().position(|e| matches!(e.kind(), EventKind::Committed | EventKind::Failed)) {
            events.truncate(i + 1);
        }
    }
    Ok(record)
}

/// Marks the earlier publisher of a partition superseded there; the batch as a
/// whole becomes `superseded` once none of its partitions is current.
async fn supersede(c: &mut Conn<'_>, prev: &str, partition: &str, by: &str, now: DateTime<Utc>) -> Result<()> {
    c.exec(
        "UPDATE task_produce_log SET status = 'superseded' WHERE batch_id = $1 AND target_partition = $2",
        args![prev, partition],
    )
    .await?;
    let (current,): (i64,) = c
        .one("SELECT COUNT(*) FROM task_produce_log WHERE batch_id = $1 AND status = 'published'", args![prev])
        .await?;
    if current == 0 {
        let n = c
            .exec("UPDATE batches SET state = 'superseded', superseded_by = $2 WHERE batch_id = $1 AND state = 'published'", args![prev, by])
            .await?;
        if n > 0 {
            event(c, prev, EventKind::Superseded, now, events::Superseded { by: by.to_owned() }).await?;
        }
    }
    Ok(())
}

/// Who should act: the dataset's owner, or for bad source data the owners
/// of the datasets the batch read (falling back to the dataset's owner when
/// it read nothing with an owner).
async fn owner_for(c: &mut Conn<'_>, advice: Advice, b: &BatchRow, policy: &DatasetPolicy) -> Result<Option<String>> {
    if advice.owner != OwnerOf::Upstream {
        return Ok(policy.owner.clone());
    }
    let owners: Vec<(String,)> = c
        .all(
            "SELECT DISTINCT d.owner FROM batch_inputs i JOIN datasets d ON d.name = i.input_dataset \
             WHERE i.batch_id = $1 AND d.owner IS NOT NULL ORDER BY d.owner",
            args![&b.batch_id],
        )
        .await?;
    Ok(if owners.is_empty() {
        policy.owner.clone()
    } else {
        Some(owners.into_iter().map(|(o,)| o).collect::<Vec<_>>().join(", "))
    })
}
