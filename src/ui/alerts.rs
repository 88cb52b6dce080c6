//! `/ui/alerts`: every alert with its owner and the recommended action,
//! filtered by state, severity, kind or dataset.

use axum::extract::{Query, State};
use maud::{html, Markup};
use serde::Deserialize;

use super::{badge, batch_href, dataset_href, layout, lineage_href, when, Section, UiError, UiResult};
use crate::domain::alerts::{AlertKind, AlertState, Severity};
use crate::error::Error;
use crate::http::AppState;
use crate::store::{AlertQuery, AlertRecord};

#[derive(Deserialize)]
pub(super) struct Filter {
    state: Option<String>,
    severity: Option<String>,
    kind: Option<String>,
    dataset: Option<String>,
}

fn some(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

pub(super) async fn page(State(app): State<AppState>, Query(f): Query<Filter>) -> UiResult {
    let state = some(f.state).unwrap_or_else(|| "open".into());
    if state != "open" && state != "resolved" {
        return Err(UiError::from(Error::invalid("state", format!("state must be open or resolved, got {state:?}"))));
    }
    let severity = some(f.severity);
    if let Some(s) = &severity {
        s.parse::<Severity>().map_err(|e| Error::invalid("severity", e))?;
    }
    let kind = some(f.kind);
    if let Some(k) = &kind {
        k.parse::<AlertKind>().map_err(|e| Error::invalid("kind", e))?;
    }
    let dataset = some(f.dataset);
    let q = AlertQuery {
        state: Some(state.clone()),
        severity: severity.clone(),
        kind: kind.clone(),
        dataset: dataset.clone(),
        limit: 200,
        after_id: None,
    };
    let page = app.store.list_alerts(&q).await?;
    let body = html! {
        h1 { "Alerts" }
        form.filters method="get" action="/ui/alerts" {
            label { "State " select name="state" {
                @for s in ["open", "resolved"] { option value=(s) selected[s == state] { (s) } }
            } }
            label { "Severity " select name="severity" {
                option value="" { "any" }
                @for s in ["critical", "warning", "info"] { option value=(s) selected[severity.as_deref() == Some(s)] { (s) } }
            } }
            label { "Kind " select name="kind" {
                option value="" { "any" }
                @for k in ["rejected", "failed", "abandoned", "deadline_missed", "stale_downstream", "airflow_asset_unknown"] {
                    option value=(k) selected[kind.as_deref() == Some(k)] { (k) }
                }
            } }
            label { "Dataset " input type="text" name="dataset" value=(dataset.as_deref().unwrap_or("")); }
            button type="submit" { "Filter" }
        }
        p.dim { (page.items.len()) " " (state) " alert(s)" @if page.next.is_some() { " (the 200 newest)" } }
        (table(&page.items))
    };
    Ok(layout("Alerts", Section::Alerts, body))
}

/// Alerts as a table: what, where, who owns it, what to do.
pub(super) fn table(items: &[AlertRecord]) -> Markup {
    html! {
        @if items.is_empty() {
            p.empty { "No alerts." }
        } @else {
            table.alerts {
                thead { tr { th { "Severity" } th { "Kind" } th { "Dataset · partitions" } th { "What happened" } th { "Owner" } th { "Recommended action" } th { "Raised" } } }
                tbody {
                    @for a in items {
                        tr {
                            td { span class={ "sev sev-" (a.severity) } { (a.severity) } }
                            td { (a.kind.as_str().replace('_', " ")) @if a.state == AlertState::Resolved { " " (badge("resolved")) } }
                            td {
                                a href=(dataset_href(&a.dataset)) { (a.dataset) }
                                @for p in &a.partitions.0 { " " a.dim href=(lineage_href(&a.dataset, p)) { (p) } }
                                @if let Some(b) = &a.batch_id { br; a.mono href=(batch_href(b)) { (b) } }
                            }
                            td { (a.message) }
                            td { (a.owner.as_deref().unwrap_or("—")) }
                            td { code { (a.recommended_action) } @if a.retryable { " " span.dim { "(retryable)" } } }
                            td { (when(a.raised_at)) }
                        }
                    }
                }
            }
        }
    }
}
