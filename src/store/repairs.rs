//! Repair plans: the registry's evidence for the four questions before a
//! repair (scope, identity, retry boundary, downstream), and afterwards the
//! numbers that show it worked.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::types::Json;

use super::batches::load_policy;
use super::db::{args, Conn};
use super::lineage::{inputs_of, walk, Direction, DOWNSTREAM_DEPTH};
use super::records::{fitness_of, load_partition};
use super::SqlStore;
use crate::domain::batch::{BatchState, FailStage};
use crate::domain::checks::median;
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::domain::readiness::Fitness;
use crate::domain::repair::{boundary, recommend, Attempt, RepairAction};
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
struct Counts {
    row_count: Option<i64>,
    distinct_keys: Option<i64>,
    null_keys: Option<i64>,
    metrics: Option<Json<Value>>,
}

/// A batch's counts for one partition.
async fn counts(c: &mut Conn<'_>, batch_id: &str, partition: &str) -> Result<Value> {
    let row: Option<Counts> = c
        .opt(
            "SELECT row_count, distinct_keys, null_keys, metrics FROM task_produce_log WHERE batch_id = $1 AND target_partition = $2",
            args![batch_id, partition],
        )
        .await?;
    Ok(match row {
        None => Value::Null,
        Some(n) => {
            json!({"row_count": n.row_count, "distinct_keys": n.distinct_keys, "null_keys": n.null_keys,
            "metrics": n.metrics.map(|j| j.0)})
        }
    })
}

impl SqlStore {
    pub(super) async fn do_create_repair(&self, r: NewRepair) -> Result<Value> {
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
        let mut downstream: BTreeMap<(String, String), Value> = BTreeMap::new();
        for p in &r.partitions {
            let p = p.as_str();
            let cur = load_partition(&mut c, dataset, p).await?;

            // 1. scope: dates, zone, what the current version read vs what is current now.
            let published_batch = cur.as_ref().and_then(|x| x.published_batch_id.clone());
            let mut inputs = Vec::new();
            if let Some(b) = &published_batch {
                for i in inputs_of(&mut c, b).await? {
                    let now_at = load_partition(&mut c, &i.dataset, &i.partition).await?;
                    inputs.push(json!({"dataset": i.dataset, "partition": i.partition, "read_version": i.version,
                        "current_version": now_at.as_ref().map_or(0, |x| x.version),
                        "current_state": fitness_of(now_at.as_ref())}));
                }
            }
            let scope = json!({"partition": p, "dt": cur.as_ref().map(|x| x.dt), "timezone": policy.timezone, "inputs": inputs});

            // 2. identity: the key and the last published counts.
            let published = match &published_batch {
                Some(b) => {
                    let mut v = counts(&mut c, b, p).await?;
                    v["version"] = json!(cur.as_ref().map_or(0, |x| x.version));
                    v["batch_id"] = json!(b);
                    v
                }
                None => Value::Null,
            };
            let identity = json!({"unique_key": policy.unique_key, "published": published});

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
                    let (owner, write_mode) = match load_policy_opt(&mut c, &node.dataset).await? {
                        Some(pol) => (pol.owner, pol.write_mode.to_string()),
                        None => (None, String::new()),
                    };
                    slot.insert(json!({"dataset": node.dataset, "partition": node.partition, "owner": owner, "write_mode": write_mode,
                            "state": node.state, "needs_recompute": stale || r.action != RepairAction::Resume}),
                    );
                }
            }
            let b = boundary(&attempts, any_stale);
            let retry_boundary = json!({"state": b, "latest_batch_id": rows.first().map(|r| &r.0),
                "recommended_action": recommend(b, policy.write_mode, r.action)});
            partitions
                .push(json!({"partition": p, "state": fitness_of(cur.as_ref()), "scope": scope, "identity": identity,
                "retry_boundary": retry_boundary}));
        }
        let mut plan = json!({"dataset": dataset, "action": r.action, "reason": r.reason, "created_at": now,
            "partitions": partitions, "downstream": downstream.into_values().collect::<Vec<_>>()});
        let parts: Vec<&str> = r.partitions.iter().map(PartitionSpec::as_str).collect();
        let (id,): (i64,) = c
            .one(
                "INSERT INTO repairs (dataset, partitions, action, reason, plan, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                args![dataset, json!(parts), r.action, &r.reason, plan.clone(), now],
            )
            .await?;
        tx.commit().await?;
        plan["id"] = json!(id);
        plan["state"] = json!("planned");
        Ok(plan)
    }

    pub(super) async fn do_list_repairs(&self, limit: i64) -> Result<Vec<RepairSummary>> {
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
    /// downstream still waits for.
    pub(super) async fn do_get_repair(&self, id: i64) -> Result<Option<Value>> {
        let mut r = self.read().await?;
        let mut c = r.conn();
        let row: Option<(String, Json<Value>, DateTime<Utc>)> =
            c.opt("SELECT dataset, plan, created_at FROM repairs WHERE id = $1", args![id]).await?;
        let Some((dataset, Json(mut plan), created_at)) = row else {
            return Ok(None);
        };
        let mut all_done = true;
        let mut any_batch = false;
        let mut progress = Vec::new();
        let planned: Vec<Value> = plan["partitions"].as_array().cloned().unwrap_or_default();
        for entry in &planned {
            let p = entry["partition"].as_str().unwrap_or_default().to_owned();
            let linked: Vec<(String, BatchState, Option<Json<Value>>)> = c
                .all(
                    "SELECT l.batch_id, l.status, b.checks FROM task_produce_log l JOIN batches b ON b.batch_id = l.batch_id \
                     WHERE b.repair_id = $1 AND l.target_table = $2 AND l.target_partition = $3 ORDER BY l.batch_seq",
                    args![id, &dataset, &p],
                )
                .await?;
            any_batch |= !linked.is_empty();
            let cur = load_partition(&mut c, &dataset, &p).await?;
            let published: Vec<&(String, BatchState, Option<Json<Value>>)> =
                linked.iter().filter(|(_, s, _)| matches!(s, BatchState::Published | BatchState::Superseded)).collect();

            // Rebuilt twice from the same inputs: the numbers must not move.
            let mut runs = Vec::new();
            for (b, _, _) in &published {
                let mut n = counts(&mut c, b, &p).await?;
                n["inputs"] = json!(inputs_of(&mut c, b)
                    .await?
                    .iter()
                    .map(|i| json!([i.dataset, i.partition, i.version]))
                    .collect::<Vec<_>>());
                runs.push(n);
            }
            let rebuilt_identically = (runs.len() >= 2).then(|| runs.windows(2).all(|w| w[0] == w[1]));

            let after = published.last();
            let after_counts = match after {
                Some((b, _, _)) => counts(&mut c, b, &p).await?,
                None => Value::Null,
            };
            let source = after
                .and_then(|(_, _, checks)| checks.as_ref())
                .and_then(|cs| {
                    cs.0.as_array().and_then(|a| a.iter().find(|c| c["name"] == "source_reconciliation").cloned())
                })
                .unwrap_or(Value::Null);
            let baseline = match &cur {
                Some(x) => {
                    let hist: Vec<(i64,)> = c
                        .all(
                            "SELECT published_row_count FROM partitions WHERE dataset = $1 AND baseline_key = $2 AND dt < $3 \
                               AND version > 0 AND published_row_count IS NOT NULL ORDER BY dt DESC LIMIT 7",
                            args![&dataset, &x.baseline_key, x.dt],
                        )
                        .await?;
                    median(&hist.iter().map(|(n,)| *n).collect::<Vec<_>>())
                }
                None => None,
            };
            let done = match (&cur, after) {
                (Some(x), Some((b, _, _))) => {
                    x.fitness().is_ready() && x.published_batch_id.as_deref() == Some(b.as_str())
                }
                _ => false,
            };
            all_done &= done;
            progress.push(json!({
                "partition": p,
                "state": fitness_of(cur.as_ref()),
                "done": done,
                "batches": linked.iter().map(|(b, s, _)| json!({"batch_id": b, "status": s})).collect::<Vec<_>>(),
                "row_count": {"before": entry["identity"]["published"]["row_count"], "after": after_counts["row_count"], "baseline": baseline},
                "unique_keys": {"distinct_keys": after_counts["distinct_keys"], "null_keys": after_counts["null_keys"], "row_count": after_counts["row_count"]},
                "metric_vs_source": source,
                "rebuilds": runs.len(),
                "rebuilt_identically": rebuilt_identically,
            }));
        }
        let mut downstream = Vec::new();
        for d in plan["downstream"].as_array().cloned().unwrap_or_default() {
            let (ds, p) = (d["dataset"].as_str().unwrap_or_default(), d["partition"].as_str().unwrap_or_default());
            let cur = load_partition(&mut c, ds, p).await?;
            let fitness = fitness_of(cur.as_ref());
            let recomputed =
                fitness.is_ready() && cur.as_ref().and_then(|x| x.published_at).is_some_and(|t| t >= created_at);
            all_done &= fitness.is_ready();
            // `stale`: the partition is `stale_upstream` now (before, it was
            // true for any partition not fit to read, `running` included).
            downstream.push(json!({"dataset": ds, "partition": p, "stale": fitness == Fitness::StaleUpstream,
                "recomputed": recomputed, "state": fitness}));
        }
        plan["id"] = json!(id);
        plan["state"] = json!(if all_done && any_batch {
            "complete"
        } else if any_batch {
            "in_progress"
        } else {
            "planned"
        });
        plan["progress"] = json!({"partitions": progress, "downstream": downstream});
        Ok(Some(plan))
    }
}

async fn load_policy_opt(c: &mut Conn<'_>, dataset: &str) -> Result<Option<crate::domain::policy::DatasetPolicy>> {
    let exists: Option<(String,)> = c.opt("SELECT name FROM datasets WHERE name = $1", args![dataset]).await?;
    Ok(match exists {
        Some(_) => Some(load_policy(c, dataset).await?.policy()),
        None => None,
    })
}
