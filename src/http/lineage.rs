//! `/v1/lineage` (the graph of what was built from what) and `/v1/changes`
//! (the feed of readiness changes, in commit order).

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::query::{decode_cursor, encode_cursor, Params};
use super::AppState;
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::error::{Error, Result};
use crate::store::Direction;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/lineage", get(lineage)).route("/v1/changes", get(changes))
}

const MAX_DEPTH: u32 = 20;

async fn lineage(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<Value>> {
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
    Ok(Json(json!({"dataset": dataset, "partition": partition,
        "direction": if direction == Direction::Upstream { "upstream" } else { "downstream" },
        "nodes": graph.nodes, "edges": graph.edges})))
}

/// A consumer stores `next_cursor` and passes it back as `after`: it never
/// misses or reads twice a change, across restarts and replicas, because
/// changes are numbered in commit order. A cursor into history pruned by
/// `--retain` is `410 cursor_expired`, never a silent gap.
async fn changes(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<Value>> {
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
    let cursor_of = |id: i64| encode_cursor(&json!([id]));
    let next = items.last().map_or_else(|| cursor_of(after), |c| cursor_of(c.id));
    let items: Vec<Value> = items
        .iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
            v["cursor"] = json!(cursor_of(c.id));
            v
        })
        .collect();
    Ok(Json(json!({"items": items, "next_cursor": next})))
}
