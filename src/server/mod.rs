//! The listener: how connections are accepted, served and closed.
//!
//! `axum::serve` hides the knobs a service on a network needs, so
//! connections are served here with hyper's HTTP/1.1 connection builder:
//! - a request head must arrive within `header_timeout`; the same clock runs
//!   while a keep-alive connection waits for its next request, so it is also
//!   the idle timeout;
//! - open connections are capped below the process's file limit
//!   (`RLIMIT_NOFILE`, less room for the database pool and files), so that
//!   `accept` never fails for lack of descriptors; at the cap the oldest idle
//!   connection is closed to make room ([`conns`]);
//! - on shutdown, idle connections (including ones still sending a head)
//!   close at once, `/ready` long-polls answer `shutting_down` ([`Stopping`]),
//!   requests in flight finish, and whatever is left after `shutdown_grace`
//!   is dropped;
//! - hyper's own bodiless error answers get the JSON error envelope ([`wire`]);
//! - optionally TLS ([`tls`]).

mod conns;
mod tls;
mod wire;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::config::Settings;
use conns::{Admission, Busy, Registry, Slot};

/// How connections are served.
#[derive(Clone)]
pub struct Edge {
    pub header_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Most connections open at once.
    pub max_clients: usize,
    pub tls: Option<TlsAcceptor>,
}

impl Edge {
    /// From the settings: reads the TLS files, and derives the connection
    /// ceiling from the file limit.
    pub fn from_settings(s: &Settings) -> anyhow::Result<Self> {
        let tls = match (&s.tls_cert, &s.tls_key) {
            (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
            (None, None) => None,
            _ => anyhow::bail!("TLS needs both --tls-cert and --tls-key"),
        };
        Ok(Self {
            header_timeout: s.header_timeout,
            shutdown_grace: s.shutdown_grace,
            max_clients: client_ceiling(open_file_limit(), s.max_connections),
            tls,
        })
    }
}

/// Descriptors kept back from clients: the listener, logs, the migration
/// files, the PostgreSQL change listener, and a margin.
const RESERVED_DESCRIPTORS: u64 = 64;

/// Connections allowed when the process may open `file_limit` descriptors
/// and the database pool holds up to `db_connections` (an SQLite connection
/// holds three: the database, its WAL and its shared memory).
pub fn client_ceiling(file_limit: Option<u64>, db_connections: u32) -> usize {
    let limit = file_limit.unwrap_or(1024);
    let reserved = RESERVED_DESCRIPTORS + 3 * u64::from(db_connections);
    usize::try_from(limit.saturating_sub(reserved).max(16)).unwrap_or(usize::MAX)
}

/// The soft `RLIMIT_NOFILE` of this process; `None` if unlimited or unknown.
pub fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit only writes the struct it is given.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        if rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY {
            #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every unix
            return Some(lim.rlim_cur as u64);
        }
        None
    }
    #[cfg(not(unix))]
    None
}

/// Flipped once, when the service begins to shut down.
pub struct StopSwitch(watch::Sender<bool>);

/// What long-running handlers watch to end early at shutdown.
#[derive(Clone)]
pub struct Stopping(watch::Receiver<bool>);

pub fn stop_switch() -> (StopSwitch, Stopping) {
    let (tx, rx) = watch::channel(false);
    (StopSwitch(tx), Stopping(rx))
}

impl Stopping {
    pub fn is_stopping(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves when shutdown begins (never, if the switch is gone unflipped).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|s| *s).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves; then flips
/// `stop` and lets the connections finish (at most `shutdown_grace`).
pub async fn run(
    router: Router,
    ready_fast_path: Option<crate::http::ReadyFastPath>,
    listener: TcpListener,
    edge: Edge,
    stop: StopSwitch,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let registry = Registry::new(edge.max_clients);
    tracing::info!(max_clients = registry.ceiling(), tls = edge.tls.is_some(), "accepting connections");
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => {
                let tcp = match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        // Not for lack of descriptors (the ceiling sees to
                        // that), but e.g. a connection reset while queued.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let ticket = match registry.admit() {
                    Admission::Serve(t) => t,
                    Admission::Refuse => {
                        tracing::warn!(open = registry.len(), "every connection is busy; refusing one");
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let conn = Conn {
                    router: router.clone(),
                    fast: ready_fast_path.clone(),
                    slot: ticket.slot.clone(),
                    edge: edge.clone(),
                    stop: stop.0.subscribe(),
                };
                tasks.spawn(async move {
                    // Boxed: a TLS connection's state is larger, and the
                    // task of a plain one would otherwise be that size too.
                    match conn.edge.tls.clone() {
                        Some(acceptor) => Box::pin(conn.serve_tls(tcp, acceptor)).await,
                        None => conn.serve(tcp).await,
                    }
                    drop(ticket);
                });
            }
        }
    }
    drop(listener);
    stop.0.send_replace(true);
    tracing::info!(open = tasks.len(), "stopped accepting; finishing requests in flight");
    let drained = tokio::time::timeout(edge.shutdown_grace, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(open = tasks.len(), grace = ?edge.shutdown_grace, "connections still open after the grace period; closing them");
        tasks.shutdown().await;
    }
    Ok(())
}

/// One accepted connection.
struct Conn {
    router: Router,
    fast: Option<crate::http::ReadyFastPath>,
    slot: Arc<Slot>,
    edge: Edge,
    stop: watch::Receiver<bool>,
}

impl Conn {
    async fn serve_tls(mut self, tcp: tokio::net::TcpStream, acceptor: TlsAcceptor) {
        let handshake = tokio::time::timeout(self.edge.header_timeout, acceptor.accept(tcp));
        let stream = tokio::select! {
            r = handshake => match r {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!("TLS handshake timed out"),
            },
            _ = self.slot.evict.notified() => return,
            _ = self.stop.wait_for(|s| *s) => return,
        };
        self.serve(stream).await
    }

    async fn serve<I>(mut self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (router, slot, fast) = (self.router.clone(), self.slot.clone(), self.fast.clone());
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let busy = Busy::new(&slot);
            let answered = fast.as_ref().and_then(|f| f.answer(&req));
            // Boxed: a long-poll's state, not carried by every request.
            let waits = match answered {
                None => fast.as_ref().and_then(|f| f.long_poll(&req)).map(Box::new),
                Some(_) => None,
            };
            let router = router.clone();
            async move {
                if let Some(resp) = answered {
                    drop(busy);
                    return Ok(resp);
                }
                if let Some(mut waits) = waits {
                    if Box::pin(waits.admit()).await {
                        // While it waits, the connection holds the wait's
                        // own state and hyper's buffers, nothing more.
                        drop(req);
                        let resp = Box::pin(waits.answer()).await;
                        drop(busy);
                        return Ok(resp);
                    }
                }
                let resp = router.oneshot(req).await;
                drop(busy);
                resp
            }
        });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.edge.header_timeout)
            .serve_connection(TokioIo::new(wire::WireErrors::new(io)), service);
        tokio::pin!(conn);
        tokio::select! {
            biased;
            r = conn.as_mut() => return log_end(r),
            // Made room for a newer connection: nothing is in progress here.
            _ = self.slot.evict.notified() => return,
            _ = self.stop.wait_for(|s| *s) => {}
        }
        // Shutting down. A connection between requests, or still sending a
        // head, closes now; one with a request in progress finishes it.
        if self.slot.is_idle() {
            return;
        }
        conn.as_mut().graceful_shutdown();
        tokio::select! {
            r = conn => log_end(r),
            _ = self.slot.evict.notified() => {}
        }
    }
}

fn log_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_leaves_room_for_the_pool_and_files() {
        assert_eq!(client_ceiling(Some(256), 10), 256 - 64 - 30);
        assert_eq!(client_ceiling(Some(1 << 20), 10), (1 << 20) - 94);
        assert_eq!(client_ceiling(Some(50), 10), 16, "a floor, however low the limit");
        assert_eq!(client_ceiling(None, 10), 1024 - 94);
    }
}
