//! PostgreSQL, for production: several stateless replicas share one database.
//!
//! Writers serialise on one transaction-scoped advisory lock, and every
//! committed change is announced with `NOTIFY` so that each replica's
//! readiness cache and long-poll waiters hear of it.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};

use super::DbOptions;
use crate::changes::{Change, ChangeHub};

pub(super) const CHANNEL: &str = "batchgate_changes";

/// `pg_notify` payloads must stay under 8000 bytes.
const MAX_PAYLOAD: usize = 7000;

pub(super) async fn connect(url: &str, opts: &DbOptions) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(url)?;
    // One connection first, without the pool's retries: a server that is
    // not there is reported at once, with its address and the cause
    // (the pool would retry until its timeout and say only "timed out").
    let at = format!("{}:{}", options.get_host(), options.get_port());
    match tokio::time::timeout(opts.timeout, PgConnection::connect_with(&options)).await {
        Ok(Ok(first)) => drop(first.close().await),
        Ok(Err(e)) => return Err(anyhow::Error::new(e).context(format!("cannot connect to PostgreSQL at {at}"))),
        Err(_) => anyhow::bail!("cannot connect to PostgreSQL at {at}: no answer within {:?}", opts.timeout),
    }
    let pool = PgPoolOptions::new()
        .max_connections(opts.max_connections)
        .acquire_timeout(opts.timeout)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {at}"))?;
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

/// Replicas say they are alive, and acknowledge each change they applied, here.
const ACK_CHANNEL: &str = "batchgate_acks";

/// How often a replica says it is alive, and how long after its last word it
/// still counts as one whose acknowledgement a writer waits for.
const HELLO_EVERY: Duration = Duration::from_secs(1);
const ALIVE_FOR: Duration = Duration::from_secs(3);

/// Longest a writer waits for the other replicas to apply its change.
const ACK_TIMEOUT: Duration = Duration::from_millis(500);

/// A change as notified: the token names the writing transaction, so that
/// replicas can acknowledge it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Notice {
    token: String,
    #[serde(flatten)]
    change: Change,
}

/// Read-your-writes across replicas. A writer does not answer until every
/// live replica has applied its change to its cache (or `ACK_TIMEOUT`
/// passes, for a replica that died without a word): a client that was told
/// "committed" and then asks another replica gets the new answer.
pub(super) struct Acks {
    instance: String,
    alive: Mutex<HashMap<String, Instant>>,
    pending: Mutex<HashMap<String, HashSet<String>>>,
}

impl Acks {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            instance: uuid::Uuid::new_v4().simple().to_string(),
            alive: Mutex::default(),
            pending: Mutex::default(),
        })
    }

    /// A fresh token for one transaction's changes, registered before commit.
    pub(super) fn register(&self) -> String {
        let token = uuid::Uuid::new_v4().simple().to_string();
        self.pending.lock().expect("acks lock").insert(token.clone(), HashSet::new());
        token
    }

    pub(super) fn forget(&self, token: &str) {
        self.pending.lock().expect("acks lock").remove(token);
    }

    fn heard(&self, message: &str) {
        match message.split('|').collect::<Vec<_>>()[..] {
            ["hello", instance] => {
                self.alive.lock().expect("acks lock").insert(instance.to_owned(), Instant::now());
            }
            ["ack", token, instance] => {
                self.alive.lock().expect("acks lock").insert(instance.to_owned(), Instant::now());
                if let Some(acked) = self.pending.lock().expect("acks lock").get_mut(token) {
                    acked.insert(instance.to_owned());
                }
            }
            _ => tracing::warn!(message, "unreadable acknowledgement"),
        }
    }

    /// Waits until every live replica acknowledged `token`.
    pub(super) async fn wait(&self, token: &str) {
        let deadline = Instant::now() + ACK_TIMEOUT;
        loop {
            let missing: Vec<String> = {
                let now = Instant::now();
                let alive = self.alive.lock().expect("acks lock");
                let pending = self.pending.lock().expect("acks lock");
                let acked = pending.get(token);
                alive
                    .iter()
                    .filter(|(i, seen)| now.duration_since(**seen) < ALIVE_FOR && acked.is_none_or(|a| !a.contains(*i)))
                    .map(|(i, _)| i.clone())
                    .collect()
            };
            if missing.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                tracing::warn!(?missing, "replicas did not acknowledge a change in time");
                break;
            }
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
        self.forget(token);
    }
}

pub(super) async fn notify(tx: &mut Transaction<'static, Postgres>, change: &Change, token: &str) -> sqlx::Result<()> {
    let mut notice = Notice { token: token.to_owned(), change: change.clone() };
    let mut payload = serde_json::to_string(&notice).expect("a change serialises");
    if payload.len() > MAX_PAYLOAD {
        notice.change.partitions = None;
        payload = serde_json::to_string(&notice).expect("a change serialises");
    }
    sqlx::query("SELECT pg_notify($1, $2)").bind(CHANNEL).bind(payload).execute(&mut **tx).await?;
    Ok(())
}

/// Listens for changes committed by any replica (this one included: a
/// change published twice only costs one extra cache miss). While the
/// listening connection is down the hub is suspended: no cache, and waiters
/// re-read, because notifications sent meanwhile are lost.
pub(super) async fn spawn_listener(pool: PgPool, hub: Arc<ChangeHub>, acks: Arc<Acks>) {
    let hello = (pool.clone(), acks.clone());
    tokio::spawn(async move {
        let (pool, acks) = hello;
        let mut tick = tokio::time::interval(HELLO_EVERY);
        while !pool.is_closed() {
            tick.tick().await;
            let _ = say(&pool, &format!("hello|{}", acks.instance)).await;
        }
    });
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
                            Ok(Some(n)) if n.channel() == ACK_CHANNEL => acks.heard(n.payload()),
                            Ok(Some(n)) => match serde_json::from_str::<Notice>(n.payload()) {
                                Ok(notice) => {
                                    hub.publish(notice.change);
                                    let ack = format!("ack|{}|{}", notice.token, acks.instance);
                                    let pool = pool.clone();
                                    tokio::spawn(async move { say(&pool, &ack).await });
                                }
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
    listener.listen_all([CHANNEL, ACK_CHANNEL]).await?;
    Ok(listener)
}

async fn say(pool: &PgPool, message: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)").bind(ACK_CHANNEL).bind(message).execute(pool).await.map(drop)
}
