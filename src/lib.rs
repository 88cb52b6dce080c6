//! batchgate: the registry and readiness gate for batch data.
//!
//! [`serve`] is what `main` and the integration tests both call: it builds the
//! store for the configured database, the router on top of it, and serves
//! until `shutdown` resolves.

pub mod changes;
pub mod client;
pub mod clock;
pub mod config;
pub mod domain;
pub mod error;
pub mod http;
pub mod store;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::config::Settings;
use crate::store::{DbOptions, SqlStore, Store};

/// The application: its router and the store behind it.
pub struct App {
    pub router: axum::Router,
    pub store: Arc<SqlStore>,
}

/// Connects to the database (migrating it) and builds the router.
pub async fn build(settings: &Settings, clock: Arc<dyn Clock>) -> anyhow::Result<App> {
    let opts = DbOptions {
        max_connections: settings.max_connections,
    };
    let store = SqlStore::connect(&settings.database_url, &opts, clock).await?;
    let state = http::AppState {
        hub: store.hub().clone(),
        store: store.clone(),
    };
    Ok(App {
        router: http::router(state),
        store,
    })
}

/// Serves the API on `listener` until `shutdown` resolves, then finishes the
/// requests in flight.
pub async fn serve(
    settings: Settings,
    listener: TcpListener,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = build(&settings, clock).await?;
    tracing::info!(addr = %listener.local_addr()?, backend = app.store.backend(), "batchgate serving");
    axum::serve(listener, app.router)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
