//! The open connections, so that a flood of idle ones cannot crowd out the
//! clients that send requests.
//!
//! Every connection holds a [`Slot`]. A slot is busy while one of its
//! requests is being handled, idle otherwise (waiting for a request head, a
//! TLS handshake, or the next keep-alive request). When more connections are
//! open than the ceiling allows, the oldest idle one is closed; at shutdown
//! every idle one closes at once (see `super::connection`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Default)]
pub(super) struct Slot {
    busy: AtomicUsize,
    /// Told to close (without a response: it has no request in progress).
    pub(super) evict: Notify,
}

impl Slot {
    pub(super) fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }
}

/// Marks its slot busy until dropped (when the handler's future completes).
pub(super) struct Busy(Arc<Slot>);

impl Busy {
    pub(super) fn new(slot: &Arc<Slot>) -> Self {
        slot.busy.fetch_add(1, Ordering::AcqRel);
        Self(slot.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What [`Registry::admit`] decided for a new connection.
pub(super) enum Admission {
    /// Serve it; it leaves the registry when the ticket is dropped.
    Serve(Ticket),
    /// Over the ceiling and every connection is busy: close it at once.
    Refuse,
}

pub(super) struct Registry {
    ceiling: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// By age: the smallest id is the oldest connection.
    live: BTreeMap<u64, Arc<Slot>>,
}

impl Registry {
    pub(super) fn new(ceiling: usize) -> Arc<Self> {
        Arc::new(Self { ceiling: ceiling.max(1), inner: Mutex::default() })
    }

    pub(super) fn ceiling(&self) -> usize {
        self.ceiling
    }

    pub(super) fn len(&self) -> usize {
        self.inner.lock().expect("registry lock").live.len()
    }

    /// Registers a new connection, making room by closing the oldest idle
    /// one when the ceiling is reached.
    pub(super) fn admit(self: &Arc<Self>) -> Admission {
        let mut inner = self.inner.lock().expect("registry lock");
        if inner.live.len() >= self.ceiling {
            let oldest_idle = inner.live.iter().find(|(_, s)| s.is_idle()).map(|(id, _)| *id);
            match oldest_idle {
                Some(id) => {
                    if let Some(slot) = inner.live.remove(&id) {
                        slot.evict.notify_one();
                    }
                }
                None => return Admission::Refuse,
            }
        }
        let id = inner.next;
        inner.next += 1;
        let slot = Arc::new(Slot::default());
        inner.live.insert(id, slot.clone());
        Admission::Serve(Ticket { id, slot, registry: self.clone() })
    }
}

/// A connection's place in the registry.
pub(super) struct Ticket {
    id: u64,
    pub(super) slot: Arc<Slot>,
    registry: Arc<Registry>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.registry.inner.lock().expect("registry lock").live.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(r: &Arc<Registry>) -> Ticket {
        match r.admit() {
            Admission::Serve(t) => t,
            Admission::Refuse => panic!("refused"),
        }
    }

    #[tokio::test]
    async fn at_the_ceiling_the_oldest_idle_connection_makes_room() {
        let r = Registry::new(2);
        let busy = serve(&r);
        let _guard = Busy::new(&busy.slot);
        let idle = serve(&r);
        let _third = serve(&r);
        assert_eq!(r.len(), 2, "the idle one left");
        // The idle connection was told to close; the busy one was not.
        tokio::time::timeout(std::time::Duration::from_millis(100), idle.slot.evict.notified())
            .await
            .expect("the idle connection is evicted");
        assert!(tokio::time::timeout(std::time::Duration::from_millis(50), busy.slot.evict.notified()).await.is_err());
    }

    #[tokio::test]
    async fn when_every_connection_is_busy_a_new_one_is_refused() {
        let r = Registry::new(1);
        let t = serve(&r);
        let _guard = Busy::new(&t.slot);
        assert!(matches!(r.admit(), Admission::Refuse));
        drop(_guard);
        assert!(matches!(r.admit(), Admission::Serve(_)));
    }
}
