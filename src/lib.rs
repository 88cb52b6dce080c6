//! batchgate: the registry and readiness gate for batch data.
//!
//! [`serve`] is what `main` calls: it builds the store for the configured
//! database and the router on top of it ([`build`]), then serves them with
//! [`serve_app`] until `shutdown` resolves. The integration tests build with
//! their own clock and serve through the same [`serve_app`].

pub mod api;
pub mod auth;
pub mod changes;
pub mod client;
pub mod clock;
pub mod config;
pub mod domain;
pub mod error;
pub mod http;
pub mod outbox;
pub mod scanner;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod ui;
pub mod whole;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::outbound::AllowList;
use crate::scanner::Scanner;
use crate::store::{DbOptions, SqlStore};
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
    /// `/ready` answered from the cache ahead of the router's layers.
    pub ready_fast_path: http::ReadyFastPath,
    pub store: Arc<SqlStore>,
    pub scanner: Arc<Scanner>,
    /// This instance's metrics (each app its own: tests run many in one process).
    pub metrics: Arc<Metrics>,
    /// Tells long-running handlers that shutdown began.
    pub stop: server::StopSwitch,
}

/// Connects to the database (migrating it) and builds the router.
pub async fn build(settings: &Settings, clock: Arc<dyn Clock>) -> anyhow::Result<App> {
    let metrics = Arc::new(Metrics::new());
    let opts = DbOptions {
        max_connections: settings.max_connections,
        webhook_url: settings.webhook_url.clone(),
        events_urls: settings.events_urls.clone(),
        airflow_url: settings.airflow_url.clone(),
        metrics: metrics.clone(),
        timeout: settings.db_timeout,
    };
    let store = SqlStore::connect(&settings.database_url, &opts, clock.clone()).await?;
    // The operator's own receivers are allowed: --webhook-url, --airflow-url, --events-url.
    let service_urls: Vec<&str> =
        (settings.webhook_url.iter().chain(&settings.airflow_url).chain(&settings.events_urls))
            .map(String::as_str)
            .collect();
    let allow =
        AllowList::new(&settings.webhook_allow, &service_urls).map_err(|e| anyhow::anyhow!("--webhook-allow: {e}"))?;
    let allow = Arc::new(allow);
    let scanner = Arc::new(Scanner::new(store.clone(), clock.clone(), allow.clone(), settings)?);
    let (stop, stopping) = server::stop_switch();
    let jwt = match &settings.jwt {
        Some(j) => Some(auth::JwtVerifier::load(j.clone()).await?),
        None => None,
    };
    let authenticator =
        auth::Authenticator::new(store.clone(), store.hub().clone(), clock, settings.bootstrap_token.as_deref(), jwt);
    // `build` cannot know the listen address: `serve` resolves `auto`
    // against it first; what is left of `auto` here (tests, benchmarks on
    // 127.0.0.1) counts as loopback.
    let required = settings.auth == auth::AuthMode::Required;
    let gate = auth::Gate { required, public_ready: settings.public_ready, authenticator };
    let state = http::AppState {
        hub: store.hub().clone(),
        store: store.clone(),
        webhook_allow: allow,
        metrics: metrics.clone(),
        stopping,
        auth: Arc::new(gate),
    };
    let ready_fast_path = http::ReadyFastPath::new(state.clone());
    Ok(App { router: http::router(state), ready_fast_path, store, scanner, metrics, stop })
}

/// Serves the API on `listener` until `shutdown` resolves, then finishes the
/// requests in flight.
pub async fn serve(
    settings: Settings,
    listener: TcpListener,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Before the database: a bad certificate should not wait for it.
    let edge = server::Edge::from_settings(&settings)?;
    let addr = listener.local_addr()?;
    let mut settings = settings;
    let required = settings.auth.required_on(addr);
    if !required && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "authentication is OFF on a non-loopback address: anyone who can reach this port can publish, \
             invalidate and change any dataset's policy; use --auth required and tokens"
        );
    }
    settings.auth = if required { auth::AuthMode::Required } else { auth::AuthMode::Off };
    let app = build(&settings, clock).await?;
    serve_app(app, &settings, edge, listener, shutdown).await
}

/// Serves a built application (see [`server`] for timeouts, the connection
/// ceiling and shutdown), running the background scans if configured.
pub async fn serve_app(
    app: App,
    settings: &Settings,
    edge: server::Edge,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let auth = if settings.auth == auth::AuthMode::Required { "required" } else { "off" };
    tracing::info!(addr = %listener.local_addr()?, backend = app.store.backend(), auth, "batchgate serving");
    // Dropped (and so stopped) when serving ends.
    let _scans = settings.scan_interval.map(|every| AbortOnDrop(app.scanner.clone().spawn(every)));
    server::run(app.router, Some(app.ready_fast_path), listener, edge, app.stop, shutdown).await
}
