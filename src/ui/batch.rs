//! `/ui/batches` and `/ui/batches/{batch_id}`: a batch's timeline, every
//! check with what it observed and expected, the partitions it wrote, the
//! inputs at the versions it read, the residue it found and the retry advice.

use axum::extract::{Path, Query, State};
use maud::{html, Markup};
use serde::Deserialize;

use super::{
    badge, batch_href, count, dataset_href, enc, layout, lineage_href, not_found, value_text, when, Section, UiResult,
};
use crate::domain::batch::BatchState;
use crate::error::Error;
use crate::http::AppState;
use crate::store::{events, BatchQuery, BatchRecord, Event};

#[derive(Deserialize)]
pub(super) struct Filter {
    task: Option<String>,
    dataset: Option<String>,
    state: Option<String>,
}

pub(super) async fn index(State(app): State<AppState>, Query(f): Query<Filter>) -> UiResult {
    let some = |v: Option<String>| v.filter(|s| !s.trim().is_empty()).map(|s| s.trim().to_owned());
    let (task, dataset, state) = (some(f.task), some(f.dataset), some(f.state));
    let parsed = state.as_deref().map(|s| s.parse::<BatchState>().map_err(|e| Error::invalid("state", e))).transpose();
    let q =
        BatchQuery { task: task.clone(), dataset: dataset.clone(), state: parsed?, limit: 100, ..Default::default() };
    let page = app.store.list_batches(&q).await?;
    let body = html! {
        h1 { "Batches" }
        form.filters method="get" action="/ui/batches" {
            label { "Task " input type="text" name="task" value=(task.as_deref().unwrap_or("")); }
            label { "Dataset " input type="text" name="dataset" value=(dataset.as_deref().unwrap_or("")); }
            label { "State " select name="state" {
                option value="" { "any" }
                @for s in ["running", "published", "rejected", "failed", "abandoned", "superseded"] {
                    option value=(s) selected[state.as_deref() == Some(s)] { (s) }
                }
            } }
            button type="submit" { "Filter" }
        }
        p.dim { (page.items.len()) " batch(es)" @if page.next.is_some() { " (the 100 newest)" } }
        (list(&page.items))
    };
    Ok(layout("Batches", Section::Batches, body))
}

/// Batches as a table, newest first.
pub(super) fn list(items: &[BatchRecord]) -> Markup {
    html! {
        @if items.is_empty() {
            p.empty { "No batches." }
        } @else {
            table {
                thead { tr { th { "Batch" } th { "State" } th { "Task" } th { "Dataset" } th { "Data date" } th { "Partitions" } th { "Started" } } }
                tbody {
                    @for b in items {
                        tr {
                            td { a.mono href=(batch_href(&b.batch_id)) { (b.batch_id) } }
                            td { (badge(b.state.as_str())) }
                            td { a href={ "/ui/batches?task=" (enc(&b.task)) } { (b.task) } }
                            td { a href=(dataset_href(&b.dataset)) { (b.dataset) } }
                            td { (b.dt) }
                            td { (b.partitions.iter().map(|p| p.partition.as_str()).collect::<Vec<_>>().join(", ")) }
                            td { (when(b.started_at)) }
                        }
                    }
                }
            }
        }
    }
}

pub(super) async fn page(State(app): State<AppState>, Path(batch_id): Path<String>) -> UiResult {
    let Some(b) = app.store.get_batch(&batch_id).await? else {
        return Err(not_found(format!("No batch {batch_id:?}.")));
    };
    // The version each input has now, to show which were restated since.
    let mut current = Vec::with_capacity(b.inputs.len());
    for i in &b.inputs {
        let now = app.store.partition_status(&i.dataset, std::slice::from_ref(&i.partition)).await?;
        current.push(now.into_iter().next().flatten().map(|p| p.version));
    }
    let now = app.store.now();
    let events = b.events.clone().unwrap_or_default();
    let started = events.iter().find_map(|e| match e {
        Event::Started { detail, .. } => Some(detail),
        _ => None,
    });
    let checks = &b.checks;

    let body = html! {
        h1 { span.dim { "Batch " } span.mono { (b.batch_id) } " " (badge(b.state.as_str())) }
        dl.facts {
            dt { "Task" } dd { a href={ "/ui/batches?task=" (enc(&b.task)) } { (b.task) } }
            dt { "Dataset" } dd { a href=(dataset_href(&b.dataset)) { (b.dataset) } }
            dt { "Data date" } dd { (b.dt) " (attempt " (b.seq) ")" }
            dt { "Trigger" } dd { (b.trigger) @if let Some(r) = &b.run_ref { " · " span.mono { (r) } } }
            dt { "Started" } dd { (when(b.started_at)) }
            @if let Some(d) = b.decided_at { dt { "Decided" } dd { (when(d)) } }
            @if b.state == BatchState::Running {
                dt { "Lease" } dd { "expires " (when(b.lease_expires_at)) " (" (super::span_words((b.lease_expires_at - now).num_seconds())) ")" }
            }
            @if let Some(s) = &b.superseded_by { dt { "Superseded by" } dd { a.mono href=(batch_href(s)) { (s) } } }
            @if let Some(r) = b.repair_id { dt { "Repair" } dd { a href={ "/ui/repairs/" (r) } { "plan " (r) } } }
            @if let Some(m) = &b.marker { dt { "Marker" } dd.mono { (m) } }
        }
        @if let Some(f) = &b.failure {
            p.notice.bad { "Failed at " strong { (f.stage) } @if let Some(c) = &f.category { " (" (c) ")" }
                @if let Some(m) = &f.message { ": " (m) } }
        }

        section aria-labelledby="checks-h" {
            h2 #checks-h { "Checks" }
            @if checks.is_empty() { p.empty { "No checks ran (the batch was never committed)." } } @else {
                table.checks {
                    thead { tr { th { "Check" } th { "Partition" } th { "Status" } th { "Observed" } th { "Expected" } th { "Blocking" } th { "Message" } } }
                    tbody {
                        @for c in checks {
                            tr class={ "c-" (c.status.as_str()) } {
                                td { code { (c.name) } }
                                td { (c.partition.as_deref().unwrap_or("—")) }
                                td { (badge(c.status.as_str())) }
                                td.mono { (value_text(&c.observed)) }
                                td.mono { (value_text(&c.expected)) }
                                td { (if c.blocking { "blocks" } else { "warns only" }) }
                                td { (c.message) }
                            }
                        }
                    }
                }
            }
        }

        div.cols2 {
            section aria-labelledby="parts-h" {
                h2 #parts-h { "Partitions" }
                table {
                    thead { tr { th { "Partition" } th { "Status" } th { "Version" } th.num { "Rows written" } th.num { "Row count" } th.num { "Distinct keys" } th.num { "Null keys" } } }
                    tbody {
                        @for p in &b.partitions {
                            tr {
                                td { a href=(lineage_href(&b.dataset, &p.partition)) title="Lineage" { (p.partition) } }
                                td { (badge(p.status.as_str())) }
                                td { (p.version.map(|v| format!("v{v}")).unwrap_or_else(|| "—".into())) }
                                td.num { (opt_count(p.rows_written)) }
                                td.num { (opt_count(p.row_count)) }
                                td.num { (opt_count(p.distinct_keys)) }
                                td.num { (opt_count(p.null_keys)) }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="inputs-h" {
                h2 #inputs-h { "Inputs" }
                @if b.inputs.is_empty() { p.empty { "The batch declared no inputs." } } @else {
                    table {
                        thead { tr { th { "Dataset · partition" } th { "Version read" } th { "Version now" } th { "Built by" } } }
                        tbody {
                            @for (i, cur) in b.inputs.iter().zip(&current) {
                                @let moved = cur.is_some_and(|v| v != i.version);
                                tr class=@if moved { "stale" } {
                                    td { a href=(dataset_href(&i.dataset)) { (i.dataset) } " " a.dim href=(lineage_href(&i.dataset, &i.partition)) { (i.partition) } }
                                    td { "v" (i.version) }
                                    td { @match cur { Some(v) => { "v" (v) @if moved { " " (badge("stale_upstream")) } }, None => "—" } }
                                    td { @if let Some(ib) = &i.batch_id { a.mono href=(batch_href(ib)) { (ib) } } @else { "—" } }
                                }
                            }
                        }
                    }
                    @if b.allow_unready_inputs { p.dim { "Started with allow_unready_inputs." } }
                }
            }
        }

        section aria-labelledby="retry-h" {
            h2 #retry-h { "Residue and retry advice (at start)" }
            (retry(started))
        }

        section aria-labelledby="events-h" {
            h2 #events-h { "Timeline" }
            ol.timeline {
                @for e in &events {
                    li class={ "ev-" (e.kind()) } {
                        (when(e.at())) " " strong { (e.kind().as_str().replace('_', " ")) }
                        @let d = e.detail_json();
                        @if d.as_object().is_some_and(|o| !o.is_empty()) {
                            details { summary { "detail" } pre { (serde_json::to_string_pretty(&d).unwrap_or_default()) } }
                        }
                    }
                }
                @if let Some(d) = b.decided_at {
                    li class={ "ev-" (b.state.as_str()) } { (when(d)) " " strong { "decided: " (b.state.as_str()) } }
                }
            }
        }
        p.links { a href={ "/v1/batches/" (enc(&b.batch_id)) } { "This batch as JSON" } }
    };
    Ok(layout(&b.batch_id, Section::Batches, body))
}

fn opt_count(n: Option<i64>) -> String {
    n.map(count).unwrap_or_else(|| "—".into())
}

/// The residue earlier attempts left, the statement that cleans it, and
/// whether a retry is safe, as the start answered them.
fn retry(started: Option<&events::Started>) -> Markup {
    let residue = started.map(|s| s.residue.as_slice()).unwrap_or_default();
    let advice = started.and_then(|s| s.retry.as_ref());
    let cleaned = started.and_then(|s| s.cleaned_batch_ids.as_deref()).unwrap_or_default();
    html! {
        @if residue.is_empty() {
            p { "No earlier attempt left rows behind." }
        } @else {
            table {
                thead { tr { th { "Residue batch" } th { "State" } th { "Partitions" } } }
                tbody { @for r in residue { tr {
                    td { a.mono href=(batch_href(&r.batch_id)) { (r.batch_id) } }
                    td { (badge(r.state.as_str())) }
                    td { (r.partitions.join(", ")) }
                } } }
            }
        }
        @if let Some(advice) = advice {
            p { "Retry " @if advice.safe { (badge("safe")) } @else { (badge("unsafe")) } " " (advice.reason) }
            @if let Some(stmt) = &advice.cleanup.statement {
                p { "Clean up first:" }
                pre.stmt { code { (stmt) } }
            }
        }
        @if !cleaned.is_empty() {
            p.dim { "The task said it cleaned: " (cleaned.join(", ")) }
        }
    }
}
