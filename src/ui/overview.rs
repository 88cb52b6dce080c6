//! `/ui/`: what needs a person now. Open alerts by severity, data dates past
//! their deadline, recent rejections with the check that failed, and running
//! batches with the lease time they have left.

use axum::extract::State;
use maud::{html, Markup};

use super::{badge, batch_href, dataset_href, layout, span_words, value_text, when, Section, UiResult};
use crate::domain::alerts::AlertKind;
use crate::domain::batch::BatchState;
use crate::domain::checks::{CheckResult, CheckStatus};
use crate::http::AppState;
use crate::store::{AlertQuery, AlertRecord, BatchQuery, BatchRecord};

const SEVERITIES: [&str; 3] = ["critical", "warning", "info"];

pub(super) async fn page(State(app): State<AppState>) -> UiResult {
    let now = app.store.now();
    let open =
        app.store.list_alerts(&AlertQuery { state: Some("open".into()), limit: 500, ..Default::default() }).await?;
    let late: Vec<&AlertRecord> = open.items.iter().filter(|a| a.kind == AlertKind::DeadlineMissed).collect();
    let batches = |state| BatchQuery { state: Some(state), limit: 10, ..Default::default() };
    let rejected = app.store.list_batches(&batches(BatchState::Rejected)).await?;
    let running = app.store.list_batches(&BatchQuery { limit: 50, ..batches(BatchState::Running) }).await?;

    let body = html! {
        h1 { "Overview" }
        section.tiles aria-label="Open alerts by severity" {
            @for sev in SEVERITIES {
                @let n = open.items.iter().filter(|a| a.severity.as_str() == sev).count();
                a class={ "tile sev-" (sev) @if n == 0 { " quiet" } } href={ "/ui/alerts?state=open&severity=" (sev) } {
                    span.num { (n) } span.label { (sev) " alerts open" }
                }
            }
            a class={ "tile" @if late.is_empty() { " quiet" } @else { " sev-critical" } } href="/ui/alerts?state=open&kind=deadline_missed" {
                span.num { (late.len()) } span.label { "data dates past deadline" }
            }
            a class={ "tile" @if running.items.is_empty() { " quiet" } } href="/ui/batches?state=running" {
                span.num { (running.items.len()) } span.label { "batches running" }
            }
        }

        section aria-labelledby="late-h" {
            h2 #late-h { "Past deadline" }
            @if late.is_empty() {
                p.empty { "Every data date with a deadline was published in time." }
            } @else {
                table {
                    thead { tr { th { "Dataset" } th { "Data date" } th { "Partitions not ready" } th { "Owner" } th { "Raised" } } }
                    tbody {
                        @for a in &late {
                            tr {
                                td { a href=(dataset_href(&a.dataset)) { (a.dataset) } }
                                td { (a.dt.map(|d| d.to_string()).unwrap_or_default()) }
                                td { (a.partitions.0.join(", ")) }
                                td { (a.owner.as_deref().unwrap_or("—")) }
                                td { (when(a.raised_at)) }
                            }
                        }
                    }
                }
            }
        }

        section aria-labelledby="rej-h" {
            h2 #rej-h { "Recent rejections" }
            @if rejected.items.is_empty() {
                p.empty { "No batch was rejected." }
            } @else {
                table {
                    thead { tr { th { "Batch" } th { "Dataset" } th { "Data date" } th { "Failed check" } th { "Observed" } th { "Expected" } th { "Decided" } } }
                    tbody { @for b in &rejected.items { (rejection_rows(b)) } }
                }
            }
        }

        section aria-labelledby="run-h" {
            h2 #run-h { "Running batches" }
            @if running.items.is_empty() {
                p.empty { "Nothing is running." }
            } @else {
                table {
                    thead { tr { th { "Batch" } th { "Task" } th { "Dataset" } th { "Partitions" } th { "Started" } th { "Lease left" } } }
                    tbody {
                        @for b in &running.items {
                            @let left = (b.lease_expires_at - now).num_seconds();
                            tr {
                                td { a.mono href=(batch_href(&b.batch_id)) { (b.batch_id) } }
                                td { (b.task) }
                                td { a href=(dataset_href(&b.dataset)) { (b.dataset) } }
                                td { (b.partitions.iter().map(|p| p.partition.as_str()).collect::<Vec<_>>().join(", ")) }
                                td { (when(b.started_at)) }
                                td class=@if left < 300 { "warn" } {
                                    @if left > 0 { (span_words(left)) } @else { "expired " (span_words(left)) }
                                }
                            }
                        }
                    }
                }
            }
        }

        section aria-labelledby="alerts-h" {
            h2 #alerts-h { "Open alerts" }
            (super::alerts::table(&open.items[..open.items.len().min(10)]))
            @if open.items.len() > 10 { p { a href="/ui/alerts?state=open" { "All " (open.items.len()) " open alerts" } } }
        }
    };
    Ok(layout("Overview", Section::Overview, body))
}

/// One row per failed check of a rejected batch.
fn rejection_rows(b: &BatchRecord) -> Markup {
    let failed: Vec<&CheckResult> = b.checks.iter().filter(|c| c.status == CheckStatus::Fail).collect();
    html! {
        @if failed.is_empty() {
            tr { (batch_cells(b)) td colspan="3" { "—" } td { (b.decided_at.map(when).unwrap_or_default()) } }
        }
        @for c in &failed {
            tr {
                (batch_cells(b))
                td { (badge("fail")) " " code { (c.name) }
                    @if let Some(p) = &c.partition { " " span.dim { (p) } } }
                td.mono { (value_text(&c.observed)) }
                td.mono { (value_text(&c.expected)) }
                td { (b.decided_at.map(when).unwrap_or_default()) }
            }
        }
    }
}

fn batch_cells(b: &BatchRecord) -> Markup {
    html! {
        td { a.mono href=(batch_href(&b.batch_id)) { (b.batch_id) } }
        td { a href=(dataset_href(&b.dataset)) { (b.dataset) } }
        td { (b.dt) }
    }
}
