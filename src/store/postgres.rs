//! PostgreSQL, for production: several stateless replicas share one database.
//!
//! Writers serialise per dataset on a transaction-scoped advisory lock, and
//! every committed change is announced with `NOTIFY` so that each replica's
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

/// A stable 64-bit key for a dataset's advisory lock (FNV-1a: the same on
/// every replica and every build, unlike `std`'s hasher).
fn lock_key(dataset: &str) -> i64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in dataset.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h as i64
}

pub(super) async fn begin_write(
    pool: &PgPool,
    datasets: &[&str],
) -> sqlx::Result<Transaction<'static, Postgres>> {
    let mut tx = pool.begin().await?;
    // Sorted, so two transactions that lock the same datasets cannot deadlock.
    let mut keys: Vec<i64> = datasets.iter().map(|d| lock_key(d)).collect();
    keys.sort_unstable();
    keys.dedup();
    for k in keys {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(k)
            .execute(&mut *tx)
            .await?;
    }
    Ok(tx)
}

pub(super) async fn notify(
    tx: &mut Transaction<'static, Postgres>,
    change: &Change,
) -> sqlx::Result<()> {
    let mut payload = serde_json::to_string(change).expect("a change serialises");
    if payload.len() > MAX_PAYLOAD {
        let whole = Change {
            dataset: change.dataset.clone(),
            partitions: None,
        };
        payload = serde_json::to_string(&whole).expect("a change serialises");
    }
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(payload)
        .execute(&mut **tx)
        .await?;
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
                                tracing::warn!(
                                    "lost the change-notification connection; cache suspended"
                                );
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

#[cfg(test)]
mod tests {
    #[test]
    fn lock_keys_are_stable_across_builds() {
        assert_eq!(super::lock_key(""), 0xcbf29ce484222325u64 as i64);
        assert_ne!(super::lock_key("a"), super::lock_key("b"));
    }
}
