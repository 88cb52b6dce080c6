//! `/ui/repairs` and `/ui/repairs/{id}`: a plan's four questions (scope,
//! identity, retry boundary, downstream) and, once batches ran, the four
//! numbers after (row count, unique keys, metric against source, identical
//! rebuilds).

use axum::extract::{Path, State};
use maud::{html, Markup};
use serde_json::Value;

use super::{badge, batch_href, dataset_href, layout, lineage_href, not_found, value_text, when, Section, UiResult};
use crate::http::AppState;

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
    let dataset = plan["dataset"].as_str().unwrap_or_default().to_owned();
    let progress = plan["progress"]["partitions"].as_array().cloned().unwrap_or_default();
    let body = html! {
        h1 { span.dim { "Repair " } "#" (n) " " (badge(plan["state"].as_str().unwrap_or("planned"))) }
        dl.facts {
            dt { "Dataset" } dd { a href=(dataset_href(&dataset)) { (dataset) } }
            dt { "Action" } dd { code { (value_text(&plan["action"])) } }
            dt { "Reason" } dd { (value_text(&plan["reason"])) }
            dt { "Planned" } dd { (value_text(&plan["created_at"])) }
        }
        @for (i, part) in plan["partitions"].as_array().cloned().unwrap_or_default().iter().enumerate() {
            section.repair {
                h2 { span.mono { (value_text(&part["partition"])) } }
                div.questions {
                    (question("1 · Scope", scope(&part["scope"])))
                    (question("2 · Identity", identity(&part["identity"])))
                    (question("3 · Retry boundary", boundary(&part["retry_boundary"])))
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

fn question(title: &str, body: Markup) -> Markup {
    html! { div.question { h3 { (title) } (body) } }
}

fn scope(s: &Value) -> Markup {
    html! {
        p { "Data date " strong { (value_text(&s["dt"])) } " in " (value_text(&s["timezone"])) }
        @let inputs = s["inputs"].as_array().cloned().unwrap_or_default();
        @if inputs.is_empty() { p.dim { "The current version read no recorded inputs." } } @else {
            ul { @for i in &inputs {
                li { (value_text(&i["dataset"])) " " (value_text(&i["partition"])) ": read v" (value_text(&i["read_version"]))
                    ", now v" (value_text(&i["current_version"])) " (" (value_text(&i["current_state"])) ")" }
            } }
        }
    }
}

fn identity(s: &Value) -> Markup {
    html! {
        p { "Unique key: " @if s["unique_key"].as_array().is_some_and(|a| !a.is_empty()) { code { (value_text(&s["unique_key"])) } } @else { "none" } }
        @if s["published"].is_object() {
            p { "Published now: " (value_text(&s["published"])) }
        } @else { p.dim { "Nothing published yet." } }
    }
}

fn boundary(b: &Value) -> Markup {
    html! {
        p { (badge(b["state"].as_str().unwrap_or("?"))) }
        p { "Recommended: " code { (value_text(&b["recommended_action"])) } }
        @if let Some(l) = b["latest_batch_id"].as_str() { p { "Latest attempt " a.mono href=(batch_href(l)) { (l) } } }
    }
}

fn after(p: Option<&Value>) -> Markup {
    let Some(p) = p else {
        return html! { p.dim { "No progress yet." } };
    };
    html! {
        p { @if p["done"] == true { span.badge.s-ready { "done" } } @else { span.badge.s-running { "not done yet" } } }
        dl.numbers {
            dt { "Row count" } dd { "before " (value_text(&p["row_count"]["before"])) ", after " (value_text(&p["row_count"]["after"]))
                ", baseline " (value_text(&p["row_count"]["baseline"])) }
            dt { "Unique keys" } dd { (value_text(&p["unique_keys"])) }
            dt { "Metric vs source" } dd { @if p["metric_vs_source"].is_object() {
                (value_text(&p["metric_vs_source"]["status"])) ": " (value_text(&p["metric_vs_source"]["message"])) } @else { "—" } }
            dt { "Rebuilt identically" } dd { (value_text(&p["rebuilt_identically"])) " (" (value_text(&p["rebuilds"])) " rebuild(s))" }
        }
        @let batches = p["batches"].as_array().cloned().unwrap_or_default();
        @if !batches.is_empty() {
            p { "Batches: " @for b in &batches { a.mono href=(batch_href(b["batch_id"].as_str().unwrap_or(""))) { (value_text(&b["batch_id"])) } " " (badge(b["status"].as_str().unwrap_or("?"))) " " } }
        }
    }
}

fn downstream(plan: &Value) -> Markup {
    let planned = plan["downstream"].as_array().cloned().unwrap_or_default();
    let now = plan["progress"]["downstream"].as_array().cloned().unwrap_or_default();
    html! {
        @if planned.is_empty() { p.empty { "Nothing downstream was built from these partitions." } } @else {
            table {
                thead { tr { th { "Dataset · partition" } th { "Owner" } th { "Needs recompute" } th { "Now" } } }
                tbody {
                    @for d in &planned {
                        @let ds = d["dataset"].as_str().unwrap_or_default();
                        @let p = d["partition"].as_str().unwrap_or_default();
                        @let cur = now.iter().find(|x| x["dataset"] == d["dataset"] && x["partition"] == d["partition"]);
                        tr {
                            td { a href=(dataset_href(ds)) { (ds) } " " a.dim href=(lineage_href(ds, p)) { (p) } }
                            td { (value_text(&d["owner"])) }
                            td { (if d["needs_recompute"] == true { "yes" } else { "no" }) }
                            td { @match cur {
                                Some(c) if c["recomputed"] == true => { (badge("ready")) " recomputed" },
                                Some(c) => (badge(c["state"].as_str().unwrap_or("?"))),
                                None => "—",
                            } }
                        }
                    }
                }
            }
        }
    }
}
