//! Repair plans: the registry's evidence for the four questions before a
//! repair (scope, identity, retry boundary, downstream), and afterwards the
//! numbers that show it worked.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::batches::{load_checks, load_policy};
use super::db::{args, Conn};
use super::lineage::{inputs_of, walk, Direction, DOWNSTREAM_DEPTH};
use super::records::{self, fitness_of, load_partition};
use super::SqlStore;
use crate::domain::batch::{BatchState, FailStage};
use crate::domain::checks::CheckName;
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::domain::readiness::Fitness;
use crate::domain::repair::{
    boundary, progress, recommend, Attempt, DownstreamFacts, Identity, PartitionCounts, PartitionFacts, PlanEvidence,
    PublishedCounts, RepairAction, RepairBatch, RepairDownstream, RepairPartition, RepairPlan, RepairScope,
    RepairState, RetryBoundary, Run, ScopeInput,
};
use crate::error::{Error, Result};

/// A request for a repair plan.
#[derive(Debug, Clone)]
pub struct NewRepair {
    pub dataset: DatasetName,
    pub partitions: Vec<PartitionSpec>,
    pub action: RepairAction,
    pub reason: String,
}

/// A repair plan as a listing shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, sqlx::FromRow)]
pub struct RepairSummary {
    pub id: i64,
    pub dataset: String,
    pub partitions: Json<Vec<String>>,
    pub action: RepairAction,
    pub reason: String,
    pub created_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct CountsRow {
    row_count: Option<i64>,
    distinct_keys: Option<i64>,
    null_keys: Option<i64>,
    metrics: Option<Json<Value>>,
}

/// A batch's counts for one partition; `None` when it reported nothing for it.
async fn counts(c: &mut Conn<'_>, batch_id: &str, partition: &str) -> Result<Option<PartitionCounts>> {
    let row: Option<CountsRow> = c
        .opt(
            "SELECT row_count, distinct_keys, null_keys, metrics FROM task_produce_log WHERE batch_id = $1 AND target_partition = $2",
            args![batch_id, partition],
        )
        .await?;
    Ok(row.map(|n| PartitionCounts {
        row_count: n.row_count,
        distinct_keys: n.distinct_keys,
        null_keys: n.null_keys,
        metrics: n.metrics.map(|j| j.0),
    }))
}

impl SqlStore {
    /// Plans a repair from the registry's evidence.
    #[tracing::instrument(skip_all, fields(dataset = %r.dataset, partitions = %super::partition_list(&r.partitions), action = %r.action))]
    pub async fn create_repair(&self, r: NewRepair) -> Result<RepairPlan> {
        let now = self.now();
        let dataset = r.dataset.as_str();
        let mut tx = self.begin_write().await?;
        let mut c = tx.conn();
        let exists: Option<(String,)> = c.opt("SELECT name FROM datasets WHERE name = $1", args![dataset]).await?;
        if exists.is_none() {
            return Err(Error::not_found("dataset_not_found", format!("no dataset {dataset:?}")));
        }
        let policy = load_policy(&mut c, dataset).await?.policy();
        let mut partitions = Vec::new();
        let mut downstream: BTreeMap<(String, String), RepairDownstream> = BTreeMap::new();
        for p in &r.partitions {
            let p = p.as_str();
            let cur = load_partition(&mut c, dataset, p).await?;

            // 1. scope: dates, zone, what the current version read vs what is current now.
            let published_batch = cur.as_ref().and_then(|x| x.published_batch_id.clone());
            let mut inputs = Vec::new();
            if let Some(b) = &published_batch {
                for i in inputs_of(&mut c, b).await? {
                    let now_at = load_partition(&mut c, &i.dataset, &i.partition).await?;
                    inputs.push(ScopeInput {
                        current_version: now_at.as_ref().map_or(0, |x| x.version),
                        current_state: fitness_of(now_at.as_ref()),
                        dataset: i.dataset,
                        partition: i.partition,
                        read_version: i.version,
                    });
                }
            }
            let scope = RepairScope {
                partition: p.to_owned(),
                dt: cur.as_ref().map(|x| x.dt),
                timezone: policy.timezone.clone(),
                inputs,
            };

            // 2. identity: the key and the last published counts.
            let published = match &published_batch {
                Some(b) => {
                    let n = counts(&mut c, b, p).await?.unwrap_or_default();
                    Some(PublishedCounts::new(cur.as_ref().map_or(0, |x| x.version), b.clone(), n))
                }
                None => None,
            };
            let identity = Identity { unique_key: policy.unique_key.clone(), published };

            // 3. retry boundary, from the partition's attempts, newest first.
            let rows: Vec<(String, BatchState, Option<FailStage>, i64)> = c
                .all(
                    "SELECT l.batch_id, l.status, b.fail_stage, \
                       (SELECT COUNT(*) FROM batch_events e WHERE e.batch_id = l.batch_id AND e.kind = 'fail_after_publish') \
                     FROM task_produce_log l JOIN batches b ON b.batch_id = l.batch_id \
                     WHERE l.target_table = $1 AND l.target_partition = $2 ORDER BY l.batch_seq DESC",
                    args![dataset, p],
                )
                .await?;
            let attempts: Vec<Attempt> = rows
                .iter()
                .map(|(_, state, stage, late_fails)| Attempt {
                    state: *state,
                    stage: *stage,
                    failed_after_publish: *late_fails > 0,
                })
                .collect();

            // 4. downstream, transitively.
            let graph = walk(&mut c, dataset, p, Direction::Downstream, DOWNSTREAM_DEPTH).await?;
            let mut any_stale = false;
            for node in graph.nodes.iter().skip(1) {
                let stale = node.state == Fitness::StaleUpstream;
                any_stale |= stale;
                let key = (node.dataset.clone(), node.partition.clone());
                if let std::collections::btree_map::Entry::Vacant(slot) = downstream.entry(key) {
                    // A partition row exists only for a dataset some batch started on.
                    let pol = load_policy(&mut c, &node.dataset).await?.policy();
                    slot.insert(RepairDownstream {
                        dataset: node.dataset.clone(),
                        partition: node.partition.clone(),
                        owner: pol.owner,
                        write_mode: pol.write_mode,
                        state: node.state,
                        needs_recompute: stale || r.action != RepairAction::Resume,
                    });
                }
            }
            let b = boundary(&attempts, any_stale);
            let retry_boundary = RetryBoundary {
                state: b,
                latest_batch_id: rows.first().map(|r| r.0.clone()),
                recommended_action: recommend(b, policy.write_mode, r.action),
            };
            partitions.push(RepairPartition {
                partition: p.to_owned(),
                state: fitness_of(cur.as_ref()),
                scope,
                identity,
                retry_boundary,
            });
        }
        let evidence = PlanEvidence { partitions, downstream: downstream.into_values().collect() };
        let parts: Vec<&str> = r.partitions.iter().map(PartitionSpec::as_str).collect();
        let (id,): (i64,) = c
            .one(
                "INSERT INTO repairs (dataset, partitions, action, reason, plan, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                args![dataset, Json(&parts), r.action, &r.reason, Json(&evidence), now],
            )
            .await?;
        tx.commit().await?;
        Ok(RepairPlan {
            id,
            state: RepairState::Planned,
            dataset: dataset.to_owned(),
            action: r.action,
            reason: r.reason,
            created_at: now,
            partitions: evidence.partitions,
            downstream: evidence.downstream,
            progress: None,
        })
    }

    /// The most recent repair plans, newest first (without their progress).
    pub async fn list_repairs(&self, limit: i64) -> Result<Vec<RepairSummary>> {
        let mut r = self.read().await?;
        Ok(r.conn()
            .all(
                &format!(
                    "SELECT id, dataset, partitions, action, reason, created_at FROM repairs ORDER BY id DESC LIMIT {}",
                    limit.clamp(1, 1000)
                ),
                args![],
            )
            .await?)
    }

    /// The plan with its progress: the numbers per partition and what
    /// downstream still waits for (see [`crate::domain::repair::progress`]).
    #[tracing::instrument(level = "debug", skip_all, fields(repair_id = id))]
    pub async fn get_repair(&self, id: i64) -> Result<Option<RepairPlan>> {
        let mut r = self.read().await?;
        let mut c = r.conn();
        let row: Option<PlanRow> =
            c.opt("SELECT dataset, action, reason, plan, created_at FROM repairs WHERE id = $1", args![id]).await?;
        let Some(PlanRow { dataset, action, reason, plan: Json(evidence), created_at }) = row else {
            return Ok(None);
        };
        let baseline_periods = load_policy(&mut c, &dataset).await?.policy().baseline_periods;
        let mut facts = Vec::new();
        for planned in &evidence.partitions {
            let p = planned.partition.as_str();
            let linked: Vec<(String, BatchState)> = c
                .all(
                    "SELECT l.batch_id, l.status FROM task_produce_log l JOIN batches b ON b.batch_id = l.batch_id \
                     WHERE b.repair_id = $1 AND l.target_table = $2 AND l.target_partition = $3 ORDER BY l.batch_seq",
                    args![id, &dataset, p],
                )
                .await?;
            let cur = load_partition(&mut c, &dataset, p).await?;
            let mut runs = Vec::new();
            for (b, status) in &linked {
                if !matches!(status, BatchState::Published | BatchState::Superseded) {
                    continue;
                }
                let inputs =
                    inputs_of(&mut c, b).await?.into_iter().map(|i| (i.dataset, i.partition, i.version)).collect();
                // Rebuilt from the batch's record, as its checks are stored without it.
                let source_check =
                    load_checks(&mut c, b).await?.into_iter().find(|c| c.name == CheckName::SourceReconciliation);
                runs.push(Run { batch_id: b.clone(), counts: counts(&mut c, b, p).await?, inputs, source_check });
            }
            let baseline = match &cur {
                Some(x) => records::baseline(&mut c, &dataset, &x.baseline_key, x.dt, baseline_periods).await?,
                None => Vec::new(),
            };
            facts.push(PartitionFacts {
                partition: p.to_owned(),
                before: planned.identity.published.as_ref().and_then(|n| n.row_count),
                fitness: fitness_of(cur.as_ref()),
                published_batch_id: cur.as_ref().and_then(|x| x.published_batch_id.clone()),
                batches: linked.into_iter().map(|(batch_id, status)| RepairBatch { batch_id, status }).collect(),
                runs,
                baseline,
            });
        }
        let mut downstream = Vec::new();
        for d in &evidence.downstream {
            let cur = load_partition(&mut c, &d.dataset, &d.partition).await?;
            downstream.push(DownstreamFacts {
                dataset: d.dataset.clone(),
                partition: d.partition.clone(),
                fitness: fitness_of(cur.as_ref()),
                published_at: cur.as_ref().and_then(|x| x.published_at),
            });
        }
        let (state, progress) = progress(created_at, facts, downstream);
        Ok(Some(RepairPlan {
            id,
            state,
            dataset,
            action,
            reason,
            created_at,
            partitions: evidence.partitions,
            downstream: evidence.downstream,
            progress: Some(progress),
        }))
    }
}

#[derive(sqlx::FromRow)]
struct PlanRow {
    dataset: String,
    action: RepairAction,
    reason: String,
    plan: Json<PlanEvidence>,
    created_at: DateTime<Utc>,
}
