//! Names stored once and referred to by number (`audit_names`): the audit
//! log's actors, actions, methods and datasets (migration 0019), the change
//! feed's kinds and datasets (migration 0020). A name's number never
//! changes once committed, so what an instance remembers is never stale.
//!
//! Numbers are remembered only once committed: read outside a write,
//! stored by a transaction of their own ([`SqlStore::name_numbers`]), or
//! read or stored by a write transaction ([`number_within`]) once it has
//! committed ([`Names::learn`]). Before, it may still roll back (on SQLite
//! with the group it committed with), and a number it stored then names
//! nothing (SQLite could give it to another name).
//!
//! Locks (PostgreSQL): a transaction that stores a name holds its row
//! until it ends. [`SqlStore::name_numbers`] stores one name per
//! transaction and so never holds one name while waiting for another; the
//! write transactions that store names for the feed hold the feed's lock,
//! so only one at a time stores several. No two can wait for each other.
//! (The audit writer of the version before 0020 stored several names in
//! one statement: one more reason not to run it beside this one, see the
//! README on upgrades; PostgreSQL would refuse one of the two.)

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::db::{args, placeholders, Arg, Conn};
use super::SqlStore;
use crate::error::Result;

/// Most names an instance keeps the number of in memory.
pub(super) const NAMES_KEPT: usize = 50_000;

/// The numbers this process knows.
#[derive(Default)]
pub(super) struct Names {
    known: Mutex<HashMap<String, i64>>,
}

impl Names {
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        // Nothing panics while holding it; a poisoned map is still whole.
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The number of `name`, if this process knows it.
    pub(super) fn get(&self, name: &str) -> Option<i64> {
        self.lock().get(name).copied()
    }

    /// The numbers of `names` this process knows, and the names it does not.
    pub(super) fn known<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> (HashMap<String, i64>, Vec<&'a str>) {
        let known = self.lock();
        let (mut numbers, mut unknown) = (HashMap::new(), Vec::new());
        for name in names {
            match known.get(name) {
                Some(&n) => drop(numbers.insert(name.to_owned(), n)),
                None => unknown.push(name),
            }
        }
        (numbers, unknown)
    }

    /// Remembers the numbers a write transaction read or stored
    /// ([`number_within`]), once it has committed.
    pub(super) fn learn(&self, committed: Vec<(i64, String)>) {
        if !committed.is_empty() {
            self.remember(committed, &mut HashMap::new());
        }
    }

    /// Adds the numbers `read` (committed) to `numbers`, and remembers them.
    pub(super) fn remember(&self, read: Vec<(i64, String)>, numbers: &mut HashMap<String, i64>) {
        let mut known = self.lock();
        if known.len() + read.len() > NAMES_KEPT {
            // Names come from requests, refused ones too: what is kept of
            // them is bounded. Forgotten numbers are read again when used.
            known.clear();
        }
        for (n, name) in read {
            known.insert(name.clone(), n);
            numbers.insert(name, n);
        }
    }
}

/// The numbers `audit_names` has for `names`.
pub(super) async fn read_numbers(c: &mut Conn<'_>, names: &[&str]) -> Result<Vec<(i64, String)>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let sql =
        format!("SELECT CAST(id AS BIGINT), name FROM audit_names WHERE name IN ({})", placeholders(1, names.len()));
    Ok(c.all(&sql, names.iter().map(|&n| Arg::from(n)).collect()).await?)
}

/// The number of `name` inside the write transaction `c`: read, or stored
/// if no row has it (then waiting, on PostgreSQL, for another transaction
/// storing it to end). The caller remembers it once `c` commits (see the
/// module's doc).
pub(super) async fn number_within(c: &mut Conn<'_>, name: &str) -> Result<i64> {
    const READ: &str = "SELECT CAST(id AS BIGINT) FROM audit_names WHERE name = $1";
    if let Some((n,)) = c.opt(READ, args![name]).await? {
        return Ok(n);
    }
    let stored: Option<(i64,)> = c
        .opt(
            "INSERT INTO audit_names (name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING CAST(id AS BIGINT)",
            args![name],
        )
        .await?;
    match stored {
        Some((n,)) => Ok(n),
        // Another transaction stored it meanwhile and committed.
        None => Ok(c.one::<(i64,)>(READ, args![name]).await?.0),
    }
}

impl SqlStore {
    /// The number of each of `used`: from what this process knows, else
    /// read; names never stored are stored first (unless another replica
    /// does meanwhile), each in a transaction of its own, once.
    pub(super) async fn name_numbers(&self, used: BTreeSet<&str>) -> Result<HashMap<String, i64>> {
        let (mut numbers, unknown) = self.names.known(used);
        if unknown.is_empty() {
            return Ok(numbers);
        }
        let stored = read_numbers(&mut self.read().await?.conn(), &unknown).await?;
        self.names.remember(stored, &mut numbers);
        let new: Vec<&str> = unknown.into_iter().filter(|name| !numbers.contains_key(*name)).collect();
        for &name in &new {
            let mut tx = self.begin_write_under(&[]).await?;
            tx.conn()
                .exec("INSERT INTO audit_names (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", args![name])
                .await?;
            tx.commit().await?;
        }
        if new.is_empty() {
            return Ok(numbers);
        }
        // Read once committed: the number of a name whose insert was
        // rolled back names nothing (SQLite could give it to another).
        let stored = read_numbers(&mut self.read().await?.conn(), &new).await?;
        self.names.remember(stored, &mut numbers);
        match new.iter().find(|&&name| !numbers.contains_key(name)) {
            Some(missing) => Err(anyhow::anyhow!("audit_names has no row for {missing:?} after storing it").into()),
            None => Ok(numbers),
        }
    }

    /// The numbers of `names` that are stored, read if this process does
    /// not know them (a name missing from the answer was never stored).
    pub(super) async fn stored_numbers(&self, c: &mut Conn<'_>, names: &[&str]) -> Result<HashMap<String, i64>> {
        let (mut numbers, unknown) = self.names.known(names.iter().copied());
        self.names.remember(read_numbers(c, &unknown).await?, &mut numbers);
        Ok(numbers)
    }
}
