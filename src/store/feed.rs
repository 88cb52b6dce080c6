//! The change feed: every readiness change, numbered in commit order, for
//! `GET /v1/changes` and the pushes (`outbox.rs`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;

use super::db::{args, Arg, Conn, Dialect};
use super::events::ChangeDetail;
use super::outbox::{self, NewChange};
use super::staleness::Ripple;
use crate::domain::policy::DatasetPolicy;
use crate::domain::readiness::ChangeKind;
use crate::error::Result;

/// Takes the feed's lock, before the first write a change to the feed
/// depends on (PostgreSQL; on SQLite the one writer holds it already). See
/// `postgres::begin_write` for the rule. Once per transaction: `ripple`,
/// the transaction's, remembers that it is held.
pub(super) async fn lock(c: &mut Conn<'_>, ripple: &mut Ripple) -> Result<()> {
    if ripple.feed_locked {
        return Ok(());
    }
    if let Conn::Postgres(c) = c {
        super::postgres::lock_feed(c).await?;
    }
    ripple.feed_locked = true;
    Ok(())
}

/// Appends a readiness change to the feed, and queues it for the receivers
/// it is pushed to (in the same transaction). `policy` is the dataset's,
/// which the caller has read already.
#[allow(clippy::too_many_arguments)]
pub(super) async fn emit(
    c: &mut Conn<'_>,
    ripple: &mut Ripple,
    policy: &DatasetPolicy,
    kind: ChangeKind,
    dataset: &str,
    partition: &str,
    version: i64,
    batch_id: Option<&str>,
    detail: ChangeDetail,
    now: DateTime<Utc>,
) -> Result<()> {
    // Ids in commit order: whoever numbers a change holds the feed's lock
    // (already taken, before its first dependent write, on the paths that
    // change the feed).
    lock(c, ripple).await?;
    let learned = ripple.learned.iter().find(|(_, name)| name == dataset).map(|(n, _)| *n);
    let dataset_number = match ripple.names.get(dataset).or(learned) {
        Some(n) => n,
        None => {
            let n = super::names::number_within(c, dataset).await?;
            ripple.learned.push((n, dataset.to_owned()));
            n
        }
    };
    let stored_detail = (detail != ChangeDetail::default()).then_some(Json(&detail));
    let (id, batch): (i64, Option<i64>) = c
        .one(
            "INSERT INTO change_log (at, kind, dataset, partition_spec, version, batch, detail) \
             VALUES ($1, (SELECT id FROM audit_names WHERE name = $2), $3, $4, $5, \
                     (SELECT id FROM batches WHERE batch_id = $6), $7) \
             RETURNING id, batch",
            args![c.dialect().instant(now), kind, dataset_number, partition, version, batch_id, stored_detail],
        )
        .await?;
    if batch_id.is_some() && batch.is_none() {
        return Err(anyhow::anyhow!("the change feed names batch {batch_id:?}, which no row of batches has").into());
    }
    let change = NewChange { id, kind: kind.as_str(), dataset, partition, version, batch_id, detail: &detail, at: now };
    outbox::on_change(c, ripple, policy, change).await
}

/// A readiness change, as the feed lists it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ChangeRecord {
    #[serde(skip)]
    pub id: i64,
    pub kind: ChangeKind,
    pub dataset: String,
    #[serde(rename = "partition")]
    #[sqlx(rename = "partition_spec")]
    pub partition: String,
    pub version: i64,
    pub batch_id: Option<String>,
    pub at: DateTime<Utc>,
    /// `reason` of an invalidation; `upstream` of a stale change.
    #[schema(value_type = Option<ChangeDetail>)]
    pub detail: Option<Json<ChangeDetail>>,
}

impl super::SqlStore {
    /// Readiness changes after feed position `after`, in commit order.
    pub async fn list_changes(&self, after: i64, dataset: Option<&str>, limit: i64) -> Result<Vec<ChangeRecord>> {
        let mut r = self.read().await?;
        let numbers = self.stored_numbers(&mut r.conn(), &dataset.into_iter().collect::<Vec<_>>()).await?;
        let (sql, a) = changes_page_sql(self.dialect(), after, dataset.map(|d| (d, numbers.get(d).copied())), limit);
        Ok(r.conn().all(&sql, a).await?)
    }
}

/// A page of the feed, oldest first, after id `after`: the rows of
/// `change_log`, their names looked up by number, and those of `changes`
/// (written before migration 0020), merged by id. `dataset` is the
/// dataset's name and its number (none: never stored, so no row of
/// `change_log` has it). Each table is read along an index in id order,
/// so a page stops after its rows.
pub fn changes_page_sql(
    d: Dialect,
    after: i64,
    dataset: Option<(&str, Option<i64>)>,
    limit: i64,
) -> (String, Vec<Arg>) {
    let (compact, old, a) = match dataset {
        Some((name, number)) => (" AND dataset = $2", " AND dataset = $3", args![after, number, name]),
        None => ("", "", args![after]),
    };
    // Each table's page is taken first, then each of its rows' names is
    // looked up by number: PostgreSQL sorts the union of the two pages, not
    // of the two tables, and SQLite does not start from `audit_names`.
    let name = |number: &str| format!("(SELECT name FROM audit_names WHERE id = l.{number})");
    let sql = format!(
        "SELECT * FROM (\
            SELECT l.id AS id, {kind} AS kind, {dataset} AS dataset, l.partition_spec AS partition_spec, \
                   l.version AS version, (SELECT batch_id FROM batches WHERE id = l.batch) AS batch_id, {at} AS at, \
                   COALESCE(l.detail, '{{}}') AS detail \
            FROM (SELECT * FROM change_log WHERE id > $1{compact} ORDER BY id LIMIT {limit}) AS l) AS compact \
         UNION ALL \
         SELECT * FROM (\
            SELECT id, kind, dataset, partition_spec, version, batch_id, at, detail FROM changes \
            WHERE id > $1{old} ORDER BY id LIMIT {limit}) AS old \
         ORDER BY id LIMIT {limit}",
        kind = name("kind"),
        dataset = name("dataset"),
        at = d.instant_value("l.at"),
    );
    (sql, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ripple() -> Ripple {
        Ripple {
            changes: Vec::new(),
            receivers: Default::default(),
            feed_locked: false,
            names: Default::default(),
            learned: Vec::new(),
        }
    }

    /// A publish numbers its changes under the feed's lock, taken once: each
    /// change it appends after that costs no statement to take it again
    /// (a round trip while every other publish waits for the lock).
    #[tokio::test]
    async fn the_feed_lock_is_taken_once_per_transaction() {
        let Some(pool) = super::super::postgres::test_pool().await else { return };
        let mut tx = pool.begin().await.unwrap();
        let mut first = ripple();
        lock(&mut Conn::Postgres(&mut tx), &mut first).await.expect("the lock");
        assert!(first.feed_locked);
        // Any statement in the transaction fails from here on.
        assert!(sqlx::query("SELECT 1 / 0").execute(&mut *tx).await.is_err());
        lock(&mut Conn::Postgres(&mut tx), &mut first).await.expect("held already: no statement sent");
        let mut other = ripple();
        let sent = lock(&mut Conn::Postgres(&mut tx), &mut other).await;
        assert!(sent.is_err(), "a transaction that does not hold it yet sends the statement");
        assert!(!other.feed_locked);
    }
}
