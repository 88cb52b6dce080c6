//! The change hub: the one place that knows "something changed".
//!
//! Every committed state change of a partition is published here: locally
//! right after the commit, and on PostgreSQL also through `LISTEN/NOTIFY` so
//! that every replica hears of changes made by the others. Publishing
//! invalidates the readiness cache and wakes long-poll waiters; waiters then
//! re-read the partitions they wait for, so waiting costs no polling.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

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

/// What the hub says to subscribers.
#[derive(Debug, Clone)]
pub enum Signal {
    Changed(Arc<Change>),
    /// The hub may have missed changes (a lost notification connection): every
    /// waiter must re-read.
    Resync,
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
    sender: broadcast::Sender<Signal>,
    cache: RwLock<CacheInner>,
}

/// A snapshot of the cache's generation, taken before reading the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(u64);

impl ChangeHub {
    /// `cache_enabled` starts false where changes could be missed until a
    /// notification connection is up (PostgreSQL).
    pub fn new(cache_enabled: bool) -> Arc<Self> {
        let (sender, _) = broadcast::channel(4096);
        Arc::new(Self {
            sender,
            cache: RwLock::new(CacheInner {
                generation: 0,
                enabled: cache_enabled,
                partitions: HashMap::new(),
                entries: 0,
                tasks: HashMap::new(),
            }),
        })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.sender.subscribe()
    }

    /// A committed change: invalidate, then wake waiters.
    pub fn publish(&self, change: Change) {
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
        let _ = self.sender.send(Signal::Changed(Arc::new(change)));
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
        let _ = self.sender.send(Signal::Resync);
    }

    /// Notifications flow again: caching may resume.
    pub fn resume(&self) {
        let mut c = self.cache.write().expect("cache lock");
        c.generation += 1;
        c.enabled = true;
        drop(c);
        let _ = self.sender.send(Signal::Resync);
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
        hub.publish(Change { dataset: "d".into(), partitions: Some(vec!["dt=2026-08-24".into()]) });
        hub.fill_partition(seen, "d", "dt=2026-08-24", Some(Arc::new(rec(1))));
        assert_eq!(hub.cached_partition("d", "dt=2026-08-24"), None);
        let seen = hub.generation();
        hub.fill_partition(seen, "d", "dt=2026-08-24", Some(Arc::new(rec(2))));
        assert_eq!(hub.cached_partition("d", "dt=2026-08-24"), Some(Some(Arc::new(rec(2)))));
    }

    #[test]
    fn publishing_evicts_only_the_named_partitions_and_wakes_subscribers() {
        let hub = ChangeHub::new(true);
        let mut rx = hub.subscribe();
        let g = hub.generation();
        hub.fill_partition(g, "d", "a=1", None);
        hub.fill_partition(g, "d", "a=2", None);
        hub.publish(Change { dataset: "d".into(), partitions: Some(vec!["a=1".into()]) });
        assert_eq!(hub.cached_partition("d", "a=1"), None);
        assert_eq!(hub.cached_partition("d", "a=2"), Some(None), "an unchanged partition stays cached");
        assert!(matches!(rx.try_recv(), Ok(Signal::Changed(c)) if c.touches("d", "a=1") && !c.touches("d", "a=2")));
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
}
