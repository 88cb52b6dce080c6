//! Lineage in the registry: what each batch read, and how a new version or
//! an invalidation upstream makes the partitions built on the old data stale,
//! transitively. Every readiness change is written to the change feed in the
//! same transaction.

use std::collections::{BTreeSet, VecDeque};

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use sqlx::types::Json;

use super::alerts::{self, NewAlert};
use super::batches::load_policy;
use super::db::{args, Conn};
use super::events::ChangeDetail;
use super::outbox::{self, NewChange, Receivers};
use super::records::{fitness_of, load_partition, PartitionRecord};
use crate::api::InputRef;
use crate::changes::Change;
use crate::domain::alerts::{self as alert_rules, Action, AlertKind};
use crate::domain::readiness::{ChangeKind, Fitness};
use crate::domain::staleness::Staleness;
use crate::error::Result;

/// How far alerts and repair plans look for partitions built on others.
pub(super) const DOWNSTREAM_DEPTH: u32 = 20;

/// What a change to a partition set off: the partitions whose readiness
/// changed (for the change hub), and where alerts about them go.
pub(super) struct Ripple {
    pub changes: Vec<Change>,
    /// The service-wide receivers: alert webhook, CloudEvents, Airflow.
    pub receivers: Receivers,
}

/// An input of a batch, resolved to the version it will read.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct InputRecord {
    pub dataset: String,
    pub partition: String,
    /// The published version current at start; 0 when there was none.
    pub version: i64,
    pub batch_id: Option<String>,
}

/// An input that was not ready at start, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnreadyInput {
    pub dataset: String,
    pub partition: String,
    pub reason: Fitness,
    pub version: i64,
}

/// Resolves each input to its current published version; returns the inputs
/// and those of them that are not ready.
pub(super) async fn resolve_inputs(
    c: &mut Conn<'_>,
    inputs: &[(String, String)],
) -> Result<(Vec<InputRecord>, Vec<UnreadyInput>)> {
    let mut resolved = Vec::new();
    let mut unready = Vec::new();
    for (dataset, partition) in inputs {
        let s = load_partition(c, dataset, partition).await?;
        let (version, batch_id) = s.as_ref().map(|s| (s.version, s.published_batch_id.clone())).unwrap_or((0, None));
        let reason = fitness_of(s.as_ref());
        if !reason.is_ready() {
            unready.push(UnreadyInput { dataset: dataset.clone(), partition: partition.clone(), reason, version });
        }
        resolved.push(InputRecord { dataset: dataset.clone(), partition: partition.clone(), version, batch_id });
    }
    Ok((resolved, unready))
}

pub(super) async fn record_inputs(c: &mut Conn<'_>, batch_id: &str, inputs: &[InputRecord]) -> Result<()> {
    for i in inputs {
        c.exec(
            "INSERT INTO batch_inputs (batch_id, input_dataset, input_partition, input_version, input_batch_id) VALUES ($1, $2, $3, $4, $5)",
            args![batch_id, &i.dataset, &i.partition, i.version, i.batch_id.clone()],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn inputs_of(c: &mut Conn<'_>, batch_id: &str) -> Result<Vec<InputRecord>> {
    let rows: Vec<(String, String, i64, Option<String>)> = c
        .all(
            "SELECT input_dataset, input_partition, input_version, input_batch_id FROM batch_inputs WHERE batch_id = $1 \
             ORDER BY input_dataset, input_partition",
            args![batch_id],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|(dataset, partition, version, batch_id)| InputRecord { dataset, partition, version, batch_id })
        .collect())
}

/// Appends a readiness change to the feed, and queues it for the receivers
/// it is pushed to (in the same transaction).
#[allow(clippy::too_many_arguments)]
pub(super) async fn emit(
    c: &mut Conn<'_>,
    ripple: &Ripple,
    kind: ChangeKind,
    dataset: &str,
    partition: &str,
    version: i64,
    batch_id: Option<&str>,
    detail: ChangeDetail,
    now: DateTime<Utc>,
) -> Result<()> {
    let (id,): (i64,) = c
        .one(
            "INSERT INTO changes (kind, dataset, partition_spec, version, batch_id, at, detail) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             RETURNING id",
            args![kind, dataset, partition, version, batch_id, now, Json(&detail)],
        )
        .await?;
    let change = NewChange { id, kind: kind.as_str(), dataset, partition, version, batch_id, detail: &detail, at: now };
    outbox::on_change(c, ripple, change).await
}

/// Why a partition built from `input` at `built_on` is stale now, if it is.
fn staleness(input_dataset: &str, input_partition: &str, built_on: i64, now: &PartitionRecord) -> Option<Staleness> {
    Staleness::of(input_dataset, input_partition, built_on, now.standing(), now.version)
}

/// After a batch published `partition` at `version`: records the change,
/// clears an invalidation, decides whether the new version is itself stale
/// (it read an input that has moved on), and makes everything built on the
/// old version stale.
pub(super) async fn on_published(
    c: &mut Conn<'_>,
    dataset: &str,
    partition: &str,
    batch_id: &str,
    version: i64,
    now: DateTime<Utc>,
    ripple: &mut Ripple,
) -> Result<()> {
    let before = load_partition(c, dataset, partition).await?;
    let was_stale = before.as_ref().is_some_and(|s| s.stale_upstream.is_some());
    emit(
        c,
        ripple,
        if version == 1 { ChangeKind::Published } else { ChangeKind::Restated },
        dataset,
        partition,
        version,
        Some(batch_id),
        ChangeDetail::default(),
        now,
    )
    .await?;

    let mut stale = None;
    for input in inputs_of(c, batch_id).await? {
        if let Some(s) = load_partition(c, &input.dataset, &input.partition).await? {
            if let Some(why) = staleness(&input.dataset, &input.partition, input.version, &s) {
                stale = Some(why);
                break;
            }
        }
    }
    c.exec(
        "UPDATE partitions SET invalidated_reason = NULL, invalidated_at = NULL, stale_upstream = $3 WHERE dataset = $1 AND partition_spec = $2",
        args![dataset, partition, stale.clone().map(Json)],
    )
    .await?;
    match (&stale, was_stale) {
        (Some(why), _) => {
            emit(
                c,
                ripple,
                ChangeKind::Stale,
                dataset,
                partition,
                version,
                Some(batch_id),
                ChangeDetail::stale(why.clone()),
                now,
            )
            .await?
        }
        (None, true) => {
            emit(
                c,
                ripple,
                ChangeKind::FreshAgain,
                dataset,
                partition,
                version,
                Some(batch_id),
                ChangeDetail::default(),
                now,
            )
            .await?
        }
        (None, false) => {}
    }
    propagate(c, dataset, partition, now, ripple).await?;
    Ok(())
}

/// Takes a partition out of service until a new batch publishes it.
pub(super) async fn invalidate(
    c: &mut Conn<'_>,
    dataset: &str,
    partition: &str,
    reason: &str,
    now: DateTime<Utc>,
    ripple: &mut Ripple,
) -> Result<bool> {
    let Some(s) = load_partition(c, dataset, partition).await? else {
        return Ok(false);
    };
    c.exec(
        "UPDATE partitions SET invalidated_reason = $3, invalidated_at = $4, updated_at = $4 WHERE dataset = $1 AND partition_spec = $2",
        args![dataset, partition, reason, now],
    )
    .await?;
    emit(
        c,
        ripple,
        ChangeKind::Invalidated,
        dataset,
        partition,
        s.version,
        s.published_batch_id.as_deref(),
        ChangeDetail::invalidated(reason),
        now,
    )
    .await?;
    ripple.changes.push(Change { dataset: dataset.to_owned(), partitions: Some(vec![partition.to_owned()]) });
    propagate(c, dataset, partition, now, ripple).await?;
    Ok(true)
}

/// A partition whose current version read an upstream partition.
#[derive(sqlx::FromRow)]
struct Consumer {
    dataset: String,
    partition: String,
    /// The upstream version it read.
    built_on: i64,
    version: i64,
    batch_id: Option<String>,
    stale: Option<Json<Staleness>>,
    dt: NaiveDate,
}

/// The partitions whose current version read upstream partition ($1, $2),
/// run for every publish and invalidation. It starts from the input's rows in
/// `batch_inputs` and finds each reader by `partitions_published_batch`
/// (migration 0009): joined the other way round, it scanned every partition.
pub const CONSUMERS_SQL: &str =
    "SELECT d.dataset, d.partition_spec AS partition, i.input_version AS built_on, d.version, \
       d.published_batch_id AS batch_id, d.stale_upstream AS stale, d.dt \
     FROM batch_inputs i JOIN partitions d ON d.published_batch_id = i.batch_id \
     WHERE i.input_dataset = $1 AND i.input_partition = $2 ORDER BY d.dataset, d.partition_spec";

/// The partitions built on ($1, $2) by their published batch, or, while
/// nothing is published, by their current one (the downstream lineage graph,
/// which a failure's alert also walks). Two seeks instead of a join on
/// `COALESCE(published_batch_id, batch_id)`, which no index can serve; the
/// second tests "never published" in a form no index matches, so both
/// planners seek `partitions_batch` rather than every unpublished partition.
pub const DOWNSTREAM_SQL: &str = "SELECT d.dataset, d.partition_spec, i.input_version, i.batch_id FROM batch_inputs i \
       JOIN partitions d ON d.published_batch_id = i.batch_id \
       WHERE i.input_dataset = $1 AND i.input_partition = $2 \
     UNION ALL \
     SELECT d.dataset, d.partition_spec, i.input_version, i.batch_id FROM batch_inputs i \
       JOIN partitions d ON d.batch_id = i.batch_id AND COALESCE(d.published_batch_id, '') = '' \
       WHERE i.input_dataset = $1 AND i.input_partition = $2 \
     ORDER BY 1, 2";

/// Marks stale, transitively, every partition whose current version was
/// built on an older version of `root` (or on `root` while it is stale or
/// invalidated).
async fn propagate(
    c: &mut Conn<'_>,
    dataset: &str,
    partition: &str,
    now: DateTime<Utc>,
    ripple: &mut Ripple,
) -> Result<()> {
    let mut queue = VecDeque::from([(dataset.to_owned(), partition.to_owned())]);
    let mut seen = BTreeSet::new();
    while let Some((ds, p)) = queue.pop_front() {
        if !seen.insert((ds.clone(), p.clone())) {
            continue;
        }
        let Some(upstream) = load_partition(c, &ds, &p).await? else {
            continue;
        };
        let consumers: Vec<Consumer> = c.all(CONSUMERS_SQL, args![&ds, &p]).await?;
        for Consumer {
            dataset: cds,
            partition: cp,
            built_on,
            version: cversion,
            batch_id: cbatch,
            stale: cstale,
            dt: cdt,
        } in consumers
        {
            let Some(why) = staleness(&ds, &p, built_on, &upstream) else {
                continue;
            };
            if cstale.is_none() {
                c.exec(
                    "UPDATE partitions SET stale_upstream = $3, updated_at = $4 WHERE dataset = $1 AND partition_spec = $2",
                    args![&cds, &cp, Json(&why), now],
                )
                .await?;
                emit(
                    c,
                    ripple,
                    ChangeKind::Stale,
                    &cds,
                    &cp,
                    cversion,
                    cbatch.as_deref(),
                    ChangeDetail::stale(why.clone()),
                    now,
                )
                .await?;
                ripple.changes.push(Change { dataset: cds.clone(), partitions: Some(vec![cp.clone()]) });
                let policy = load_policy(c, &cds).await?.policy();
                let hooks: Vec<String> =
                    ripple.receivers.webhook.iter().chain(policy.webhook_url.iter()).cloned().collect();
                let alert = NewAlert {
                    kind: AlertKind::StaleDownstream,
                    dedup_key: format!("stale_downstream:{cds}:{cp}:{cversion}"),
                    severity: alert_rules::severity(policy.tier),
                    task: None,
                    dataset: cds.clone(),
                    dt: Some(cdt),
                    partitions: vec![cp.clone()],
                    batch_id: cbatch.clone(),
                    stage: None,
                    category: None,
                    failing_checks: Vec::new(),
                    owner: policy.owner.clone(),
                    action: Action::RecomputeDownstream,
                    retryable: true,
                    message: format!(
                        "{cds} {cp} version {cversion} was built on {ds} {p} version {built_on}, which is now {} (version {})",
                        why.cause,
                        upstream.version
                    ),
                };
                alerts::raise(c, alert, &hooks, now).await?;
            }
            queue.push_back((cds, cp));
        }
    }
    Ok(())
}

/// A readiness change, as the feed lists it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ChangeRecord {
    #[serde(skip)]
    pub id: i64,
    pub kind: ChangeKind,
    pub dataset: String,
    #[serde(rename = "partition")]
    #[sqlx(rename = "partition_spec")]
    pub partition: String,
    pub version: i64,
    pub batch_id: Option<String>,
    pub at: DateTime<Utc>,
    /// `reason` of an invalidation; `upstream` of a stale change.
    #[schema(value_type = Option<ChangeDetail>)]
    pub detail: Option<Json<ChangeDetail>>,
}

/// Which way to walk the lineage graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Upstream,
    Downstream,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LineageNode {
    pub dataset: String,
    pub partition: String,
    /// The partition's fitness, as `/ready` judges it.
    pub state: Fitness,
    pub version: i64,
    pub batch_id: Option<String>,
    pub depth: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LineageEdge {
    pub from: InputRef,
    pub to: InputRef,
    /// The version of `from` that `to`'s batch read.
    pub input_version: i64,
    /// `from`'s version now: greater than `input_version` once restated.
    pub current_version: i64,
    /// The batch of `to` that read it.
    pub batch_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineageGraph {
    pub nodes: Vec<LineageNode>,
    pub edges: Vec<LineageEdge>,
}

impl super::SqlStore {
    pub(super) async fn do_invalidate(&self, dataset: &str, partition: &str, reason: &str) -> Result<()> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let mut ripple = self.ripple();
        if !invalidate(&mut tx.conn(), dataset, partition, reason, now, &mut ripple).await? {
            return Err(crate::error::Error::not_found(
                "partition_not_found",
                format!("no batch ever wrote {dataset} {partition}"),
            ));
        }
        self.finish(tx, ripple.changes).await
    }

    pub(super) async fn do_list_changes(
        &self,
        after: i64,
        dataset: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ChangeRecord>> {
        let mut r = self.read().await?;
        let cols = "id, kind, dataset, partition_spec, version, batch_id, at, detail";
        Ok(match dataset {
            Some(d) => {
                r.conn()
                    .all(
                        &format!("SELECT {cols} FROM changes WHERE id > $1 AND dataset = $2 ORDER BY id LIMIT {limit}"),
                        args![after, d],
                    )
                    .await?
            }
            None => {
                r.conn()
                    .all(&format!("SELECT {cols} FROM changes WHERE id > $1 ORDER BY id LIMIT {limit}"), args![after])
                    .await?
            }
        })
    }

    /// The partitions a partition was built from (upstream) or that were
    /// built from it (downstream), from what batches actually read.
    pub(super) async fn do_lineage(
        &self,
        dataset: &str,
        partition: &str,
        direction: Direction,
        depth: u32,
    ) -> Result<LineageGraph> {
        let mut r = self.read().await?;
        walk(&mut r.conn(), dataset, partition, direction, depth).await
    }
}

/// Walks the lineage graph from a partition, `depth` hops at most.
pub(super) async fn walk(
    c: &mut Conn<'_>,
    dataset: &str,
    partition: &str,
    direction: Direction,
    depth: u32,
) -> Result<LineageGraph> {
    let root = load_partition(c, dataset, partition).await?;
    let mut nodes = vec![LineageNode {
        dataset: dataset.into(),
        partition: partition.into(),
        state: fitness_of(root.as_ref()),
        version: root.as_ref().map_or(0, |s| s.version),
        batch_id: root.as_ref().and_then(|s| s.published_batch_id.clone()),
        depth: 0,
    }];
    let mut edges = Vec::new();
    let mut seen = BTreeSet::from([(dataset.to_owned(), partition.to_owned())]);
    let mut frontier = vec![(dataset.to_owned(), partition.to_owned())];
    for level in 1..=depth {
        let mut next = Vec::new();
        for (ds, p) in std::mem::take(&mut frontier) {
            // (neighbour dataset, partition, version read, reading batch)
            let hops: Vec<(String, String, i64, String)> = match direction {
                Direction::Upstream => {
                    c.all(
                        "SELECT i.input_dataset, i.input_partition, i.input_version, i.batch_id FROM partitions d \
                         JOIN batch_inputs i ON i.batch_id = COALESCE(d.published_batch_id, d.batch_id) \
                         WHERE d.dataset = $1 AND d.partition_spec = $2 ORDER BY 1, 2",
                        args![&ds, &p],
                    )
                    .await?
                }
                Direction::Downstream => c.all(DOWNSTREAM_SQL, args![&ds, &p]).await?,
            };
            for (nds, np, read_version, batch_id) in hops {
                let here = InputRef { dataset: ds.clone(), partition: p.clone() };
                let there = InputRef { dataset: nds.clone(), partition: np.clone() };
                let (from, to, upstream_of_edge) = match direction {
                    Direction::Upstream => (there, here, (nds.clone(), np.clone())),
                    Direction::Downstream => (here, there, (ds.clone(), p.clone())),
                };
                let up = load_partition(c, &upstream_of_edge.0, &upstream_of_edge.1).await?;
                edges.push(LineageEdge {
                    from,
                    to,
                    input_version: read_version,
                    current_version: up.map_or(0, |s| s.version),
                    batch_id,
                });
                if seen.insert((nds.clone(), np.clone())) {
                    let s = load_partition(c, &nds, &np).await?;
                    nodes.push(LineageNode {
                        dataset: nds.clone(),
                        partition: np.clone(),
                        state: fitness_of(s.as_ref()),
                        version: s.as_ref().map_or(0, |s| s.version),
                        batch_id: s.as_ref().and_then(|s| s.published_batch_id.clone()),
                        depth: level,
                    });
                    next.push((nds, np));
                }
            }
        }
        frontier = next;
    }
    Ok(LineageGraph { nodes, edges })
}
