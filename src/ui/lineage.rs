//! `/ui/lineage?dataset=…&partition=…`: what a partition was built from and
//! what was built from it, as an SVG graph (upstream on the left), with each
//! stale edge marked by the version read against the version now.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use maud::{html, Markup};
use serde::Deserialize;

use super::{badge, batch_href, dataset_href, layout, lineage_href, Section, UiError, UiResult};
use crate::domain::names::{DatasetName, PartitionSpec};
use crate::domain::readiness::Fitness;
use crate::error::Error;
use crate::http::AppState;
use crate::store::{Direction, LineageEdge};

/// How far the page walks each way.
const DEPTH: u32 = 5;

#[derive(Deserialize)]
pub(super) struct Target {
    dataset: Option<String>,
    partition: Option<String>,
}

/// A node placed in the drawing: column by signed depth, row within it.
struct Placed {
    dataset: String,
    partition: String,
    state: Fitness,
    version: i64,
    col: i32,
    row: usize,
}

const NODE_W: f64 = 210.0;
const NODE_H: f64 = 58.0;
const GAP_X: f64 = 170.0;
const GAP_Y: f64 = 22.0;
const MARGIN: f64 = 16.0;

pub(super) async fn page(State(app): State<AppState>, Query(t): Query<Target>) -> UiResult {
    let dataset = t.dataset.filter(|s| !s.is_empty()).ok_or_else(|| Error::invalid("dataset", "name a dataset"))?;
    DatasetName::parse(&dataset).map_err(|e| Error::invalid("dataset", e.to_string()))?;
    let partition =
        t.partition.filter(|s| !s.is_empty()).ok_or_else(|| Error::invalid("partition", "name a partition"))?;
    PartitionSpec::parse(&partition).map_err(|e| UiError::from(Error::invalid("partition", e.to_string())))?;

    let up = app.store.lineage(&dataset, &partition, Direction::Upstream, DEPTH).await?;
    let down = app.store.lineage(&dataset, &partition, Direction::Downstream, DEPTH).await?;

    // Place every node once: upstream at negative columns, downstream positive.
    let mut placed: Vec<Placed> = Vec::new();
    let mut index: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut rows_in: BTreeMap<i32, usize> = BTreeMap::new();
    let nodes =
        up.nodes.iter().map(|n| (n, -(n.depth as i32))).chain(down.nodes.iter().skip(1).map(|n| (n, n.depth as i32)));
    for (n, col) in nodes {
        let key = (n.dataset.clone(), n.partition.clone());
        if index.contains_key(&key) {
            continue;
        }
        let row = rows_in.entry(col).or_default();
        index.insert(key, placed.len());
        placed.push(Placed {
            dataset: n.dataset.clone(),
            partition: n.partition.clone(),
            state: n.state,
            version: n.version,
            col,
            row: *row,
        });
        *row += 1;
    }
    let mut edges: Vec<&LineageEdge> = Vec::new();
    for e in up.edges.iter().chain(down.edges.iter()) {
        if !edges.iter().any(|x| x.from == e.from && x.to == e.to && x.batch_id == e.batch_id) {
            edges.push(e);
        }
    }
    let root = &placed[0];
    let title = format!("Lineage of {dataset} {partition}");
    let body = html! {
        h1 { span.dim { "Lineage " } (dataset) " " span.mono { (partition) } " " (badge(root.state.as_str())) }
        p.dim { "Upstream on the left, downstream on the right, " (DEPTH) " levels each way. A dashed red edge was read at an older version than the one published now." }
        (graph(&placed, &index, &edges))
        section aria-labelledby="edges-h" {
            h2 #edges-h { "Edges" }
            @if edges.is_empty() { p.empty { "No batch recorded reading this partition, and it read nothing recorded." } } @else {
                table {
                    thead { tr { th { "From (input)" } th { "To (built from it)" } th { "Version read" } th { "Version now" } th { "Reading batch" } } }
                    tbody {
                        @for e in &edges {
                            @let stale = e.current_version > e.input_version;
                            tr class=@if stale { "stale" } data-edge=(edge_id(e)) {
                                td { (endpoint(&e.from)) }
                                td { (endpoint(&e.to)) }
                                td { "v" (e.input_version) }
                                td { "v" (e.current_version) @if stale { " " (badge("stale_upstream")) } }
                                td { a.mono href=(batch_href(&e.batch_id)) { (e.batch_id) } }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout(&title, Section::Datasets, body))
}

fn ends(v: &crate::api::InputRef) -> (String, String) {
    (v.dataset.clone(), v.partition.clone())
}

fn edge_id(e: &LineageEdge) -> String {
    let ((fd, fp), (td, tp)) = (ends(&e.from), ends(&e.to));
    format!("{fd} {fp} -> {td} {tp}")
}

fn endpoint(v: &crate::api::InputRef) -> Markup {
    let (d, p) = ends(v);
    html! { a href=(dataset_href(&d)) { (d) } " " a.dim href=(lineage_href(&d, &p)) { (p) } }
}

fn graph(placed: &[Placed], index: &BTreeMap<(String, String), usize>, edges: &[&LineageEdge]) -> Markup {
    let min_col = placed.iter().map(|p| p.col).min().unwrap_or(0);
    let max_col = placed.iter().map(|p| p.col).max().unwrap_or(0);
    let max_rows = placed.iter().map(|p| p.row + 1).max().unwrap_or(1);
    let x = |col: i32| MARGIN + f64::from(col - min_col) * (NODE_W + GAP_X);
    let y = |row: usize| MARGIN + row as f64 * (NODE_H + GAP_Y);
    let width = x(max_col) + NODE_W + MARGIN;
    let height = y(max_rows - 1) + NODE_H + MARGIN;
    let short = |s: &str, n: usize| {
        if s.chars().count() > n {
            format!("{}…", s.chars().take(n - 1).collect::<String>())
        } else {
            s.to_owned()
        }
    };
    html! {
        div.graphwrap {
            svg.lineage viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) role="img"
                aria-label={ "Lineage graph with " (placed.len()) " partitions and " (edges.len()) " edges" } {
                defs {
                    marker #arrow viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                        path.arrowhead d="M 0 0 L 10 5 L 0 10 z" {}
                    }
                    marker #arrow-stale viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                        path.arrowhead.stale d="M 0 0 L 10 5 L 0 10 z" {}
                    }
                }
                @for e in edges {
                    @if let (Some(&a), Some(&b)) = (index.get(&ends(&e.from)), index.get(&ends(&e.to))) {
                        @let (pa, pb) = (&placed[a], &placed[b]);
                        @let (x1, y1) = (x(pa.col) + NODE_W, y(pa.row) + NODE_H / 2.0);
                        @let (x2, y2) = (x(pb.col), y(pb.row) + NODE_H / 2.0);
                        @let stale = e.current_version > e.input_version;
                        @let mid = (x1 + x2) / 2.0;
                        g class=@if stale { "edge stale" } @else { "edge" } data-edge=(edge_id(e)) {
                            title { (edge_id(e)) ": read v" (e.input_version) ", now v" (e.current_version) }
                            path d={ "M " (x1) " " (y1) " C " (mid) " " (y1) ", " (mid) " " (y2) ", " (x2) " " (y2) }
                                marker-end=@if stale { "url(#arrow-stale)" } @else { "url(#arrow)" } {}
                        }
                    }
                }
                @for p in placed {
                    a href=(lineage_href(&p.dataset, &p.partition)) {
                        g class={ "node f-" (p.state) @if p.col == 0 { " root" } } data-node={ (p.dataset) " " (p.partition) } {
                            title { (p.dataset) " " (p.partition) ": " (p.state) ", version " (p.version) }
                            rect x=(x(p.col)) y=(y(p.row)) width=(NODE_W) height=(NODE_H) rx="6" {}
                            text.n1 x=(x(p.col) + 10.0) y=(y(p.row) + 19.0) { (short(&p.dataset, 26)) }
                            text.n2 x=(x(p.col) + 10.0) y=(y(p.row) + 35.0) { (short(&p.partition, 28)) }
                            text.n3 x=(x(p.col) + 10.0) y=(y(p.row) + 50.0) { (p.state.as_str().replace('_', " ")) " · v" (p.version) }
                        }
                    }
                }
                // Labels last, so that no node covers them.
                @for e in edges {
                    @if let (Some(&a), Some(&b), true) = (index.get(&ends(&e.from)), index.get(&ends(&e.to)), e.current_version > e.input_version) {
                        @let (pa, pb) = (&placed[a], &placed[b]);
                        @let mid = (x(pa.col) + NODE_W + x(pb.col)) / 2.0;
                        @let ym = (y(pa.row) + y(pb.row)) / 2.0 + NODE_H / 2.0 - 8.0;
                        text.edgelabel x=(mid) y=(ym) text-anchor="middle" data-edge=(edge_id(e)) { "read v" (e.input_version) " · now v" (e.current_version) }
                    }
                }
            }
        }
    }
}
