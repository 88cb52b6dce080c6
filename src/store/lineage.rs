//! Lineage in the registry: what each batch read (resolved to versions at
//! start), and the graph of partitions built on one another that
//! `GET /v1/lineage`, repair plans and alerts walk. What a new version does
//! to the partitions built on the old one is in `staleness.rs`; the change
//! feed in `feed.rs`.

use std::collections::BTreeSet;

use serde::Serialize;

use super::db::{args, Conn, Writes};
use super::records::{fitness_of, load_partition};
use crate::api::InputRef;
use crate::domain::readiness::Fitness;
use crate::error::Result;

/// How far alerts and repair plans look for partitions built on others.
pub(super) const DOWNSTREAM_DEPTH: u32 = 20;

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

/// Adds a batch's inputs, as resolved at its start, to its start's writes.
pub(super) fn record_inputs(w: &mut Writes, batch_id: &str, inputs: &[InputRecord]) {
    for i in inputs {
        w.push(
            "INSERT INTO batch_inputs (batch_id, input_dataset, input_partition, input_version, input_batch_id) VALUES ($1, $2, $3, $4, $5)",
            args![batch_id, &i.dataset, &i.partition, i.version, i.batch_id.clone()],
        );
    }
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

/// The partitions built on ($1, $2) by their published batch, or, while
/// nothing is published, by their current one (the downstream lineage graph,
/// which a failure's alert also walks). Found as [`CONSUMERS_SQL`] finds
/// them: each reading batch's `task_produce_log` rows, then the partitions'
/// primary key, keeping those the batch stands for.
///
/// [`CONSUMERS_SQL`]: super::staleness::CONSUMERS_SQL
pub const DOWNSTREAM_SQL: &str = "SELECT d.dataset, d.partition_spec, i.input_version, i.batch_id FROM batch_inputs i \
       JOIN task_produce_log l ON l.batch_id = i.batch_id \
       JOIN partitions d ON d.dataset = l.target_table AND d.partition_spec = l.target_partition \
     WHERE i.input_dataset = $1 AND i.input_partition = $2 \
       AND i.batch_id = CASE WHEN COALESCE(d.published_batch_id, '') = '' THEN d.batch_id ELSE d.published_batch_id END \
     ORDER BY 1, 2";

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
    /// The partitions a partition was built from (upstream) or that were
    /// built from it (downstream), from what batches actually read.
    #[tracing::instrument(level = "debug", skip_all, fields(dataset = %dataset, partition = %partition, ?direction, depth))]
    pub async fn lineage(
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
