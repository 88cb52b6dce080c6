//! `/ui/repairs` and `/ui/repairs/{id}`: a plan's four questions (scope,
//! identity, retry boundary, downstream) and, once batches ran, the four
//! numbers after (row count, unique keys, metric against source, identical
//! rebuilds).

use super::{badge, batch_href, dataset_href, layout, lineage_href, not_found, value_text, when, Section, UiResult};
use crate::domain::repair::{Identity, PartitionProgress, RepairPlan, RepairScope, RetryBoundary};
use crate::http::AppState;
use axum::extract::{Path, State};
use maud::{html, Markup};

pub(super) async fn index(State(app): State<AppState>) -> UiResult {
    let plans = app.store.list_repairs(100).await?;
    let body = html! {
        h1 { "Repairs" }
        p.dim { "Plans are made with " code { "POST /v1/repairs" } "; each answers the four questions before anything runs and then tracks the numbers after." }
        @if plans.is_empty() { p.empty { "No repair was planned." } } @else {
            table {
                thead { tr { th { "Plan" } th { "Dataset" } th { "Partitions" } th { "Action" } th { "Reason" } th { "Planned" } } }
                tbody {
                    @for p in &plans {
                        tr {
                            td { a href={ "/ui/repairs/" (p.id) } { "#" (p.id) } }
                            td { a href=(dataset_href(&p.dataset)) { (p.dataset) } }
                            td { (p.partitions.0.join(", ")) }
                            td { code { (p.action) } }
                            td { (p.reason) }
                            td { (when(p.created_at)) }
                        }
                    }
                }
            }
        }
    };
    Ok(layout("Repairs", Section::Repairs, body))
}

pub(super) async fn page(State(app): State<AppState>, Path(id): Path<String>) -> UiResult {
    let missing = || not_found(format!("No repair plan {id:?}."));
    let n: i64 = id.parse().map_err(|_| missing())?;
    let Some(plan) = app.store.get_repair(n).await? else {
        return Err(missing());
    };
    let progress = plan.progress.as_ref().map(|p| p.partitions.as_slice()).unwrap_or_default();
    let body = html! {
        h1 { span.dim { "Repair " } "#" (n) " " (badge(plan.state.as_str())) }
        dl.facts {
            dt { "Dataset" } dd { a href=(dataset_href(&plan.dataset)) { (plan.dataset) } }
            dt { "Action" } dd { code { (plan.action) } }
            dt { "Reason" } dd { (plan.reason) }
            dt { "Planned" } dd { (text(&plan.created_at)) }
        }
        @for (i, part) in plan.partitions.iter().enumerate() {
            section.repair {
                h2 { span.mono { (part.partition) } }
                div.questions {
                    (question("1 · Scope", scope(&part.scope)))
                    (question("2 · Identity", identity(&part.identity)))
                    (question("3 · Retry boundary", boundary(&part.retry_boundary)))
                    (question("4 · After", after(progress.get(i))))
                }
            }
        }
        section {
            h2 { "Downstream" }
            (downstream(&plan))
        }
    };
    Ok(layout(&format!("Repair #{n}"), Section::Repairs, body))
}

/// Any typed value as the console writes JSON values.
fn text<T: serde::Serialize>(v: &T) -> String {
    value_text(&serde_json::to_value(v).unwrap_or_default())
}

fn question(title: &str, body: Markup) -> Markup {
    html! { div.question { h3 { (title) } (body) } }
}

fn scope(s: &RepairScope) -> Markup {
    html! {
        p { "Data date " strong { (text(&s.dt)) } " in " (s.timezone) }
        @if s.inputs.is_empty() { p.dim { "The current version read no recorded inputs." } } @else {
            ul { @for i in &s.inputs {
                li { (i.dataset) " " (i.partition) ": read v" (i.read_version)
                    ", now v" (i.current_version) " (" (i.current_state) ")" }
            } }
        }
    }
}

fn identity(s: &Identity) -> Markup {
    html! {
        p { "Unique key: " @if !s.unique_key.is_empty() { code { (s.unique_key.join(", ")) } } @else { "none" } }
        @if let Some(published) = &s.published {
            p { "Published now: " (text(published)) }
        } @else { p.dim { "Nothing published yet." } }
    }
}

fn boundary(b: &RetryBoundary) -> Markup {
    html! {
        p { (badge(b.state.as_str())) }
        p { "Recommended: " code { (b.recommended_action) } }
        @if let Some(l) = &b.latest_batch_id { p { "Latest attempt " a.mono href=(batch_href(l)) { (l) } } }
    }
}

fn after(p: Option<&PartitionProgress>) -> Markup {
    let Some(p) = p else {
        return html! { p.dim { "No progress yet." } };
    };
    html! {
        p { @if p.done { span.badge.s-ready { "done" } } @else { span.badge.s-running { "not done yet" } } }
        dl.numbers {
            dt { "Row count" } dd { "before " (text(&p.row_count.before)) ", after " (text(&p.row_count.after))
                ", baseline " (text(&p.row_count.baseline)) }
            dt { "Unique keys" } dd { (text(&p.unique_keys)) }
            dt { "Metric vs source" } dd { @if let Some(c) = &p.metric_vs_source {
                (text(&c.status)) ": " (c.message) } @else { "—" } }
            dt { "Rebuilt identically" } dd { (text(&p.rebuilt_identically)) " (" (p.rebuilds) " rebuild(s))" }
        }
        @if !p.batches.is_empty() {
            p { "Batches: " @for b in &p.batches { a.mono href=(batch_href(&b.batch_id)) { (b.batch_id) } " " (badge(b.status.as_str())) " " } }
        }
    }
}

fn downstream(plan: &RepairPlan) -> Markup {
    let now = plan.progress.as_ref().map(|p| p.downstream.as_slice()).unwrap_or_default();
    html! {
        @if plan.downstream.is_empty() { p.empty { "Nothing downstream was built from these partitions." } } @else {
            table {
                thead { tr { th { "Dataset · partition" } th { "Owner" } th { "Needs recompute" } th { "Now" } } }
                tbody {
                    @for d in &plan.downstream {
                        @let cur = now.iter().find(|x| x.dataset == d.dataset && x.partition == d.partition);
                        tr {
                            td { a href=(dataset_href(&d.dataset)) { (d.dataset) } " " a.dim href=(lineage_href(&d.dataset, &d.partition)) { (d.partition) } }
                            td { (text(&d.owner)) }
                            td { (if d.needs_recompute { "yes" } else { "no" }) }
                            td { @match cur {
                                Some(c) if c.recomputed => { (badge("ready")) " recomputed" },
                                Some(c) => (badge(c.state.as_str())),
                                None => "—",
                            } }
                        }
                    }
                }
            }
        }
    }
}
