//! `/v1/lineage` (the graph of what was built from what) and `/v1/changes`
//! (the feed of readiness changes, in commit order).

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};

use super::query::{decode_cursor, Params};
use super::AppState;
use crate::api::schemas::{DatasetNameText, PartitionNameText};
use crate::api::{Change, ChangePage, LineageView};
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::domain::push::feed_cursor;
use crate::error::{Error, Result};
use crate::store::Direction;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/lineage", get(lineage)).route("/v1/changes", get(changes))
}

const MAX_DEPTH: u32 = 20;

#[utoipa::path(
    get,
    path = "/v1/lineage",
    tag = "lineage",
    operation_id = "getLineage",
    summary = "The graph of partitions a partition was built from, or built into",
    params(
        ("dataset" = DatasetNameText, Query),
        ("partition" = PartitionNameText, Query),
        ("direction" = Option<crate::store::Direction>, Query, description = "Default \"downstream\"."),
        ("depth" = Option<i64>, Query, description = "1 to 20 Default 5.", minimum = 1, maximum = 20),
    ),
    responses(
        (status = 200, description = "Nodes with state and version; edges with the version read and the current one.", body = crate::api::LineageView),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, description = "A malformed parameter.", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn lineage(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<LineageView>> {
    let mut p = Params::parse(raw.as_deref());
    let dataset = p.required("dataset")?;
    DatasetName::parse(&dataset).map_err(|e| Error::invalid("dataset", e.to_string()))?;
    let partition = p.required("partition")?;
    PartitionSpec::parse(&partition)
        .map_err(|e| Error::invalid_code("invalid_partition", "partition", e.to_string()))?;
    let direction = match p.one("direction")?.as_deref() {
        None | Some("downstream") => Direction::Downstream,
        Some("upstream") => Direction::Upstream,
        Some(other) => {
            return Err(Error::invalid("direction", format!("direction must be upstream or downstream, got {other:?}")))
        }
    };
    let depth = match p.one("depth")? {
        None => 5,
        Some(d) => d
            .parse::<u32>()
            .ok()
            .filter(|d| (1..=MAX_DEPTH).contains(d))
            .ok_or_else(|| Error::invalid("depth", format!("depth must be from 1 to {MAX_DEPTH}")))?,
    };
    p.finish()?;
    let graph = app.store.lineage(&dataset, &partition, direction, depth).await?;
    Ok(Json(LineageView { dataset, partition, direction, nodes: graph.nodes, edges: graph.edges }))
}

/// A consumer stores `next_cursor` and passes it back as `after`: it never
/// misses or reads twice a change, across restarts and replicas, because
/// changes are numbered in commit order. A cursor into history pruned by
/// `--retain` is `410 cursor_expired`, never a silent gap.
#[utoipa::path(
    get,
    path = "/v1/changes",
    tag = "lineage",
    operation_id = "listChanges",
    summary = "The feed of readiness changes, in commit order",
    description = "Every change of a partition's readiness: `published` (first version), `restated` (a later version), `invalidated`, `stale`, `fresh_again`. A consumer that stores `next_cursor` and passes it as `after` never misses or reads twice a change, across restarts and replicas. Changes older than the retention period (`--retain`, default 400 days) are pruned; a cursor that points into pruned history is `410 cursor_expired`, never a silent gap.",
    params(
        ("after" = Option<String>, Query, description = "A cursor from an earlier page (URL-encoded)."),
        ("dataset" = Option<DatasetNameText>, Query),
        ("limit" = Option<i64>, Query, description = "1 to 1000 Default 100.", minimum = 1, maximum = 1000),
    ),
    responses(
        (status = 200, description = "A page of changes.", body = crate::api::ChangePage),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 410, description = "`cursor_expired`: changes after this cursor were pruned (`--retain`); read the current state again and continue without `after`.", body = crate::api::ErrorBody),
        (status = 422, description = "A malformed parameter.", body = crate::api::ErrorBody),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn changes(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<ChangePage>> {
    let mut p = Params::parse(raw.as_deref());
    let after_raw = p.one("after")?;
    let after = after_raw.as_deref().map(|c| decode_cursor::<(i64,)>(c).map(|(id,)| id)).transpose()?.unwrap_or(0);
    let dataset = p.one("dataset")?;
    let limit = p.limit(100, 1000)?;
    p.finish()?;
    let items = app.store.list_changes(after, dataset.as_deref(), limit).await?;
    // Asked after listing: had pruning passed the cursor meanwhile, the
    // listing may have skipped changes, and the horizon now says so.
    let horizon = app.store.changes_horizon().await?;
    if after_raw.is_some() && after < horizon {
        return Err(Error::Request {
            status: 410,
            code: "cursor_expired",
            message: String::from(
                "changes after this cursor are older than the retention period (--retain) and were pruned; \
                 read the current state again and continue from a request without `after`",
            ),
        });
    }
    let cursor_of = feed_cursor;
    let next_cursor = items.last().map_or_else(|| cursor_of(after), |c| cursor_of(c.id));
    let items = items.into_iter().map(|change| Change { cursor: cursor_of(change.id), change }).collect();
    Ok(Json(ChangePage { items, next_cursor }))
}
