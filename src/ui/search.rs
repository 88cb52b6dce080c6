//! `/ui/search?q=…`: a batch id or a dataset name goes straight to its page;
//! otherwise datasets whose name contains the text and the batches of a task
//! with that name.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::{batch_href, dataset_href, enc, layout, Section, UiError};
use crate::http::AppState;
use crate::store::BatchQuery;

#[derive(Deserialize)]
pub(super) struct Q {
    q: Option<String>,
}

pub(super) async fn search(State(app): State<AppState>, Query(q): Query<Q>) -> Result<Response, UiError> {
    let q = q.q.unwrap_or_default().trim().to_owned();
    if q.is_empty() {
        return Ok(Redirect::to("/ui/").into_response());
    }
    if app.store.get_batch(&q).await?.is_some() {
        return Ok(Redirect::to(&batch_href(&q)).into_response());
    }
    if app.store.get_dataset(&q).await?.is_some() {
        return Ok(Redirect::to(&dataset_href(&q)).into_response());
    }
    let needle = q.to_lowercase();
    let datasets: Vec<String> = app
        .store
        .list_datasets()
        .await?
        .into_iter()
        .map(|d| d.dataset)
        .filter(|d| d.to_lowercase().contains(&needle))
        .collect();
    let batches =
        app.store.list_batches(&BatchQuery { task: Some(q.clone()), limit: 50, ..Default::default() }).await?;
    let body = html! {
        h1 { "Search: " span.mono { (q) } }
        @if datasets.is_empty() && batches.items.is_empty() {
            p.empty { "No batch id, dataset or task matches. Batch ids look like " code { "load_orders-20260824-001" } "." }
        }
        @if !datasets.is_empty() {
            h2 { "Datasets" }
            ul { @for d in &datasets { li { a href=(dataset_href(d)) { (d) } } } }
        }
        @if !batches.items.is_empty() {
            h2 { "Batches of task " (q) }
            (super::batch::list(&batches.items))
            p { a href={ "/ui/batches?task=" (enc(&q)) } { "All batches of this task" } }
        }
    };
    Ok(layout("Search", Section::None, body).into_response())
}
