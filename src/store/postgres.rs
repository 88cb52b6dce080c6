//! PostgreSQL, for production: several stateless replicas share one database.
//!
//! Writers serialise on one transaction-scoped advisory lock, and every
//! committed change is announced with `NOTIFY` so that each replica's
//! readiness cache and long-poll waiters hear of it.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::{mpsc, Notify};

use super::DbOptions;
use crate::changes::{Change, ChangeHub, Wake};

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

/// The registry's write lock (the bytes of "batchgate" as a number, so it is
/// recognisable in `pg_locks`): exclusive for the rare writes that may touch
/// anything, shared for the batch lifecycle's writes, which also lock what
/// they change (see [`begin_write`]).
const WRITE_LOCK: i64 = 0x6261_7463_6867_6174;

/// The feed's lock ("feed-ord"): held from a transaction's first change to
/// the feed (or the first write that may precede one) until it ends, so that
/// feed ids are taken in commit order.
const FEED_LOCK: i64 = 0x6665_6564_2d6f_7264;

/// What a write transaction locks besides the write lock.
pub(super) enum Scope<'a> {
    /// Everything: the write lock exclusively, no other writer runs.
    Registry,
    /// The write lock shared, and these keys (a dataset's name, a task and
    /// date, an idempotency key), each an advisory lock of its own.
    Keys(&'a [String]),
}

/// Begins a write transaction, locked by `scope`.
///
/// The rule, for every writer on every replica (readers never lock):
///
/// 1. Every write first takes `WRITE_LOCK`: exclusively for the rare writes
///    that may touch any dataset (policy changes, scans, invalidations,
///    repairs, tokens, pruning: [`Scope::Registry`]), shared for the batch
///    lifecycle (start, heartbeat, written, commit, fail: [`Scope::Keys`])
///    and for what only appends or touches its own row (audit rows, a
///    token's last use: no keys).
///    An exclusive holder is alone and needs no other lock.
/// 2. A shared holder then takes the advisory lock of each key it works
///    under, in ascending lock-id order: the batch's dataset (which orders
///    leases, "one running batch per partition" and the checks' history), a
///    start's task and date (which orders the numbering of that task's
///    batches of the date, across datasets), and a start's
///    `Idempotency-Key` (unique across datasets).
/// 3. A write that changes the feed takes `FEED_LOCK` last ([`lock_feed`]),
///    before its first write that the feed or lineage depends on (for a
///    commit: before it publishes any partition), and keeps it until it ends.
///    Feed ids are therefore taken in commit order and a reader of
///    `/v1/changes` never sees id N+2 while N+1 may still commit; and the
///    lineage walk (which marks other datasets' partitions stale, and reads
///    the inputs of the partition it publishes) runs with every earlier
///    publish committed. Writes that change no readiness (start, heartbeat,
///    fail, a rejected commit) never take it.
///
/// Locks are only ever taken in this order (write lock, keys ascending,
/// feed), so writers cannot deadlock on advisory locks. The feed holder may
/// wait for a partition row of another dataset (marking it stale) that a
/// writer of that dataset without the feed lock holds; such a writer never
/// asks for the feed lock after touching partition rows (a commit takes it
/// before it publishes), so it finishes and the holder goes on. (Only a
/// writer changing several partitions of a dataset while the feed holder
/// marks several of them stale in another order could meet it row against
/// row; PostgreSQL would then refuse one of the two.)
pub(super) async fn begin_write(pool: &PgPool, scope: Scope<'_>) -> sqlx::Result<Transaction<'static, Postgres>> {
    let mut tx = pool.begin().await?;
    match scope {
        Scope::Registry => {
            sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(WRITE_LOCK).execute(&mut *tx).await?;
        }
        Scope::Keys(keys) => {
            let mut ids: Vec<i64> = keys.iter().map(|k| key_lock(k)).collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() {
                sqlx::query("SELECT pg_advisory_xact_lock_shared($1)").bind(WRITE_LOCK).execute(&mut *tx).await?;
            } else {
                sqlx::query(LOCK_KEYS).bind(WRITE_LOCK).bind(ids).execute(&mut *tx).await?;
            }
        }
    }
    Ok(tx)
}

/// Rule 2 of [`begin_write`] in one round trip (a start has up to three
/// keys): the write lock shared (`$1`), then the lock of each key of `$2`
/// in the array's order. A function scan gives `unnest`'s rows in order, and
/// each row's condition, which takes the write lock (again: shared locks
/// stack, and all go at the transaction's end), runs before the aggregate
/// takes that row's key. `$2` is not empty.
const LOCK_KEYS: &str = "SELECT count(pg_advisory_xact_lock(k)) FROM unnest($2::int8[]) AS k \
     WHERE pg_advisory_xact_lock_shared($1) IS NOT NULL";

/// Takes the feed's lock (rule 3 of [`begin_write`]). Again in the same
/// transaction is a no-op that still costs a round trip: `feed::lock` takes
/// it once.
pub(super) async fn lock_feed(c: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(FEED_LOCK).execute(c).await.map(drop)
}

/// The advisory lock id of a key: FNV-1a of its bytes, kept off the two
/// fixed locks (a collision between keys only serialises them).
fn key_lock(key: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let id = h as i64;
    if id == WRITE_LOCK || id == FEED_LOCK {
        id ^ 1
    } else {
        id
    }
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
    /// The change wakes no long-poll ([`Wake::Nobody`]: a start). Absent
    /// when it may (a replica of an earlier version reads it so, and one of
    /// an earlier version ignores it: waking then costs a look, no more).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    quiet: bool,
}

impl Notice {
    fn wake(&self) -> Wake {
        if self.quiet {
            Wake::Nobody
        } else {
            Wake::Waiters
        }
    }
}

/// Read-your-writes across replicas. A writer does not answer until every
/// other live replica has applied its change to its cache (or `ACK_TIMEOUT`
/// passes, for a replica that died without a word): a client that was told
/// "committed" and then asks another replica gets the new answer. (The
/// writer's own replica published the change before it waits.)
pub(super) struct Acks {
    instance: String,
    alive: Mutex<HashMap<String, Instant>>,
    pending: Mutex<HashMap<String, HashSet<String>>>,
    /// Woken on every acknowledgement heard.
    heard: Notify,
    /// Acknowledgements and hellos to send, on a connection of their own.
    outgoing: mpsc::UnboundedSender<String>,
    outgoing_rx: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
}

impl Acks {
    pub(super) fn new() -> Arc<Self> {
        let (outgoing, rx) = mpsc::unbounded_channel();
        Arc::new(Self {
            instance: uuid::Uuid::new_v4().simple().to_string(),
            alive: Mutex::default(),
            pending: Mutex::default(),
            heard: Notify::new(),
            outgoing,
            outgoing_rx: Mutex::new(Some(rx)),
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

    /// Whether `token` is one of this replica's writes still waiting.
    fn is_own(&self, token: &str) -> bool {
        self.pending.lock().expect("acks lock").contains_key(token)
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
                self.heard.notify_waiters();
            }
            _ => tracing::warn!(message, "unreadable acknowledgement"),
        }
    }

    /// The live replicas, this one aside, that have not acknowledged `token`.
    fn missing(&self, token: &str) -> Vec<String> {
        let now = Instant::now();
        let alive = self.alive.lock().expect("acks lock");
        let pending = self.pending.lock().expect("acks lock");
        let acked = pending.get(token);
        alive
            .iter()
            .filter(|(i, seen)| {
                **i != self.instance && now.duration_since(**seen) < ALIVE_FOR && acked.is_none_or(|a| !a.contains(*i))
            })
            .map(|(i, _)| i.clone())
            .collect()
    }

    /// Waits until every other live replica acknowledged `token`.
    pub(super) async fn wait(&self, token: &str) {
        let deadline = tokio::time::Instant::now() + ACK_TIMEOUT;
        loop {
            // Enabled before looking, so that an acknowledgement heard in
            // between still wakes this waiter.
            let heard = self.heard.notified();
            tokio::pin!(heard);
            heard.as_mut().enable();
            let missing = self.missing(token);
            if missing.is_empty() {
                break;
            }
            if tokio::time::timeout_at(deadline, heard).await.is_err() {
                tracing::warn!(?missing, "replicas did not acknowledge a change in time");
                break;
            }
        }
        self.forget(token);
    }

    fn say(&self, message: String) {
        let _ = self.outgoing.send(message);
    }
}

pub(super) async fn notify(c: &mut PgConnection, change: &Change, wake: Wake, token: &str) -> sqlx::Result<()> {
    let mut notice = Notice { token: token.to_owned(), change: change.clone(), quiet: wake == Wake::Nobody };
    let mut payload = serde_json::to_string(&notice).expect("a change serialises");
    if payload.len() > MAX_PAYLOAD {
        notice.change.partitions = None;
        payload = serde_json::to_string(&notice).expect("a change serialises");
    }
    sqlx::query("SELECT pg_notify($1, $2)").bind(CHANNEL).bind(payload).execute(c).await?;
    Ok(())
}

/// A write's token for its notices, and the change it notified already (a
/// publish's own, before the feed's lock): registered with [`Acks`] so that
/// the other replicas' acknowledgements are counted, and forgotten when
/// dropped (a write that failed or was cancelled) unless it was waited for.
pub(super) struct Announced {
    acks: Arc<Acks>,
    token: String,
    sent: Option<Change>,
}

impl Announced {
    pub(super) fn new(acks: Arc<Acks>) -> Self {
        let token = acks.register();
        Self { acks, token, sent: None }
    }

    /// Notes that `change` was notified under this token.
    pub(super) fn sent(&mut self, change: Change) {
        self.sent = Some(change);
    }

    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// The change notified already, if any.
    pub(super) fn change(&self) -> Option<&Change> {
        self.sent.as_ref()
    }

    /// Waits for the other live replicas to apply the write's changes.
    pub(super) async fn wait(self) {
        self.acks.wait(&self.token).await;
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        self.acks.forget(&self.token);
    }
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
            acks.say(format!("hello|{}", acks.instance));
        }
    });
    if let Some(rx) = acks.outgoing_rx.lock().expect("acks lock").take() {
        tokio::spawn(speak(pool.clone(), rx));
    }
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
                                    let wake = notice.wake();
                                    hub.apply(notice.change, wake);
                                    if !acks.is_own(&notice.token) {
                                        acks.say(format!("ack|{}|{}", notice.token, acks.instance));
                                    }
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

/// Most acknowledgements sent in one statement.
const SAY_BATCH: usize = 256;

/// Sends the replica's hellos and acknowledgements on a connection of its
/// own, never the pool's: under load, writers hold every pooled connection
/// while they wait for acknowledgements, which must not queue behind them.
/// Whatever queued meanwhile goes in one statement. While the connection is
/// down messages are dropped (a writer waits `ACK_TIMEOUT` at most).
async fn speak(pool: PgPool, mut rx: mpsc::UnboundedReceiver<String>) {
    let options = pool.connect_options();
    let mut conn: Option<PgConnection> = None;
    let mut batch = Vec::with_capacity(SAY_BATCH);
    while rx.recv_many(&mut batch, SAY_BATCH).await > 0 {
        if pool.is_closed() {
            return;
        }
        if conn.is_none() {
            match PgConnection::connect_with(&options).await {
                Ok(c) => conn = Some(c),
                Err(e) => tracing::warn!(error = %e, "cannot connect to send acknowledgements"),
            }
        }
        if let Some(c) = conn.as_mut() {
            let sent = sqlx::query("SELECT pg_notify($1, m) FROM unnest($2::text[]) AS m")
                .bind(ACK_CHANNEL)
                .bind(&batch)
                .execute(&mut *c)
                .await;
            if let Err(e) = sent {
                tracing::warn!(error = %e, "cannot send acknowledgements; reconnecting");
                conn = None;
            }
        }
        batch.clear();
    }
}

#[cfg(test)]
mod notice_tests {
    use super::*;

    #[test]
    fn a_notice_says_quiet_only_when_its_change_wakes_nobody_and_reads_without_it() {
        let change = Change { dataset: "d".into(), partitions: Some(vec!["dt=1".into()]) };
        let loud = Notice { token: "t".into(), change: change.clone(), quiet: false };
        let quiet = Notice { token: "t".into(), change, quiet: true };
        let loud_text = serde_json::to_string(&loud).unwrap();
        assert!(!loud_text.contains("quiet"), "the payload of earlier versions: {loud_text}");
        assert!(serde_json::to_string(&quiet).unwrap().contains(r#""quiet":true"#));
        // A notice from a replica of an earlier version wakes waiters.
        let earlier: Notice = serde_json::from_str(r#"{"token":"t","dataset":"d","partitions":["dt=1"]}"#).unwrap();
        assert_eq!(earlier.wake(), Wake::Waiters);
        let read: Notice = serde_json::from_str(&serde_json::to_string(&quiet).unwrap()).unwrap();
        assert_eq!(read.wake(), Wake::Nobody);
    }
}

/// The PostgreSQL server the tests use (`BATCHGATE_TEST_PG_URL`, as the API
/// tests), as a small pool; `None` with a notice when there is none, a
/// failure under CI.
#[cfg(test)]
pub(super) async fn test_pool() -> Option<PgPool> {
    let url =
        std::env::var("BATCHGATE_TEST_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    match PgPoolOptions::new().max_connections(2).connect(&url).await {
        Ok(pool) => Some(pool),
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("**** SKIPPED: PostgreSQL test, no server at {url}: {e}");
            None
        }
        Err(e) => panic!("no PostgreSQL at {url}: {e}"),
    }
}

#[cfg(test)]
mod lock_tests {
    use super::*;

    /// The advisory locks the connection's transaction holds: (mode, key).
    async fn held(tx: &mut Transaction<'static, Postgres>) -> Vec<(String, i64)> {
        let mut held: Vec<(String, i64)> = sqlx::query_as(
            "SELECT mode, (classid::bigint << 32) | objid::bigint FROM pg_locks \
             WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        )
        .fetch_all(&mut **tx)
        .await
        .unwrap();
        held.sort();
        held
    }

    /// A batch write begins holding the write lock shared and each of its
    /// keys' locks exclusively (rule 2 of [`begin_write`]); a registry-wide
    /// write holds the write lock exclusively, and nothing else.
    #[tokio::test]
    async fn a_keyed_write_begins_holding_the_shared_write_lock_and_its_keys() {
        let Some(pool) = test_pool().await else { return };
        let keys = ["dataset:sales.orders".to_owned(), "idempotency:run-1".to_owned()];
        let mut tx = begin_write(&pool, Scope::Keys(&keys)).await.expect("begin");
        let mut want = vec![
            ("ShareLock".to_owned(), WRITE_LOCK),
            ("ExclusiveLock".to_owned(), key_lock(&keys[0])),
            ("ExclusiveLock".to_owned(), key_lock(&keys[1])),
        ];
        want.sort();
        assert_eq!(held(&mut tx).await, want);
        tx.rollback().await.unwrap();

        let mut tx = begin_write(&pool, Scope::Registry).await.expect("begin");
        assert_eq!(held(&mut tx).await, [("ExclusiveLock".to_owned(), WRITE_LOCK)]);
    }

    /// The write lock comes before the keys' (rule 2, all in one statement):
    /// a keyed write that waits for a registry-wide write holds none of its
    /// keys meanwhile, and takes them all once it may go on.
    #[tokio::test]
    async fn a_keyed_write_takes_no_key_while_it_waits_for_the_write_lock() {
        let Some(pool) = test_pool().await else { return };
        let mut registry = begin_write(&pool, Scope::Registry).await.expect("begin");
        let keys = vec!["dataset:lock-order.test".to_owned(), "seq:lock-order:2026-01-01".to_owned()];
        let ids: Vec<i64> = keys.iter().map(|k| key_lock(k)).collect();
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move {
                let mut tx = begin_write(&pool, Scope::Keys(&keys)).await.expect("begin");
                let held = held(&mut tx).await;
                tx.rollback().await.unwrap();
                held
            }
        });
        // Other sessions' advisory locks on the keys (granted or not), and
        // whether anyone is waiting for the write lock.
        let others = "SELECT count(*) FILTER (WHERE (classid::bigint << 32) | objid::bigint = ANY($1)), \
             count(*) FILTER (WHERE (classid::bigint << 32) | objid::bigint = $2 AND NOT granted) \
             FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()";
        let mut waiting = false;
        for _ in 0..100 {
            let (keys_held, write_waiters): (i64, i64) =
                sqlx::query_as(others).bind(&ids).bind(WRITE_LOCK).fetch_one(&mut *registry).await.unwrap();
            assert_eq!(keys_held, 0, "a keyed write took a key before the write lock");
            if write_waiters > 0 && waiting {
                break;
            }
            waiting = write_waiters > 0;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(waiting, "the keyed write never waited for the write lock");
        registry.rollback().await.unwrap();
        let mut want = vec![("ShareLock".to_owned(), WRITE_LOCK)];
        want.extend(ids.iter().map(|&id| ("ExclusiveLock".to_owned(), id)));
        want.sort();
        assert_eq!(waiter.await.unwrap(), want);
    }
}
