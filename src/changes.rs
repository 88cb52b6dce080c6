//! The change hub: the one place that knows "something changed".
//!
//! Every committed state change of a partition is published here: locally
//! right after the commit, and on PostgreSQL also through `LISTEN/NOTIFY` so
//! that every replica hears of changes made by the others. Publishing
//! invalidates the readiness cache and wakes long-poll waiters; waiters then
//! re-read the partitions they wait for, so waiting costs no polling.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock, Weak};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, OnceCell};

use crate::store::PartitionRecord;

/// Partitions of one dataset whose readiness may have changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub dataset: String,
    /// `None`: any partition of the dataset (used when the list would not fit
    /// in a notification).
    pub partitions: Option<Vec<String>>,
}

impl Change {
    pub fn touches(&self, dataset: &str, partition: &str) -> bool {
        self.dataset == dataset && self.partitions.as_ref().is_none_or(|ps| ps.iter().any(|p| p == partition))
    }
}

/// Whether a change may answer a long-poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// It may make partitions ready or rejected: wake their waiters.
    Waiters,
    /// It only makes partitions not ready (a start makes them `running`),
    /// which answers no long-poll: the cache forgets them, no waiter is
    /// woken. A waiter still asleep at its deadline looks again then, so
    /// its answer says how things stand at the end.
    Nobody,
}

/// What a long-poll waits for.
#[derive(Debug, Clone)]
pub enum Interest {
    /// Changes of any of these partitions of one dataset.
    Partitions { dataset: String, partitions: Vec<String> },
    /// Every change (the latest batch of a task may move to any dataset).
    Everything,
}

/// The waiters on each partition of one dataset: partition → waiter id → its notify.
type ByPartition = HashMap<String, HashMap<u64, Arc<Notify>>>;

/// The long-polls waiting now, indexed by what they wait for, so that a
/// change wakes only the waiters of the partitions it touched.
#[derive(Default)]
struct Waiters {
    next_id: u64,
    /// dataset → partition → the waiters on it.
    partitions: HashMap<String, ByPartition>,
    everything: HashMap<u64, Arc<Notify>>,
}

impl Waiters {
    fn each(&self, change: Option<&Change>, mut f: impl FnMut(&Notify)) {
        self.everything.values().for_each(|n| f(n));
        let datasets: Box<dyn Iterator<Item = &ByPartition>> = match change {
            None => Box::new(self.partitions.values()),
            Some(c) => Box::new(self.partitions.get(&c.dataset).into_iter()),
        };
        for by_partition in datasets {
            match change.and_then(|c| c.partitions.as_ref()) {
                None => by_partition.values().flat_map(HashMap::values).for_each(|n| f(n)),
                Some(ps) => ps.iter().filter_map(|p| by_partition.get(p)).flat_map(HashMap::values).for_each(|n| f(n)),
            }
        }
    }
}

/// One long-poll's registration with the hub, removed when dropped.
pub struct Watch {
    hub: Arc<ChangeHub>,
    id: u64,
    interest: Interest,
    notify: Arc<Notify>,
}

impl Watch {
    /// Resolves once a change that may concern this watch has been published
    /// since the previous call (or since the watch was made), or the hub may
    /// have missed changes: the waiter should look again.
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut w = self.hub.waiters.lock().expect("waiters lock");
        match &self.interest {
            Interest::Everything => {
                w.everything.remove(&self.id);
            }
            Interest::Partitions { dataset, partitions } => {
                let Some(by_partition) = w.partitions.get_mut(dataset) else { return };
                for p in partitions {
                    if let Some(ids) = by_partition.get_mut(p) {
                        ids.remove(&self.id);
                        if ids.is_empty() {
                            by_partition.remove(p);
                        }
                    }
                }
                if by_partition.is_empty() {
                    w.partitions.remove(dataset);
                }
            }
        }
    }
}

/// Most partition entries the cache holds before it starts afresh.
const CACHE_CAPACITY: usize = 200_000;

type Key = (String, String);

struct CacheInner {
    /// Bumped by every invalidation; a read started before a bump may not fill
    /// the cache, so a fill can never resurrect what an invalidation removed.
    generation: u64,
    enabled: bool,
    partitions: HashMap<String, HashMap<String, Option<Arc<PartitionRecord>>>>,
    entries: usize,
    /// `/ready?task=&dt=` → the latest batch's dataset, id and partitions.
    tasks: HashMap<Key, Option<Arc<TaskLatest>>>,
}

/// The latest batch of a task for a data date.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskLatest {
    pub batch_id: String,
    pub dataset: String,
    pub partitions: Vec<String>,
}

pub struct ChangeHub {
    waiters: Mutex<Waiters>,
    cache: RwLock<CacheInner>,
    reads: Mutex<HashMap<ReadKey, Weak<SharedRead>>>,
}

/// The partitions one read looked up, in the order asked.
pub type Standings = Vec<Option<Arc<PartitionRecord>>>;

/// A read of a dataset's partitions that later askers may share: the
/// generation it began in, the dataset, the partitions.
type ReadKey = (u64, String, Vec<String>);

type SharedRead = OnceCell<Standings>;

/// Most reads kept track of at once before the finished ones are swept.
const READS_SWEEP_AT: usize = 1_024;

/// A snapshot of the cache's generation, taken before reading the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(u64);

impl ChangeHub {
    /// `cache_enabled` starts false where changes could be missed until a
    /// notification connection is up (PostgreSQL).
    pub fn new(cache_enabled: bool) -> Arc<Self> {
        Arc::new(Self {
            waiters: Mutex::default(),
            reads: Mutex::default(),
            cache: RwLock::new(CacheInner {
                generation: 0,
                enabled: cache_enabled,
                partitions: HashMap::new(),
                entries: 0,
                tasks: HashMap::new(),
            }),
        })
    }

    /// Registers a long-poll: changes touching `interest` wake it from now on.
    /// Made before the waiter's first look, so a change between that look and
    /// its wait still wakes it (the wake-up is kept until it waits).
    pub fn watch(self: &Arc<Self>, interest: Interest) -> Watch {
        let notify = Arc::new(Notify::new());
        let mut w = self.waiters.lock().expect("waiters lock");
        w.next_id += 1;
        let id = w.next_id;
        match &interest {
            Interest::Everything => {
                w.everything.insert(id, notify.clone());
            }
            Interest::Partitions { dataset, partitions } => {
                let by_partition = w.partitions.entry(dataset.clone()).or_default();
                for p in partitions {
                    by_partition.entry(p.clone()).or_default().insert(id, notify.clone());
                }
            }
        }
        drop(w);
        Watch { hub: self.clone(), id, interest, notify }
    }

    /// Wakes the waiters `change` concerns; every waiter when `None`.
    fn wake(&self, change: Option<&Change>) {
        self.waiters.lock().expect("waiters lock").each(change, Notify::notify_one);
    }

    /// A committed change: invalidate, then wake its waiters if it may
    /// answer them. A start wakes nobody: waking the waiters of every
    /// partition a publisher starts cost each of them a look (and the
    /// partition a database read) that could only find it still not ready,
    /// as much again as the wake that answers them at the commit.
    pub fn apply(&self, change: Change, wake: Wake) {
        {
            let mut c = self.cache.write().expect("cache lock");
            c.generation += 1;
            c.tasks.clear();
            match &change.partitions {
                None => {
                    if let Some(m) = c.partitions.remove(&change.dataset) {
                        c.entries -= m.len();
                    }
                }
                Some(ps) => {
                    let mut removed = 0;
                    if let Some(m) = c.partitions.get_mut(&change.dataset) {
                        for p in ps {
                            removed += usize::from(m.remove(p).is_some());
                        }
                    }
                    c.entries -= removed;
                }
            }
        }
        if wake == Wake::Waiters {
            self.wake(Some(&change));
        }
    }

    /// Changes may have been missed: drop the cache, stop caching until
    /// [`ChangeHub::resume`], and tell every waiter to re-read.
    pub fn suspend(&self) {
        {
            let mut c = self.cache.write().expect("cache lock");
            c.generation += 1;
            c.enabled = false;
            c.partitions.clear();
            c.tasks.clear();
            c.entries = 0;
        }
        self.wake(None);
    }

    /// Notifications flow again: caching may resume.
    pub fn resume(&self) {
        let mut c = self.cache.write().expect("cache lock");
        c.generation += 1;
        c.enabled = true;
        drop(c);
        self.wake(None);
    }

    pub fn generation(&self) -> Generation {
        Generation(self.cache.read().expect("cache lock").generation)
    }

    /// The generation while caching is allowed, `None` while it is suspended.
    /// Other caches (the token cache in [`crate::auth`]) use it to drop what
    /// they hold whenever any change is published, here or by a replica.
    pub fn cache_generation(&self) -> Option<Generation> {
        let c = self.cache.read().expect("cache lock");
        c.enabled.then_some(Generation(c.generation))
    }

    /// `Some(entry)` on a hit (the entry itself may say "no such partition").
    pub fn cached_partition(&self, dataset: &str, partition: &str) -> Option<Option<Arc<PartitionRecord>>> {
        let c = self.cache.read().expect("cache lock");
        if !c.enabled {
            return None;
        }
        c.partitions.get(dataset)?.get(partition).cloned()
    }

    pub fn fill_partition(
        &self,
        seen: Generation,
        dataset: &str,
        partition: &str,
        value: Option<Arc<PartitionRecord>>,
    ) {
        let mut c = self.cache.write().expect("cache lock");
        if !c.enabled || c.generation != seen.0 {
            return;
        }
        if c.entries >= CACHE_CAPACITY {
            c.partitions.clear();
            c.entries = 0;
        }
        let prev = c.partitions.entry(dataset.to_owned()).or_default().insert(partition.to_owned(), value);
        if prev.is_none() {
            c.entries += 1;
        }
    }

    /// Reads `partitions` of `dataset` with `read` and caches what it finds,
    /// sharing the read with everyone who asks for the same partitions in
    /// the same generation while it is under way: a change that wakes many
    /// waiters of one partition costs one database read, not one each. A
    /// read is shared only within the generation it began in, so nobody is
    /// given a standing from before a change they were woken by. A failed
    /// read is not shared: the next asker reads again.
    pub async fn read_partitions<F, Fut, E>(
        &self,
        dataset: &str,
        partitions: &[String],
        read: F,
    ) -> Result<Standings, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Option<PartitionRecord>>, E>>,
    {
        let seen = self.generation();
        let key: ReadKey = (seen.0, dataset.to_owned(), partitions.to_vec());
        let shared = {
            let mut reads = self.reads.lock().expect("reads lock");
            match reads.get(&key).and_then(Weak::upgrade) {
                Some(shared) => shared,
                None => {
                    if reads.len() >= READS_SWEEP_AT {
                        reads.retain(|_, r| r.strong_count() > 0);
                    }
                    let shared = Arc::new(SharedRead::new());
                    reads.insert(key.clone(), Arc::downgrade(&shared));
                    shared
                }
            }
        };
        let found = shared
            .get_or_try_init(|| async {
                let found: Standings = read().await?.into_iter().map(|r| r.map(Arc::new)).collect();
                for (p, rec) in partitions.iter().zip(&found) {
                    self.fill_partition(seen, dataset, p, rec.clone());
                }
                Ok(found)
            })
            .await
            .cloned();
        let mut reads = self.reads.lock().expect("reads lock");
        if reads.get(&key).is_some_and(|r| std::ptr::eq(r.as_ptr(), Arc::as_ptr(&shared))) && found.is_ok() {
            // Done: later askers find the cache (or read afresh).
            reads.remove(&key);
        }
        found
    }

    pub fn cached_task(&self, task: &str, dt: &str) -> Option<Option<Arc<TaskLatest>>> {
        let c = self.cache.read().expect("cache lock");
        if !c.enabled {
            return None;
        }
        c.tasks.get(&(task.to_owned(), dt.to_owned())).cloned()
    }

    pub fn fill_task(&self, seen: Generation, task: &str, dt: &str, value: Option<Arc<TaskLatest>>) {
        let mut c = self.cache.write().expect("cache lock");
        if !c.enabled || c.generation != seen.0 {
            return;
        }
        if c.tasks.len() >= CACHE_CAPACITY {
            c.tasks.clear();
        }
        c.tasks.insert((task.to_owned(), dt.to_owned()), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(version: i64) -> PartitionRecord {
        PartitionRecord { version, ..PartitionRecord::placeholder("d", "dt=2026-08-24") }
    }

    #[test]
    fn a_fill_from_before_an_invalidation_is_dropped() {
        let hub = ChangeHub::new(true);
        let seen = hub.generation();
        hub.apply(Change { dataset: "d".into(), partitions: Some(vec!["dt=2026-08-24".into()]) }, Wake::Waiters);
        hub.fill_partition(seen, "d", "dt=2026-08-24", Some(Arc::new(rec(1))));
        assert_eq!(hub.cached_partition("d", "dt=2026-08-24"), None);
        let seen = hub.generation();
        hub.fill_partition(seen, "d", "dt=2026-08-24", Some(Arc::new(rec(2))));
        assert_eq!(hub.cached_partition("d", "dt=2026-08-24"), Some(Some(Arc::new(rec(2)))));
    }

    /// Whether `watch` was woken (consuming the wake-up).
    fn woken(watch: &Watch) -> bool {
        use std::future::Future;
        let mut fut = std::pin::pin!(watch.changed());
        let waker = std::task::Waker::noop();
        fut.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_ready()
    }

    fn partitions(dataset: &str, ps: &[&str]) -> Interest {
        Interest::Partitions { dataset: dataset.into(), partitions: ps.iter().map(|p| (*p).into()).collect() }
    }

    #[test]
    fn publishing_evicts_only_the_named_partitions_and_wakes_only_their_waiters() {
        let hub = ChangeHub::new(true);
        let on_a1 = hub.watch(partitions("d", &["a=1"]));
        let on_a2 = hub.watch(partitions("d", &["a=2", "a=3"]));
        let on_other = hub.watch(partitions("e", &["a=1"]));
        let on_all = hub.watch(Interest::Everything);
        let g = hub.generation();
        hub.fill_partition(g, "d", "a=1", None);
        hub.fill_partition(g, "d", "a=2", None);
        hub.apply(Change { dataset: "d".into(), partitions: Some(vec!["a=1".into()]) }, Wake::Waiters);
        assert_eq!(hub.cached_partition("d", "a=1"), None);
        assert_eq!(hub.cached_partition("d", "a=2"), Some(None), "an unchanged partition stays cached");
        assert!(woken(&on_a1), "the waiter on the changed partition wakes");
        assert!(!woken(&on_a2), "a waiter on other partitions of the dataset sleeps on");
        assert!(!woken(&on_other), "a waiter on another dataset sleeps on");
        assert!(woken(&on_all), "a waiter on everything wakes");
        assert!(!woken(&on_a1), "one change, one wake-up");

        hub.apply(Change { dataset: "d".into(), partitions: None }, Wake::Waiters);
        assert!(woken(&on_a1) && woken(&on_a2) && !woken(&on_other), "a dataset-wide change wakes its waiters");
        hub.suspend();
        assert!(woken(&on_a1) && woken(&on_a2) && woken(&on_other) && woken(&on_all), "a resync wakes everyone");
    }

    #[test]
    fn a_change_that_answers_no_wait_evicts_but_wakes_nobody() {
        let hub = ChangeHub::new(true);
        let on_a1 = hub.watch(partitions("d", &["a=1"]));
        let on_all = hub.watch(Interest::Everything);
        let g = hub.generation();
        hub.fill_partition(g, "d", "a=1", None);
        hub.apply(Change { dataset: "d".into(), partitions: Some(vec!["a=1".into()]) }, Wake::Nobody);
        assert_eq!(hub.cached_partition("d", "a=1"), None, "the cache forgets the partition");
        assert_ne!(hub.generation(), g, "a read from before the change fills nothing");
        assert!(!woken(&on_a1) && !woken(&on_all), "nobody is woken");
        hub.apply(Change { dataset: "d".into(), partitions: Some(vec!["a=1".into()]) }, Wake::Waiters);
        assert!(woken(&on_a1) && woken(&on_all));
    }

    #[test]
    fn a_dropped_watch_leaves_nothing_behind() {
        let hub = ChangeHub::new(true);
        let a = hub.watch(partitions("d", &["a=1", "a=2"]));
        let b = hub.watch(partitions("d", &["a=1"]));
        let c = hub.watch(Interest::Everything);
        drop((a, b, c));
        let w = hub.waiters.lock().unwrap();
        assert!(w.partitions.is_empty() && w.everything.is_empty());
    }

    #[test]
    fn a_suspended_cache_serves_nothing() {
        let hub = ChangeHub::new(true);
        hub.suspend();
        let g = hub.generation();
        hub.fill_partition(g, "d", "a=1", None);
        assert_eq!(hub.cached_partition("d", "a=1"), None);
        hub.resume();
        let g = hub.generation();
        hub.fill_partition(g, "d", "a=1", None);
        assert_eq!(hub.cached_partition("d", "a=1"), Some(None));
    }

    /// One read for ten askers of the same partition; after a change, an
    /// asker never shares a read that began before it.
    #[tokio::test]
    async fn askers_of_the_same_partitions_share_a_read_only_within_a_generation() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::time::Duration;

        // Caching off: every ask reaches `read_partitions`.
        let hub = ChangeHub::new(false);
        let reads = Arc::new(AtomicUsize::new(0));
        let ask = |hub: Arc<ChangeHub>, reads: Arc<AtomicUsize>| async move {
            hub.read_partitions("d", &["a=1".to_owned()], || async {
                reads.fetch_add(1, SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, String>(vec![None])
            })
            .await
        };
        let asks: Vec<_> = (0..10).map(|_| tokio::spawn(ask(hub.clone(), reads.clone()))).collect();
        for a in asks {
            assert_eq!(a.await.expect("task"), Ok(vec![None]));
        }
        assert_eq!(reads.load(SeqCst), 1, "ten askers at once, one read");

        let before = tokio::spawn(ask(hub.clone(), reads.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(reads.load(SeqCst), 2, "a read under way");
        hub.apply(Change { dataset: "d".into(), partitions: Some(vec!["a=1".into()]) }, Wake::Waiters);
        assert_eq!(ask(hub.clone(), reads.clone()).await, Ok(vec![None]));
        assert_eq!(reads.load(SeqCst), 3, "asked after the change: a read of its own");
        assert_eq!(before.await.expect("task"), Ok(vec![None]));

        // A failed read is not handed on: the next asker reads again.
        let failed = hub.read_partitions("d", &["a=1".to_owned()], || async { Err::<Vec<_>, _>("down") }).await;
        assert_eq!(failed, Err("down"));
        assert_eq!(ask(hub.clone(), reads.clone()).await, Ok(vec![None]));
        assert_eq!(reads.load(SeqCst), 4);
    }
}
