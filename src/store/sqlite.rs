//! SQLite, the embedded default: one file, WAL, one writer at a time.
//!
//! Writes go through one dedicated connection, the write lane. Writers queue
//! for it in the process (a fair mutex) instead of on SQLite's busy timeout,
//! and queued writers share one transaction, so several decisions share one
//! `COMMIT` and its fsync (group commit, `synchronous=FULL` kept):
//!
//! - the first writer of a group opens `BEGIN IMMEDIATE`; every writer works
//!   inside its own `SAVEPOINT`, so its rollback (an error, a rejected path
//!   that rolls back, a cancelled request) undoes only its own work;
//! - a writer that commits releases its savepoint and, while others queue
//!   (and the group is young and small), hands the lane to the next one and
//!   waits for the group's `COMMIT`; the last one commits and tells everyone;
//! - every statement is a round trip to sqlx's worker thread, which is what
//!   bounds the lane's throughput (not the fsync): a writer handing over
//!   releases its savepoint and opens the next writer's in one round trip,
//!   a writer's rollback keeps its (now empty) savepoint for the next one,
//!   and the last writer's `COMMIT` ends its savepoint with the group;
//! - each member's changes are published to the hub, and its answer given,
//!   only after the `COMMIT` succeeded; a failed `COMMIT` fails every member
//!   and leaves nothing of the group.
//!
//! Reads use the pool's other connections (WAL readers) and see only
//! committed groups. Other processes on the same file still queue on the
//! busy timeout.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{SqliteConnection, SqlitePool};
use tokio::sync::{oneshot, Mutex, OwnedMutexGuard};

use super::DbOptions;
use crate::changes::{Change, ChangeHub, Wake};
use crate::telemetry::Metrics;

pub(super) async fn connect(url: &str, opts: &DbOptions) -> anyhow::Result<SqlitePool> {
    super::sqlite_memory::configure();
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a commit the service acknowledged survives a power cut, not
        // only a killed process.
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        // A writer waits this long for another process's lock, then the
        // request answers 503 storage_unavailable.
        .busy_timeout(opts.timeout);
    let pool = SqlitePoolOptions::new()
        // No ping before each read: a connection to a file does not drop,
        // and on SQLite the ping is one more round trip to sqlx's worker
        // thread (two thread wake-ups) for every read (issue 14).
        .test_before_acquire(false)
        .max_connections(opts.max_connections.max(2))
        .acquire_timeout(opts.timeout)
        .connect_with(options)
        .await?;
    sqlx::migrate!("./migrations/sqlite").run(&pool).await.map_err(super::migration_error)?;
    // Statistics for the planner, refreshed for the tables whose size moved a
    // lot since the last run (or that never had any), each index sampled at
    // most `analysis_limit` rows deep so a 10M-batch file still starts in
    // milliseconds. PostgreSQL's autovacuum does the same on its own.
    sqlx::raw_sql("PRAGMA analysis_limit = 400; PRAGMA optimize = 0x10002;").execute(&pool).await?;
    Ok(pool)
}

/// Most writers one `COMMIT` covers.
const MAX_MEMBERS: usize = 64;

/// A group stops taking writers once it is this old: the first member's
/// answer waits for the last one's work.
const MAX_AGE: Duration = Duration::from_millis(10);

/// The write lane: the process's one write connection, and the group
/// transaction open on it.
#[derive(Clone)]
pub(crate) struct Lane {
    inner: Arc<Mutex<Inner>>,
    /// Writers waiting for the lane: while there are any, a writer that is
    /// done hands the lane over instead of committing.
    queued: Arc<AtomicUsize>,
    hub: Arc<ChangeHub>,
    /// Where each group's size is recorded.
    metrics: Arc<Metrics>,
    max_age: Duration,
    /// Longest wait for the lane: then 503 storage_unavailable, as for a
    /// pooled connection.
    timeout: Duration,
}

struct Inner {
    conn: SqliteConnection,
    /// The open transaction, when a group is under way.
    group: Option<Group>,
    /// The savepoint `w` is open and empty, ready for the next writer (only
    /// while a group is open).
    spare: bool,
}

struct Group {
    started: Instant,
    /// Writers whose work is in the transaction, waiting for its `COMMIT`.
    members: Vec<Member>,
}

struct Member {
    changes: Vec<Change>,
    wake: Wake,
    reply: oneshot::Sender<sqlx::Result<()>>,
}

impl Lane {
    /// Takes a connection of `pool` (with its settings) for the lane; the
    /// pool opens another in its place.
    pub(super) async fn open(pool: &SqlitePool, hub: Arc<ChangeHub>, opts: &DbOptions) -> sqlx::Result<Self> {
        let mut conn = pool.acquire().await?.detach();
        // Each writer of a group works in a savepoint, whose journal of the
        // pages it changes goes to a temporary file once it passes 64 KiB
        // (a few writers' worth): a write system call per page, on every
        // group. In memory it is a copy. It never outgrows one group (at
        // most MAX_MEMBERS writers), and is dropped at its COMMIT.
        run(&mut conn, "PRAGMA temp_store = MEMORY").await?;
        Ok(Self {
            inner: Arc::new(Mutex::new(Inner { conn, group: None, spare: false })),
            queued: Arc::default(),
            hub,
            metrics: opts.metrics.clone(),
            max_age: MAX_AGE,
            timeout: opts.timeout,
        })
    }

    /// Begins a write: waits for the lane, joins (or opens) the group's
    /// transaction and opens this writer's savepoint. The statements run in
    /// a task: a request cancelled meanwhile leaves the lane settled.
    pub(super) async fn begin(&self) -> sqlx::Result<WriteTx> {
        let Ok(mut guard) = tokio::time::timeout(self.timeout, self.acquire()).await else {
            return Err(sqlx::Error::PoolTimedOut);
        };
        // The group's savepoint is open and empty: there is nothing to run,
        // so the writer takes it at once, with no task. (No await from here:
        // a request cancelled later drops its WriteTx, which settles.)
        if guard.group.is_some() && std::mem::take(&mut guard.spare) {
            return Ok(WriteTx { lane: self.clone(), guard: Some(guard) });
        }
        let (reply, begun) = oneshot::channel();
        let lane = self.clone();
        spawn_or_drop(guard, move |mut guard| async move {
            match lane.enter(&mut guard).await {
                // Unanswered (the request is gone), the write drops: rolled back.
                Ok(()) => drop(reply.send(Ok(WriteTx { lane, guard: Some(guard) }))),
                Err(e) => {
                    drop(reply.send(Err(e)));
                    lane.settle(guard).await;
                }
            }
        });
        begun.await.unwrap_or_else(|_| Err(stopped()))
    }

    async fn enter(&self, guard: &mut OwnedMutexGuard<Inner>) -> sqlx::Result<()> {
        if guard.group.is_none() {
            // IMMEDIATE takes SQLite's writer lock up front: another process
            // holding it makes this wait (busy timeout), never fail later.
            if let Err(e) = run(&mut guard.conn, "BEGIN IMMEDIATE; SAVEPOINT w").await {
                // Whatever the connection was left in, the next writer
                // starts from no transaction.
                drop(run(&mut guard.conn, "ROLLBACK").await);
                return Err(e);
            }
            guard.group = Some(Group { started: Instant::now(), members: Vec::new() });
            return Ok(());
        }
        // (A spare savepoint was taken in `begin`.) On failure the group
        // goes on without this writer.
        run(&mut guard.conn, "SAVEPOINT w").await
    }

    /// Waits for the lane. A writer cancelled while waiting may have been
    /// handed the lane with a group open: someone must still settle it.
    async fn acquire(&self) -> OwnedMutexGuard<Inner> {
        struct Waiting(Option<Lane>);
        impl Drop for Waiting {
            fn drop(&mut self) {
                if let Some(lane) = self.0.take() {
                    lane.queued.fetch_sub(1, Ordering::SeqCst);
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        rt.spawn(async move {
                            let guard = lane.inner.clone().lock_owned().await;
                            lane.settle(guard).await;
                        });
                    }
                }
            }
        }
        self.queued.fetch_add(1, Ordering::SeqCst);
        let mut waiting = Waiting(Some(self.clone()));
        let guard = self.inner.clone().lock_owned().await;
        waiting.0 = None;
        self.queued.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    /// A writer is done with the lane (its work released into the group, or
    /// rolled back): hand the lane to the next writer while the group may
    /// grow, or else commit the group and answer its members.
    async fn settle(&self, guard: OwnedMutexGuard<Inner>) {
        let Some(group) = &guard.group else {
            return;
        };
        if self.grows(group) {
            // Dropping the guard hands the lane to the first writer queued.
            return;
        }
        self.commit_group(guard).await;
    }

    /// Whether the group takes the next writer rather than committing now.
    fn grows(&self, group: &Group) -> bool {
        self.queued.load(Ordering::SeqCst) > 0
            && group.members.len() < MAX_MEMBERS
            && group.started.elapsed() < self.max_age
    }

    /// Commits the open group (an open savepoint ends with it) and answers
    /// its members.
    async fn commit_group(&self, mut guard: OwnedMutexGuard<Inner>) {
        let group = guard.group.take().expect("a group is open");
        guard.spare = false;
        let result = run(&mut guard.conn, "COMMIT").await;
        match &result {
            Ok(()) => {
                self.metrics.sqlite_group_committed(group.members.len());
                for m in &group.members {
                    for c in &m.changes {
                        self.hub.apply(c.clone(), m.wake);
                    }
                }
            }
            // A COMMIT that failed (a deferred constraint, a full disk) may
            // leave the transaction open: nothing of the group stays.
            Err(_) => drop(run(&mut guard.conn, "ROLLBACK").await),
        }
        drop(guard);
        answer(group, result);
    }

    /// Ends a write that committed: its work joins the group. The group's
    /// last writer commits it (its savepoint with it); any other releases
    /// its savepoint and opens the next writer's, then hands the lane over.
    async fn release(&self, mut guard: OwnedMutexGuard<Inner>, member: Member) {
        let group = guard.group.as_mut().expect("a group is open");
        group.members.push(member);
        if !self.grows(group) {
            return self.commit_group(guard).await;
        }
        match run(&mut guard.conn, "RELEASE w; SAVEPOINT w").await {
            // Dropping the guard hands the lane to the first writer queued.
            Ok(()) => guard.spare = true,
            Err(e) => {
                let member = guard.group.as_mut().and_then(|g| g.members.pop()).expect("this writer joined");
                // Had the release gone through and only the new savepoint
                // failed, there is no `w` to roll back to: the whole group
                // is rolled back and fails, this writer with it.
                self.undo(&mut guard).await;
                drop(member.reply.send(Err(e)));
                self.settle(guard).await;
            }
        }
    }

    /// Ends a write that did not commit: its work is undone, the group's
    /// stays.
    async fn rollback(&self, mut guard: OwnedMutexGuard<Inner>) {
        self.undo(&mut guard).await;
        self.settle(guard).await;
    }

    /// Rolls the open savepoint back; it stays open, empty, for the next
    /// writer. If that fails the transaction is in a state nobody can vouch
    /// for: the whole group is rolled back and fails.
    async fn undo(&self, guard: &mut OwnedMutexGuard<Inner>) {
        if run(&mut guard.conn, "ROLLBACK TO w").await.is_ok() {
            guard.spare = true;
            return;
        }
        guard.spare = false;
        let rolled_back = run(&mut guard.conn, "ROLLBACK").await;
        if let Some(group) = guard.group.take() {
            tracing::error!(
                members = group.members.len(),
                ?rolled_back,
                "write lane: savepoint lost, group rolled back"
            );
            answer(group, Err(sqlx::Error::Protocol("the write group was rolled back".into())));
        }
    }
}

/// Tells each member of a group how its `COMMIT` went. The last member gets
/// the error itself, the others a copy that maps to the same answer.
fn answer(group: Group, result: sqlx::Result<()>) {
    let shared = result.as_ref().err().map(copy);
    let mut members = group.members;
    let last = members.pop();
    for m in members {
        drop(m.reply.send(match &shared {
            None => Ok(()),
            Some(e) => Err(e()),
        }));
    }
    if let Some(m) = last {
        drop(m.reply.send(result));
    }
}

/// A maker of copies of `e` (sqlx errors do not clone) that keep what the
/// API answers from it: storage unavailable (503) or a storage error (500).
fn copy(e: &sqlx::Error) -> impl Fn() -> sqlx::Error {
    let unavailable = crate::error::is_unavailable(e);
    let message = format!("the group commit failed: {e}");
    move || {
        if unavailable {
            sqlx::Error::Io(std::io::Error::other(message.clone()))
        } else {
            sqlx::Error::Protocol(message.clone())
        }
    }
}

/// Runs one statement on the lane's connection (boxed: a future that is
/// `Send` for every borrow, which the lane's tasks need).
fn run<'c>(
    conn: &'c mut SqliteConnection,
    sql: &'static str,
) -> Pin<Box<dyn Future<Output = sqlx::Result<()>> + Send + 'c>> {
    use sqlx::Executor;
    Box::pin(async move { conn.execute(sql).await.map(drop) })
}

/// The runtime stopped the lane's task before it answered.
fn stopped() -> sqlx::Error {
    sqlx::Error::Protocol("the write lane stopped before answering".into())
}

/// Runs `f` with the guard on the runtime, so that it completes even when
/// the request that started it is cancelled.
fn spawn_or_drop<F, Fut>(guard: OwnedMutexGuard<Inner>, f: F)
where
    F: FnOnce(OwnedMutexGuard<Inner>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn(f(guard))),
        // No runtime (the process is ending): the connection's transaction
        // ends unfinished, which SQLite rolls back.
        Err(_) => drop(guard),
    }
}

/// One writer's turn on the lane, inside its savepoint. Dropped without
/// [`WriteTx::commit`], its work is rolled back (in a task, so that a
/// cancelled request leaves the lane usable and the group's other members
/// still get their `COMMIT`).
pub struct WriteTx {
    lane: Lane,
    guard: Option<OwnedMutexGuard<Inner>>,
}

impl WriteTx {
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.guard.as_mut().expect("an open write").conn
    }

    /// Commits this writer's work with its group, then publishes `changes`
    /// (after the `COMMIT`, whether or not this request still waits).
    pub(crate) async fn commit(self, changes: Vec<Change>) -> sqlx::Result<()> {
        self.commit_waking(changes, Wake::Waiters).await
    }

    /// Commits this writer's work with its group, then applies `changes` to
    /// the hub, waking their waiters as `wake` says (after the `COMMIT`,
    /// whether or not this request still waits).
    pub(crate) async fn commit_waking(mut self, changes: Vec<Change>, wake: Wake) -> sqlx::Result<()> {
        let guard = self.guard.take().expect("an open write");
        let (reply, result) = oneshot::channel();
        let lane = self.lane.clone();
        spawn_or_drop(guard, move |guard| async move { lane.release(guard, Member { changes, wake, reply }).await });
        result.await.unwrap_or_else(|_| Err(stopped()))
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            let lane = self.lane.clone();
            spawn_or_drop(guard, move |guard| async move { lane.rollback(guard).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lane() -> (tempfile::TempDir, SqlitePool, Lane) {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("lane.db").display());
        let pool = connect(&url, &DbOptions::default()).await.expect("connect");
        sqlx::raw_sql(
            "CREATE TABLE t (x INTEGER); CREATE TABLE parent (id INTEGER PRIMARY KEY); \
             CREATE TABLE child (x INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .execute(&pool)
        .await
        .expect("tables");
        let mut lane = Lane::open(&pool, ChangeHub::new(true), &DbOptions::default()).await.expect("lane");
        // Groups close only when nobody queues: the tests decide who does.
        lane.max_age = Duration::from_secs(3600);
        (dir, pool, lane)
    }

    async fn insert(w: &mut WriteTx, sql: &'static str) {
        run(w.conn(), sql).await.expect("insert");
    }

    #[tokio::test]
    async fn the_lane_keeps_savepoint_journals_in_memory() {
        let (_dir, pool, lane) = lane().await;
        let mut w = lane.begin().await.expect("the lane is free");
        let on_lane: (i64,) = sqlx::query_as("PRAGMA temp_store").fetch_one(&mut *w.conn()).await.expect("pragma");
        w.commit(Vec::new()).await.expect("commit");
        assert_eq!(on_lane.0, 2, "MEMORY on the write lane");
        // Readers keep the default (large sorts may go to disk).
        let on_reader: (i64,) = sqlx::query_as("PRAGMA temp_store").fetch_one(&pool).await.expect("pragma");
        assert_eq!(on_reader.0, 0);
    }

    /// `sqlite_group_commit_writers` as `/metrics` shows it: (COMMITs, writes).
    fn group_sizes(lane: &Lane) -> (String, String) {
        let sample = |name| lane.metrics.sample(name).unwrap_or_else(|| panic!("no {name}"));
        (sample("batchgate_sqlite_group_commit_writers_count"), sample("batchgate_sqlite_group_commit_writers_sum"))
    }

    /// A writer alone on the lane: begin, one statement, commit.
    async fn write_alone(lane: &Lane, sql: &'static str) {
        let mut w = lane.begin().await.expect("the lane is free");
        insert(&mut w, sql).await;
        w.commit(Vec::new()).await.expect("commit");
    }

    async fn rows(pool: &SqlitePool) -> Vec<i64> {
        sqlx::query_scalar("SELECT x FROM t ORDER BY x").fetch_all(pool).await.expect("select")
    }

    /// Waits until `n` writers queue for the lane.
    async fn queued(lane: &Lane, n: usize) {
        while lane.queued.load(Ordering::SeqCst) != n {
            tokio::task::yield_now().await;
        }
    }

    fn change(dataset: &str) -> Change {
        Change { dataset: dataset.into(), partitions: None }
    }

    #[tokio::test]
    async fn a_dropped_write_undoes_only_its_own_work() {
        let (_dir, pool, lane) = lane().await;
        write_alone(&lane, "INSERT INTO t VALUES (1)").await;
        let mut b = lane.begin().await.expect("begin");
        insert(&mut b, "INSERT INTO t VALUES (2)").await;
        drop(b);
        write_alone(&lane, "INSERT INTO t VALUES (3)").await;
        assert_eq!(rows(&pool).await, [1, 3]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_writers_share_a_commit_and_a_rollback_stays_its_own() {
        let (_dir, pool, lane) = lane().await;
        let before = lane.hub.generation();
        let mut a = lane.begin().await.expect("begin");
        insert(&mut a, "INSERT INTO t VALUES (1)").await;
        let other = lane.clone();
        let later = tokio::spawn(async move {
            let mut b = other.begin().await.expect("begin");
            insert(&mut b, "INSERT INTO t VALUES (2)").await;
            drop(b);
            let mut c = other.begin().await.expect("begin");
            insert(&mut c, "INSERT INTO t VALUES (3)").await;
            c.commit(vec![change("c")]).await
        });
        queued(&lane, 1).await;
        // `a` hands the lane over and waits for the group's COMMIT, which
        // the last writer makes.
        a.commit(vec![change("a")]).await.expect("commit");
        assert_ne!(lane.hub.generation(), before, "published by the time the commit is answered");
        later.await.expect("task").expect("commit");
        assert_eq!(rows(&pool).await, [1, 3]);
        assert_eq!(group_sizes(&lane), ("1".into(), "2.0".into()), "one COMMIT, for the two writes that committed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_group_commit_fails_every_member_and_keeps_nothing() {
        let (_dir, pool, lane) = lane().await;
        let before = lane.hub.generation();
        let mut a = lane.begin().await.expect("begin");
        insert(&mut a, "INSERT INTO t VALUES (1)").await;
        let other = lane.clone();
        let later = tokio::spawn(async move {
            let mut b = other.begin().await.expect("begin");
            // Checked only at COMMIT: no parent 99.
            insert(&mut b, "INSERT INTO child VALUES (99)").await;
            b.commit(vec![change("b")]).await
        });
        queued(&lane, 1).await;
        let a = a.commit(vec![change("a")]).await;
        let b = later.await.expect("task");
        assert_eq!(group_sizes(&lane), ("0".into(), "0.0".into()), "a COMMIT that failed made nothing durable");
        assert!(b.is_err(), "the member whose work breaks the COMMIT");
        assert!(a.is_err(), "and the member that shared it");
        assert_eq!(rows(&pool).await, Vec::<i64>::new());
        assert_eq!(lane.hub.generation(), before, "nothing published");
        write_alone(&lane, "INSERT INTO t VALUES (3)").await;
        assert_eq!(rows(&pool).await, [3]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_cancelled_while_queued_does_not_strand_the_group() {
        let (_dir, pool, lane) = lane().await;
        let mut a = lane.begin().await.expect("begin");
        insert(&mut a, "INSERT INTO t VALUES (1)").await;
        let other = lane.clone();
        let waiting = tokio::spawn(async move { other.begin().await.map(drop) });
        queued(&lane, 1).await;
        let committing = tokio::spawn(a.commit(Vec::new()));
        waiting.abort();
        let done = tokio::time::timeout(Duration::from_secs(30), committing).await;
        done.expect("the group's COMMIT came").expect("task").expect("commit");
        assert_eq!(rows(&pool).await, [1]);
        write_alone(&lane, "INSERT INTO t VALUES (2)").await;
        assert_eq!(rows(&pool).await, [1, 2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writers_after_a_rollback_in_one_group_each_roll_back_alone() {
        let (_dir, pool, lane) = lane().await;
        let mut a = lane.begin().await.expect("begin");
        insert(&mut a, "INSERT INTO t VALUES (1)").await;
        let other = lane.clone();
        let later = tokio::spawn(async move {
            // Each writer here takes over the savepoint the one before left.
            let mut b = other.begin().await.expect("begin");
            insert(&mut b, "INSERT INTO t VALUES (2)").await;
            drop(b);
            let mut c = other.begin().await.expect("begin");
            insert(&mut c, "INSERT INTO t VALUES (3)").await;
            let e = run(c.conn(), "INSERT INTO nowhere VALUES (1)").await;
            assert!(e.is_err(), "a statement that fails");
            drop(c);
            let mut d = other.begin().await.expect("begin");
            insert(&mut d, "INSERT INTO t VALUES (4)").await;
            d.commit(Vec::new()).await.expect("commit d");
            let mut e = other.begin().await.expect("begin");
            insert(&mut e, "INSERT INTO t VALUES (5)").await;
            drop(e);
        });
        queued(&lane, 1).await;
        a.commit(Vec::new()).await.expect("commit a");
        later.await.expect("task");
        write_alone(&lane, "INSERT INTO t VALUES (6)").await;
        assert_eq!(rows(&pool).await, [1, 4, 6]);
    }

    #[tokio::test]
    async fn a_writer_waits_for_the_lane_no_longer_than_the_timeout() {
        let (_dir, _pool, mut lane) = lane().await;
        lane.timeout = Duration::from_millis(50);
        let _held = lane.begin().await.expect("begin");
        let e = lane.begin().await.err().expect("the lane stays held");
        assert!(matches!(e, sqlx::Error::PoolTimedOut), "{e}");
        assert!(crate::error::is_unavailable(&e), "answered 503 storage_unavailable");
    }
}
