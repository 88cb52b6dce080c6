//! `/ui/datasets` and `/ui/datasets/{dataset}`: the partition grid (data
//! dates × partitions, coloured by fitness), the policy, the volume of
//! recent periods against the baseline band the volume check uses, and what
//! was pushed about the dataset ([`super::deliveries`]).

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State};
use chrono::NaiveDate;
use maud::{html, Markup};

use super::svg::{volume_chart, VolumePoint};
use super::{badge, batch_href, count, dataset_href, enc, layout, lineage_href, not_found, when, Section, UiResult};
use crate::domain::checks::median;
use crate::domain::names::PartitionSpec;
use crate::domain::readiness::PartitionState;
use crate::http::AppState;
use crate::store::{DatasetRecord, PartitionQuery, PartitionRecord};

/// How many partitions the grid shows (newest data dates first).
const GRID_LIMIT: i64 = 500;
/// How many data dates the volume chart shows.
const CHART_PERIODS: usize = 30;

/// The fitness states, in the order the legend lists them.
pub(super) const FITNESS: [&str; 7] =
    ["ready", "running", "rejected", "failed", "abandoned", "invalidated", "stale_upstream"];

fn record_fitness(p: &PartitionRecord) -> &'static str {
    p.fitness().as_str()
}

async fn partitions(app: &AppState, dataset: &str) -> crate::error::Result<Vec<PartitionRecord>> {
    let q = PartitionQuery { dataset: dataset.to_owned(), from: None, to: None, limit: GRID_LIMIT, after: None };
    Ok(app.store.list_partitions(&q).await?.items)
}

pub(super) async fn index(State(app): State<AppState>) -> UiResult {
    let datasets = app.store.list_datasets().await?;
    let mut rows = Vec::new();
    for d in &datasets {
        let parts = partitions(&app, &d.dataset).await?;
        let mut by_fitness: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &parts {
            *by_fitness.entry(record_fitness(p)).or_default() += 1;
        }
        let by_fitness: Vec<(String, usize)> = by_fitness.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        rows.push((d, parts.first().map(|p| p.dt), by_fitness));
    }
    let body = html! {
        h1 { "Datasets" }
        @if rows.is_empty() {
            p.empty { "No dataset has a policy yet. " code { "PUT /v1/datasets/{dataset}" } " registers one." }
        } @else {
            table {
                thead { tr { th { "Dataset" } th { "Tier" } th { "Write mode" } th { "Owner" } th { "Latest data date" } th { "Partitions by fitness" } } }
                tbody {
                    @for (d, latest, by_fitness) in &rows {
                        tr {
                            td { a href=(dataset_href(&d.dataset)) { (d.dataset) } }
                            td { (d.tier) }
                            td { (d.write_mode) }
                            td { (d.owner.as_deref().unwrap_or("—")) }
                            td { (latest.map(|d| d.to_string()).unwrap_or_else(|| "—".into())) }
                            td { @for (f, n) in by_fitness { (badge(f)) " " (n) " " } }
                        }
                    }
                }
            }
        }
    };
    Ok(layout("Datasets", Section::Datasets, body))
}

pub(super) async fn page(State(app): State<AppState>, Path(name): Path<String>) -> UiResult {
    let Some(ds) = app.store.get_dataset(&name).await? else {
        return Err(not_found(format!("No dataset {name:?} has a policy.")));
    };
    let parts = partitions(&app, &name).await?;
    // What the deciding batch of a not-published partition counted, so a
    // rejected volume shows in the grid and on the chart.
    let mut attempted: BTreeMap<String, i64> = BTreeMap::new();
    for p in parts.iter().filter(|p| p.state == PartitionState::Rejected).take(CHART_PERIODS) {
        let Some(b) = &p.batch_id else { continue };
        if let Some(rec) = app.store.get_batch(b).await? {
            if let Some(n) = rec.partitions.iter().find(|x| x.partition == p.partition).and_then(|x| x.row_count) {
                attempted.insert(p.partition.clone(), n);
            }
        }
    }
    let pushed = app.store.list_deliveries(&super::deliveries::latest(&name)).await?.items;
    let body = html! {
        h1 { span.dim { "Dataset " } (ds.dataset) }
        p.links {
            a href={ "/ui/batches?dataset=" (enc(&ds.dataset)) } { "Batches" } " · "
            a href={ "/ui/alerts?state=open&dataset=" (enc(&ds.dataset)) } { "Open alerts" } " · "
            a href={ "/v1/datasets/" (enc(&ds.dataset)) } { "JSON" }
        }
        div.cols {
            section aria-labelledby="grid-h" {
                h2 #grid-h { "Partitions" }
                (legend())
                (grid(&ds.dataset, &parts, &attempted))
            }
            aside {
                h2 { "Policy" }
                (policy(&ds))
            }
        }
        section aria-labelledby="vol-h" {
            h2 #vol-h { "Volume" }
            p.dim { "Published row count per data date against the band the volume check allows: the median of the "
                (ds.baseline_periods) " earlier dates ± " ((ds.max_volume_change * 100.0).round()) "%." }
            (volume(&ds, &parts, &attempted))
        }
        (super::deliveries::section(&ds.dataset, &pushed))
    };
    Ok(layout(&ds.dataset, Section::Datasets, body))
}

fn legend() -> Markup {
    html! {
        ul.legend aria-label="Fitness colours" { @for f in FITNESS { li { (badge(f)) } } }
    }
}

/// Data dates down, partitions (the spec without its date) across.
fn grid(dataset: &str, parts: &[PartitionRecord], attempted: &BTreeMap<String, i64>) -> Markup {
    if parts.is_empty() {
        return html! { p.empty { "No batch has written a partition of this dataset yet." } };
    }
    let key = |p: &PartitionRecord| {
        PartitionSpec::parse(&p.partition).map(|s| s.baseline_key(p.dt)).unwrap_or_else(|_| p.partition.clone())
    };
    let columns: BTreeSet<String> = parts.iter().map(key).collect();
    let mut cells: BTreeMap<NaiveDate, BTreeMap<String, &PartitionRecord>> = BTreeMap::new();
    for p in parts {
        cells.entry(p.dt).or_default().insert(key(p), p);
    }
    html! {
        div.gridwrap {
            table.grid {
                thead { tr {
                    th scope="col" { "Data date" }
                    @for c in &columns { th scope="col" { @if c.is_empty() { "(whole date)" } @else { (c) } } }
                } }
                tbody {
                    @for (dt, row) in cells.iter().rev() {
                        tr {
                            th scope="row" { (dt) }
                            @for c in &columns {
                                @match row.get(c) {
                                    Some(p) => (cell(dataset, p, attempted.get(&p.partition).copied())),
                                    None => td.none { "·" },
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn cell(dataset: &str, p: &PartitionRecord, attempted: Option<i64>) -> Markup {
    let f = record_fitness(p);
    let batch = p.batch_id.as_ref().or(p.published_batch_id.as_ref());
    let mut title = format!("{} {}: {}", dataset, p.partition, f.replace('_', " "));
    if let Some(why) = &p.stale_upstream {
        title.push_str(&format!(
            " (built on {} {} version {}, now version {})",
            why.0.dataset, why.0.partition, why.0.built_on_version, why.0.current_version
        ));
    }
    if let Some(r) = &p.invalidated_reason {
        title.push_str(&format!(" ({r})"));
    }
    html! {
        td class={ "cell f-" (f) } data-partition=(p.partition) data-fitness=(f) {
            @match batch {
                Some(b) => a.celllink href=(batch_href(b)) title=(title) {
                    span.state { (f.replace('_', " ")) }
                    span.meta {
                        "v" (p.version) @if let Some(n) = p.row_count { " · " (count(n)) }
                        @if let Some(n) = attempted { " · tried " (count(n)) }
                    }
                },
                None => span title=(title) { span.state { (f) } },
            }
            a.lin href=(lineage_href(dataset, &p.partition)) title={ "Lineage of " (p.partition) } aria-label={ "Lineage of " (p.partition) } { "⇄" }
        }
    }
}

fn policy(d: &DatasetRecord) -> Markup {
    html! {
        dl.policy {
            dt { "Tier" } dd { (d.tier) }
            dt { "Write mode" } dd { (d.write_mode) }
            dt { "Unique key" } dd { @if d.unique_key.is_empty() { "—" } @else { code { (d.unique_key.join(", ")) } } }
            dt { "Deadline" } dd {
                @match &d.deadline {
                    Some(dl) => { (dl.time) " " (d.timezone) ", " (dl.days_after_dt) " day(s) after the data date" },
                    None => "none",
                }
            }
            dt { "Owner" } dd { (d.owner.as_deref().unwrap_or("—")) }
            dt { "Volume" } dd { "±" ((d.max_volume_change * 100.0).round()) "% of the median of " (d.baseline_periods) " dates" }
            dt { "Empty allowed" } dd { (if d.allow_empty { "yes" } else { "no" }) }
            dt { "Partitions per batch" } dd { "at most " (d.max_partitions_per_batch) }
            dt { "Updated" } dd { (when(d.updated_at)) }
        }
    }
}

/// One chart per partition key (the volume check compares like with like).
/// Published counts make the baseline; a rejected attempt is drawn (red, when
/// outside the band) but is not part of any later baseline.
fn volume(d: &DatasetRecord, parts: &[PartitionRecord], attempted: &BTreeMap<String, i64>) -> Markup {
    let mut series: BTreeMap<String, Vec<(NaiveDate, i64, String, bool)>> = BTreeMap::new();
    for p in parts {
        let point = match (attempted.get(&p.partition), p.row_count) {
            (Some(n), _) => Some((*n, false)),
            (None, Some(n)) if p.version > 0 => Some((n, true)),
            _ => None,
        };
        if let Some((n, published)) = point {
            let key = PartitionSpec::parse(&p.partition).map(|s| s.baseline_key(p.dt)).unwrap_or_default();
            series.entry(key).or_default().push((p.dt, n, p.partition.clone(), published));
        }
    }
    if series.is_empty() {
        return html! { p.empty { "Nothing published yet." } };
    }
    series.values_mut().for_each(|points| points.sort());
    let periods = d.baseline_periods as usize;
    html! {
        div.charts {
            @for (key, points) in series.into_iter().take(6) {
                @let chart: Vec<VolumePoint> = points.iter().enumerate().skip(points.len().saturating_sub(CHART_PERIODS)).map(|(i, (dt, n, partition, _))| {
                    let published: Vec<i64> = points[..i].iter().filter(|x| x.3).map(|x| x.1).collect();
                    let earlier = &published[published.len().saturating_sub(periods)..];
                    let base = median(earlier);
                    VolumePoint {
                        label: format!("{dt}"),
                        partition: partition.clone(),
                        rows: *n,
                        band: base.map(|b| (b * (1.0 - d.max_volume_change), b * (1.0 + d.max_volume_change))),
                    }
                }).collect();
                figure.chart {
                    (volume_chart(&chart))
                    figcaption { @if key.is_empty() { "whole date" } @else { (key) } }
                }
            }
        }
    }
}
