//! PostgreSQL, for production: several stateless replicas share one database.
//!
//! Writers serialise on one transaction-scoped advisory lock, and every
//! committed change is announced with `NOTIFY` so that each replica's
//! readiness cache and long-poll waiters hear of it.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};

use super::DbOptions;
use crate::changes::{Change, ChangeHub};

pub(super) const CHANNEL: &str = "batchgate_changes";

/// `pg_notify` payloads must stay under 8000 bytes.
const MAX_PAYLOAD: usize = 7000;

pub(super) async fn connect(url: &str, opts: &DbOptions) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(opts.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await?;
    sqlx::migrate!("./migrations/postgres").run(&pool).await?;
    Ok(pool)
}

/// The advisory lock every writing transaction holds until it ends (the
/// bytes of "batchgate" as a number, so it is recognisable in `pg_locks`).
const WRITE_LOCK: i64 = 0x6261_7463_6867_6174;

/// Begins a write transaction holding the registry's write lock.
///
/// All writers, on every replica, take the same lock. A commit can change
/// partitions of many datasets (lineage marks downstream partitions stale),
/// and the change feed must number changes in commit order; one lock gives
/// both without deadlocks. Registry writes are a few per batch, so the
/// serialisation costs nothing noticeable; readers never take it.
pub(super) async fn begin_write(pool: &PgPool) -> sqlx::Result<Transaction<'static, Postgres>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(WRITE_LOCK).execute(&mut *tx).await?;
    Ok(tx)
}

pub(super) async fn notify(tx: &mut Transaction<'static, Postgres>, change: &Change) -> sqlx::Result<()> {
    let mut payload = serde_json::to_string(change).expect("a change serialises");
    if payload.len() > MAX_PAYLOAD {
        let whole = Change { dataset: change.dataset.clone(), partitions: None };
        payload = serde_json::to_string(&whole).expect("a change serialises");
    }
    sqlx::query("SELECT pg_notify($1, $2)").bind(CHANNEL).bind(payload).execute(&mut **tx).await?;
    Ok(())
}

/// Listens for changes committed by any replica (this one included: a
/// change published twice only costs one extra cache miss). While the
/// listening connection is down the hub is suspended: no cache, and waiters
/// re-read, because notifications sent meanwhile are lost.
pub(super) async fn spawn_listener(pool: PgPool, hub: Arc<ChangeHub>) {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let mut ready_tx = Some(ready_tx);
    tokio::spawn(async move {
        loop {
            match listen(&pool).await {
                Ok(mut listener) => {
                    hub.resume();
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                    loop {
                        match listener.try_recv().await {
                            Ok(Some(n)) => match serde_json::from_str::<Change>(n.payload()) {
                                Ok(change) => hub.publish(change),
                                Err(e) => {
                                    tracing::warn!(error = %e, "unreadable change notification")
                                }
                            },
                            Ok(None) | Err(_) => {
                                tracing::warn!("lost the change-notification connection; cache suspended");
                                hub.suspend();
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for changes; retrying");
                    hub.suspend();
                    if pool.is_closed() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
    // Serve only once the first LISTEN is in place (or give up waiting and
    // run uncached until it is).
    let _ = tokio::time::timeout(Duration::from_secs(5), ready_rx).await;
}

async fn listen(pool: &PgPool) -> sqlx::Result<PgListener> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.eager_reconnect(false);
    listener.listen(CHANNEL).await?;
    Ok(listener)
}
