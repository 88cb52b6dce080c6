//! PostgreSQL, for production: several stateless replicas share one database.
//!
//! Writers serialise on one transaction-scoped advisory lock, and every
//! committed change is announced with `NOTIFY` so that each replica's
//! readiness cache and long-poll waiters hear of it.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Postgres};
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
    sqlx::migrate!("./migrations/postgres").run(&pool).await.map_err(super::migration_error)?;
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

/// Rule 1's shared write lock as a condition, for a statement that is its
/// own transaction ([`super::SqlStore::write_alone`]): taken before the
/// statement's first row, and again for each (shared locks stack, and all
/// go at the statement's end).
pub(super) fn shared_write_lock() -> String {
    format!("pg_advisory_xact_lock_shared({WRITE_LOCK}) IS NOT NULL")
}

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
/// row; PostgreSQL would then refuse one of the two.) The feed holder may
/// also wait for a name another transaction is storing in `audit_names`
/// (`names.rs`): that one stores nothing else and takes no other lock, so
/// it finishes.
pub(super) async fn begin_write(pool: &PgPool, scope: Scope<'_>) -> sqlx::Result<PgTx> {
    let mut tx = PgTx { conn: Some(pool.acquire().await?) };
    // Cancelled or failed from here on, the dropped `tx` rolls back.
    simple(tx.conn(), &begin_sql(scope)).await?;
    Ok(tx)
}

/// `BEGIN` and the locks of `scope` (rules 1 and 2 of [`begin_write`]) as
/// one simple query: one round trip instead of two. The lock ids are
/// numbers, written into the text. A keyed write takes the write lock
/// shared, then the lock of each key in ascending id order: a function scan
/// gives `unnest`'s rows in order, and each row's condition, which takes the
/// write lock (again: shared locks stack, and all go at the transaction's
/// end), runs before the aggregate takes that row's key.
fn begin_sql(scope: Scope<'_>) -> String {
    match scope {
        Scope::Registry => format!("BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"),
        Scope::Keys(keys) => {
            let mut ids: Vec<i64> = keys.iter().map(|k| key_lock(k)).collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() {
                return format!("BEGIN; SELECT pg_advisory_xact_lock_shared({WRITE_LOCK})");
            }
            let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
            format!(
                "BEGIN; SELECT count(pg_advisory_xact_lock(k)) FROM unnest(ARRAY[{}]::int8[]) AS k \
                 WHERE pg_advisory_xact_lock_shared({WRITE_LOCK}) IS NOT NULL",
                ids.join(", ")
            )
        }
    }
}

/// A write transaction on PostgreSQL: a pooled connection on which
/// [`begin_write`] ran `BEGIN` with the transaction's locks. Dropped before
/// it commits (an error, a cancelled request, even while a lock is awaited)
/// it rolls back in a task of its own, which first waits for whatever the
/// connection still has under way, and only then returns the connection to
/// the pool: no connection goes back holding a transaction or a lock.
pub struct PgTx {
    conn: Option<PoolConnection<Postgres>>,
}

impl PgTx {
    pub fn conn(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("an open transaction has its connection")
    }

    pub async fn commit(self) -> sqlx::Result<()> {
        self.commit_after(Vec::new()).await
    }

    /// Sends `notices` on [`CHANNEL`] and commits, in one round trip (one
    /// simple query): PostgreSQL delivers them at the `COMMIT`, and not at
    /// all if it fails. A statement that fails stops the query there, and
    /// the transaction is rolled back as on any failure.
    pub(super) async fn commit_after(mut self, notices: Vec<String>) -> sqlx::Result<()> {
        let mut sql = String::new();
        for n in &notices {
            sql.push_str(&notify_sql(n));
            sql.push_str("; ");
        }
        sql.push_str("COMMIT");
        simple(self.conn(), &sql).await?;
        // Committed: the connection goes back to the pool as it is.
        self.conn.take();
        Ok(())
    }

    #[cfg(test)]
    pub async fn rollback(mut self) -> sqlx::Result<()> {
        simple(self.conn(), "ROLLBACK").await?;
        self.conn.take();
        Ok(())
    }
}

impl Drop for PgTx {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(async move {
                // Fails when `BEGIN` never ran (a warning only) or the
                // connection broke: then it is closed, not pooled.
                if let Err(e) = simple(&mut conn, "ROLLBACK").await {
                    tracing::debug!(error = %e, "rolling back a dropped write");
                    conn.close_on_drop();
                }
            })),
            // No runtime to roll back on: closing the connection does.
            Err(_) => conn.close_on_drop(),
        }
    }
}

/// Runs `sql`, one or more statements without parameters, as one simple
/// query: one round trip. (Boxed, as `sqlite::run`, so that the futures
/// that await it stay `Send` for every lifetime.)
fn simple<'c>(c: &'c mut PgConnection, sql: &'c str) -> Pin<Box<dyn Future<Output = sqlx::Result<()>> + Send + 'c>> {
    use sqlx::Executor;
    Box::pin(async move { c.execute(sql).await.map(drop) })
}

/// `text` as a PostgreSQL string constant: an escape string (`E'…'`), whose
/// meaning does not depend on `standard_conforming_strings`, with its
/// backslashes and quotes escaped. (No string can hold a NUL; notices are
/// JSON, which writes one as `\u0000`.)
fn quoted(text: &str) -> String {
    let mut q = String::with_capacity(text.len() + 4);
    q.push_str("E'");
    for ch in text.chars() {
        match ch {
            '\\' => q.push_str("\\\\"),
            '\'' => q.push_str("\\'"),
            c => q.push(c),
        }
    }
    q.push('\'');
    q
}

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

/// Sends `notice` on [`CHANNEL`] (delivered at the `COMMIT`), then takes the
/// feed's lock ([`lock_feed`]), in one round trip.
pub(super) async fn notify_and_lock_feed(c: &mut PgConnection, notice: &str) -> sqlx::Result<()> {
    let sql = format!("{}; SELECT pg_advisory_xact_lock({FEED_LOCK})", notify_sql(notice));
    simple(c, &sql).await
}

/// The statement that sends `notice` on [`CHANNEL`], its text written in.
fn notify_sql(notice: &str) -> String {
    format!("SELECT pg_notify('{CHANNEL}', {})", quoted(notice))
}

/// The payload that tells the other replicas of `change`, written by the
/// transaction `token` names: without its partitions (the whole dataset
/// then) when they would not fit.
pub(super) fn notice(change: &Change, wake: Wake, token: &str) -> String {
    let mut notice = Notice { token: token.to_owned(), change: change.clone(), quiet: wake == Wake::Nobody };
    let payload = serde_json::to_string(&notice).expect("a change serialises");
    if payload.len() <= MAX_PAYLOAD {
        return payload;
    }
    notice.change.partitions = None;
    serde_json::to_string(&notice).expect("a change serialises")
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
    async fn held(tx: &mut PgTx) -> Vec<(String, i64)> {
        let mut held: Vec<(String, i64)> = sqlx::query_as(
            "SELECT mode, (classid::bigint << 32) | objid::bigint FROM pg_locks \
             WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        )
        .fetch_all(tx.conn())
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
                sqlx::query_as(others).bind(&ids).bind(WRITE_LOCK).fetch_one(registry.conn()).await.unwrap();
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

#[cfg(test)]
mod tx_tests {
    use super::*;

    /// A pool of its own for one test, its sessions named `name`, so that
    /// what they hold can be told from other tests' running meanwhile.
    async fn own_pool(name: &str) -> Option<PgPool> {
        let shared = test_pool().await?;
        let options = shared.connect_options().as_ref().clone().application_name(name);
        Some(PgPoolOptions::new().max_connections(4).connect_with(options).await.unwrap())
    }

    /// (advisory locks on `key`, sessions named `name` in a transaction),
    /// seen from a session of its own.
    async fn busy(pool: &PgPool, name: &str, key: &str) -> (i64, i64) {
        let mut c = PgConnection::connect_with(&pool.connect_options()).await.unwrap();
        let busy = sqlx::query_as(
            "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                       AND (classid::bigint << 32) | objid::bigint = $2), \
                    (SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
                       AND state LIKE 'idle in transaction%')",
        )
        .bind(name)
        .bind(key_lock(key))
        .fetch_one(&mut c)
        .await
        .unwrap();
        drop(c.close().await);
        busy
    }

    /// [`busy`], once the pool's connections had time to settle.
    async fn settled(pool: &PgPool, name: &str, key: &str) -> (i64, i64) {
        let mut seen = busy(pool, name, key).await;
        for _ in 0..100 {
            if seen == (0, 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            seen = busy(pool, name, key).await;
        }
        seen
    }

    /// A write cancelled while `BEGIN` and its locks wait (one query, see
    /// [`begin_sql`]) gives its connection back neither in a transaction
    /// nor holding a lock, once the lock it waited for was granted: the
    /// keys are free for the next writer.
    #[tokio::test]
    async fn a_write_cancelled_while_it_waits_for_its_locks_leaves_no_transaction_behind() {
        let name = "tx_test_cancelled";
        let Some(pool) = own_pool(name).await else { return };
        let keys = vec!["dataset:cancelled.begin".to_owned()];
        let registry = begin_write(&pool, Scope::Registry).await.expect("begin");
        let waiting = tokio::spawn({
            let (pool, keys) = (pool.clone(), keys.clone());
            async move { begin_write(&pool, Scope::Keys(&keys)).await.map(drop) }
        });
        let mut waited = false;
        for _ in 0..100 {
            let (n,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1",
            )
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap();
            if n > 0 {
                waited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(waited, "the keyed write never waited for the write lock");
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        registry.commit().await.expect("commit");
        assert_eq!(
            settled(&pool, name, &keys[0]).await,
            (0, 0),
            "(key locks, open transactions) left by the cancelled write"
        );
        let next = tokio::time::timeout(Duration::from_secs(5), begin_write(&pool, Scope::Keys(&keys))).await;
        next.expect("the keys are free").expect("begin").commit().await.expect("commit");
    }

    /// A write dropped after a failed statement is rolled back: what it
    /// wrote is gone, and its connection holds nothing.
    #[tokio::test]
    async fn a_write_dropped_after_an_error_is_rolled_back() {
        let name = "tx_test_dropped";
        let Some(pool) = own_pool(name).await else { return };
        sqlx::query("CREATE TABLE IF NOT EXISTS tx_test_dropped (k TEXT PRIMARY KEY)").execute(&pool).await.unwrap();
        sqlx::query("DELETE FROM tx_test_dropped").execute(&pool).await.unwrap();
        let keys = vec!["dataset:dropped.write".to_owned()];
        {
            let mut tx = begin_write(&pool, Scope::Keys(&keys)).await.expect("begin");
            sqlx::query("INSERT INTO tx_test_dropped VALUES ('a')").execute(tx.conn()).await.unwrap();
            let failed = sqlx::query("INSERT INTO tx_test_dropped VALUES ('a')").execute(tx.conn()).await;
            assert!(failed.is_err(), "a duplicate key fails");
        }
        assert_eq!(
            settled(&pool, name, &keys[0]).await,
            (0, 0),
            "(key locks, open transactions) left by the dropped write"
        );
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM tx_test_dropped").fetch_one(&pool).await.unwrap();
        assert_eq!(n, 0, "the dropped write's row stayed");
        sqlx::query("DROP TABLE tx_test_dropped").execute(&pool).await.unwrap();
    }

    /// The notices a commit sends with its `COMMIT` reach a listener once,
    /// byte for byte, quotes and backslashes included; a transaction that
    /// fails instead of committing sends none.
    #[tokio::test]
    async fn notices_sent_with_the_commit_arrive_unchanged_and_only_if_it_commits() {
        let Some(pool) = own_pool("tx_test_notices").await else { return };
        let mut listener = PgListener::connect_with(&pool).await.unwrap();
        listener.listen(CHANNEL).await.unwrap();
        // Other tests may notify on the channel meanwhile: ours carry this.
        let mark = "tx_test_notices";
        let tricky = format!(r#"{{"dataset":"it's","partitions":["a\\b","c\"d","\\'","é"],"m":"{mark}"}}"#);
        let second = format!("second {mark}");

        let mut failed = begin_write(&pool, Scope::Keys(&[])).await.expect("begin");
        assert!(sqlx::query("SELECT 1/0").execute(failed.conn()).await.is_err());
        let refused = failed.commit_after(vec![format!("never {mark}")]).await;
        assert!(refused.is_err(), "a failed transaction committed");

        let tx = begin_write(&pool, Scope::Keys(&[])).await.expect("begin");
        tx.commit_after(vec![tricky.clone(), second.clone()]).await.expect("commit");
        let mut ours = Vec::new();
        while let Ok(n) = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await {
            let n = n.unwrap();
            if n.payload().contains(mark) {
                ours.push(n.payload().to_owned());
            }
        }
        assert_eq!(ours, [tricky, second]);
    }

    /// A statement that is its own transaction with [`shared_write_lock`] in
    /// its condition waits for a registry-wide write, and writes nothing
    /// until that one is done.
    #[tokio::test]
    async fn a_statement_alone_waits_for_a_registry_wide_write() {
        let Some(pool) = own_pool("tx_test_alone").await else { return };
        sqlx::query("CREATE TABLE IF NOT EXISTS tx_test_alone (k TEXT)").execute(&pool).await.unwrap();
        sqlx::query("DELETE FROM tx_test_alone").execute(&pool).await.unwrap();
        let registry = begin_write(&pool, Scope::Registry).await.expect("begin");
        let insert = tokio::spawn({
            let pool = pool.clone();
            let sql = format!(
                "INSERT INTO tx_test_alone SELECT * FROM (VALUES ('a'), ('b')) AS v WHERE {}",
                shared_write_lock()
            );
            async move { sqlx::query(&sql).execute(&pool).await.map(|r| r.rows_affected()) }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!insert.is_finished(), "the statement went on under a registry-wide write");
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM tx_test_alone").fetch_one(&pool).await.unwrap();
        assert_eq!(n, 0);
        registry.commit().await.expect("commit");
        assert_eq!(insert.await.unwrap().expect("insert"), 2);
        sqlx::query("DROP TABLE tx_test_alone").execute(&pool).await.unwrap();
    }
}
