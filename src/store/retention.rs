//! Retention: history older than `--retain` is pruned in small batches, so
//! that the registry does not grow forever and no statement holds the write
//! lock for long. What is pruned: the change feed, resolved alerts, webhook
//! deliveries that are done (sent or given up), and the raw OpenLineage
//! events. Batches, their events and `task_produce_log` are the registry's
//! history and are kept.
//!
//! The change feed remembers how far it was cut (`pruned_history`), so a
//! consumer whose cursor points into pruned history is told so (`410
//! cursor_expired`) instead of silently skipping the changes it missed.

use chrono::{DateTime, Utc};

use super::db::{args, Arg, Conn};
use super::SqlStore;
use crate::error::Result;

/// Rows one statement deletes at most.
pub const PRUNE_BATCH: i64 = 1000;

/// Statements one table gets per pass at most; the rest waits for the next pass.
pub const MAX_BATCHES_PER_PASS: usize = 100;

/// The name of the change feed in `pruned_history`.
const CHANGES: &str = "changes";

/// What one pass pruned, per table.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pruned {
    pub changes: u64,
    pub alerts: u64,
    pub webhooks: u64,
    pub openlineage_events: u64,
}

impl Pruned {
    pub fn total(&self) -> u64 {
        self.changes + self.alerts + self.webhooks + self.openlineage_events
    }
}

/// One bounded statement per table: deletes up to [`PRUNE_BATCH`] rows
/// older than `$1`, returning their ids.
const DELETE_WEBHOOKS: &str = "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox \
     WHERE (delivered_at < $1 OR given_up_at < $1) ORDER BY id LIMIT 1000) RETURNING id";
/// An alert goes once none of its deliveries is left (the outbox refers to it).
const DELETE_ALERTS: &str = "DELETE FROM alerts WHERE id IN (SELECT a.id FROM alerts a \
     WHERE a.state = 'resolved' AND a.resolved_at < $1 \
     AND NOT EXISTS (SELECT 1 FROM outbox w WHERE w.alert_id = a.id) ORDER BY a.id LIMIT 1000) RETURNING id";
/// The change feed goes as a prefix of ids, below `$2`, the first change
/// inside the retention ([`FIRST_KEPT_CHANGE`]): no index on `at` is needed.
/// (`at < $1` keeps a change that committed after `$2` was read with a lower
/// id, which can only be recent.) Both of its tables: `changes`, the rows
/// written before migration 0020, whose ids are all below `change_log`'s
/// (once no binary from before it runs: see the README on upgrades).
const DELETE_CHANGES: [&str; 2] = [
    "DELETE FROM changes WHERE id IN (SELECT id FROM changes \
     WHERE id < $2 AND at < $1 ORDER BY id LIMIT 1000) RETURNING id",
    "DELETE FROM change_log WHERE id IN (SELECT id FROM change_log \
     WHERE id < $2 AND at < $1 ORDER BY id LIMIT 1000) RETURNING id",
];
/// The oldest change inside the retention: each table's primary key walked
/// from its oldest row, which is short when pruning keeps up (the rows it
/// passes are the ones to prune). `$1` is the cutoff as `changes` keeps
/// times, `$2` as `change_log` does.
const FIRST_KEPT_CHANGE: &str = "SELECT MIN(id) FROM (\
     SELECT * FROM (SELECT id FROM changes WHERE at >= $1 ORDER BY id LIMIT 1) AS old \
     UNION ALL SELECT * FROM (SELECT id FROM change_log WHERE at >= $2 ORDER BY id LIMIT 1) AS compact) AS kept";
const DELETE_OPENLINEAGE: &str = "DELETE FROM openlineage_events WHERE id IN (SELECT id FROM openlineage_events \
     WHERE received_at < $1 ORDER BY id LIMIT 1000) RETURNING id";

impl SqlStore {
    /// Prunes what is older than `cutoff`, in transactions of at most
    /// [`PRUNE_BATCH`] rows each.
    #[tracing::instrument(skip_all, fields(%cutoff))]
    pub async fn prune(&self, cutoff: DateTime<Utc>) -> Result<Pruned> {
        Ok(Pruned {
            // Deliveries before alerts: an alert goes with its last delivery.
            webhooks: self.prune_table(DELETE_WEBHOOKS, args![cutoff], None).await?.0,
            alerts: self.prune_table(DELETE_ALERTS, args![cutoff], None).await?.0,
            changes: self.prune_changes(cutoff).await?,
            openlineage_events: self.prune_table(DELETE_OPENLINEAGE, args![cutoff], None).await?.0,
        })
    }

    /// The change feed's prefix older than `cutoff`.
    async fn prune_changes(&self, cutoff: DateTime<Utc>) -> Result<u64> {
        let compact_cutoff = self.dialect().instant(cutoff);
        let first_kept: (Option<i64>,) =
            self.read().await?.conn().one(FIRST_KEPT_CHANGE, args![cutoff, compact_cutoff.clone()]).await?;
        let below = first_kept.0.unwrap_or(i64::MAX);
        let [old, compact] = DELETE_CHANGES;
        // The older rows first, and the newer only once none of them is
        // left to prune: the feed is cut as one prefix, and a cursor below
        // the horizon is never handed out by a listing.
        let (pruned, done) = self.prune_table(old, args![cutoff, below], Some(CHANGES)).await?;
        if !done {
            return Ok(pruned);
        }
        Ok(pruned + self.prune_table(compact, args![compact_cutoff, below], Some(CHANGES)).await?.0)
    }

    /// Runs one bounded delete (with `args`) per transaction until a batch
    /// comes back short (then it is done), at most
    /// [`MAX_BATCHES_PER_PASS`] of them. With `horizon`, records the highest
    /// id deleted in the same transaction as the delete. Returns the rows
    /// deleted and whether it is done.
    async fn prune_table(&self, delete: &str, args: Vec<Arg>, horizon: Option<&str>) -> Result<(u64, bool)> {
        debug_assert!(delete.contains(&format!("LIMIT {PRUNE_BATCH}")));
        let mut total = 0;
        for _ in 0..MAX_BATCHES_PER_PASS {
            let mut tx = self.begin_write().await?;
            let mut c = tx.conn();
            let ids: Vec<(i64,)> = c.all(delete, args.clone()).await?;
            if let (Some(name), Some(through)) = (horizon, ids.iter().map(|(id,)| *id).max()) {
                raise_horizon(&mut c, name, through, self.now()).await?;
            }
            tx.commit().await?;
            total += ids.len() as u64;
            if (ids.len() as i64) < PRUNE_BATCH {
                return Ok((total, true));
            }
        }
        Ok((total, false))
    }

    /// The highest change id pruned so far (0: none).
    pub async fn changes_horizon(&self) -> Result<i64> {
        let mut r = self.read().await?;
        let row: Option<(i64,)> =
            r.conn().opt("SELECT through_id FROM pruned_history WHERE history = $1", args![CHANGES]).await?;
        Ok(row.map_or(0, |(id,)| id))
    }
}

async fn raise_horizon(c: &mut Conn<'_>, name: &str, through: i64, now: DateTime<Utc>) -> Result<()> {
    c.exec(
        "INSERT INTO pruned_history (history, through_id, pruned_at) VALUES ($1, $2, $3) \
         ON CONFLICT (history) DO UPDATE SET pruned_at = excluded.pruned_at, through_id = CASE \
         WHEN excluded.through_id > pruned_history.through_id THEN excluded.through_id ELSE pruned_history.through_id END",
        args![name, through, now],
    )
    .await?;
    Ok(())
}
