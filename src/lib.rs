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
pub mod scanner;
pub mod store;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::config::Settings;
use crate::scanner::Scanner;
use crate::store::{DbOptions, SqlStore, Store};
use crate::telemetry::Metrics;

/// Stops a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The application: its router, the store behind it, and the background scans.
pub struct App {
    pub router: axum::Router,
    pub store: Arc<SqlStore>,
    pub scanner: Arc<Scanner>,
    /// This instance's metrics (each app its own: tests run many in one process).
    pub metrics: Arc<Metrics>,
}

/// Connects to the database (migrating it) and builds the router.
pub async fn build(settings: &Settings, clock: Arc<dyn Clock>) -> anyhow::Result<App> {
    let metrics = Arc::new(Metrics::new());
    let opts = DbOptions {
        max_connections: settings.max_connections,
        webhook_url: settings.webhook_url.clone(),
        metrics: metrics.clone(),
    };
    let store = SqlStore::connect(&settings.database_url, &opts, clock.clone()).await?;
    let scanner = Arc::new(Scanner::new(store.clone(), clock, settings.webhook_backoff));
    let state = http::AppState { hub: store.hub().clone(), store: store.clone(), metrics: metrics.clone() };
    Ok(App { router: http::router(state), store, scanner, metrics })
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
    // Dropped (and so stopped) when serving ends.
    let _scans = settings.scan_interval.map(|every| AbortOnDrop(app.scanner.clone().spawn(every)));
    axum::serve(listener, app.router).with_graceful_shutdown(shutdown).await?;
    Ok(())
}
