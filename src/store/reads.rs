//! Reads: a batch, the history listings (`/v1/batches`, `/v1/partitions`),
//! and the partition standings `/ready` needs.

use chrono::NaiveDate;

use super::batches::load_record;
use super::db::{args, numbered, placeholders, Arg, Dialect};
use super::records::{partition_columns, record_sql, RecordRow};
use super::*;
use crate::changes::TaskLatest;
use crate::error::Result;

/// A `WHERE` clause built from optional filters, numbering placeholders as it goes.
#[derive(Default)]
struct Filter {
    clauses: Vec<String>,
    args: Vec<Arg>,
}

impl Filter {
    /// A clause whose every `$?` is `value`.
    fn push(&mut self, clause: &str, value: impl Into<Arg>) {
        self.args.push(value.into());
        self.clauses.push(clause.replace("$?", &format!("${}", self.args.len())));
    }

    /// A clause with a `$?` for each of its arguments, in order.
    fn push_all(&mut self, clause: (String, Vec<Arg>)) {
        let numbered = numbered(clause, &mut self.args);
        self.clauses.push(numbered);
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.clauses.join(" AND "))
        }
    }
}

/// The condition of the batches `batches_state` holds (migration 0015):
/// those in a state few batches end in. A statement that seeks the index
/// repeats it word for word: SQLite uses a partial index only for a query
/// whose `WHERE` has its condition among its terms, and PostgreSQL's generic
/// plan of `state = $1` cannot tell which states `$1` will be.
pub(super) const IN_STATE_INDEX: &str = "state NOT IN ('published', 'superseded')";

/// Whether `batches_state` holds the batches in `state` (see
/// [`IN_STATE_INDEX`]).
fn in_state_index(state: BatchState) -> bool {
    !matches!(state, BatchState::Published | BatchState::Superseded)
}

/// The `SELECT` of one page of `GET /v1/batches` (`q.limit` records, and one
/// more to tell whether another page follows), newest first, with its
/// arguments.
///
/// On PostgreSQL a dataset (else a state) filter is written as a range,
/// `dataset >= $1 AND dataset <= $1`, and the page ordered by it, then by
/// id: only its `(dataset, id)` index gives that order. Written as
/// `dataset = $1 ORDER BY id DESC`, the planner may walk the primary key
/// down from the newest batch instead, skipping every other dataset's rows,
/// once a dataset is a few percent of the registry: at 20 datasets of 1,000
/// batches, 19,000 rows for the page of the first one (4.4 ms against 0.1;
/// the query-plan tests read its plan). The two forms select the same rows
/// (text equality is a deterministic collation's). SQLite seeks the index
/// for the equality.
///
/// A state `batches_state` holds is sought there, its condition repeated
/// ([`IN_STATE_INDEX`]); a page of published or superseded batches (most
/// batches) walks the primary key from the newest one.
pub fn batch_page_sql(d: Dialect, q: &BatchQuery) -> (String, Vec<Arg>) {
    let indexed_state = q.state.filter(|s| in_state_index(*s));
    let lead = match (&q.dataset, indexed_state) {
        _ if d == Dialect::Sqlite => None,
        (Some(_), _) => Some("dataset"),
        (None, Some(_)) => Some("state"),
        (None, None) => None,
    };
    let mut f = Filter::default();
    let mut equal = |column: &str, value: Arg| {
        if lead == Some(column) {
            f.push(&format!("{column} >= $? AND {column} <= $?"), value);
        } else {
            f.push(&format!("{column} = $?"), value);
        }
    };
    if let Some(v) = &q.task {
        equal("task", v.into());
    }
    if let Some(v) = &q.dataset {
        equal("dataset", v.into());
    }
    if let Some(v) = q.dt {
        equal("dt", v.into());
    }
    if let Some(v) = q.state {
        equal("state", v.as_str().into());
    }
    if indexed_state.is_some() {
        f.clauses.push(IN_STATE_INDEX.to_owned());
    }
    if let Some(v) = q.since {
        f.push_all(d.compare_instant("started_at", ">=", v));
    }
    if let Some(v) = q.until {
        f.push_all(d.compare_instant("started_at", "<", v));
    }
    if let Some(v) = q.after_id {
        f.push("id < $?", v);
    }
    let order = lead.map(|c| format!("{c} DESC, ")).unwrap_or_default();
    let page = format!("{} ORDER BY {order}id DESC LIMIT {}", f.sql(), q.limit + 1);
    (record_sql(d, &page, "ORDER BY id DESC"), f.args)
}

impl SqlStore {
    #[tracing::instrument(level = "debug", skip_all, fields(batch_id = %batch_id))]
    pub async fn get_batch(&self, batch_id: &str) -> Result<Option<BatchRecord>> {
        let mut r = self.read().await?;
        load_record(&mut r.conn(), batch_id).await
    }

    pub async fn list_batches(&self, q: &BatchQuery) -> Result<Page<BatchRecord>> {
        let mut r = self.read().await?;
        let mut c = r.conn();
        let (sql, args) = batch_page_sql(c.dialect(), q);
        let mut rows: Vec<RecordRow> = c.all(&sql, args).await?;
        let more = rows.len() as i64 > q.limit;
        rows.truncate(q.limit as usize);
        let next = rows.last().filter(|_| more).map(|r| Position::Id(r.batch.id));
        let items = rows.into_iter().map(|r| BatchRecord::assemble(r, None)).collect::<Result<_>>()?;
        Ok(Page { items, next })
    }

    pub async fn list_partitions(&self, q: &PartitionQuery) -> Result<Page<PartitionRecord>> {
        let mut f = Filter::default();
        f.push("dataset = $?", &q.dataset);
        if let Some(v) = q.from {
            f.push("dt >= $?", v);
        }
        if let Some(v) = q.to {
            f.push("dt <= $?", v);
        }
        if let Some((dt, p)) = &q.after {
            // Newest date first, partitions of a date in name order.
            f.args.push(Arg::from(*dt));
            f.args.push(Arg::from(p));
            let (a, b) = (f.args.len() - 1, f.args.len());
            f.clauses.push(format!("(dt < ${a} OR (dt = ${a} AND partition_spec > ${b}))"));
        }
        let sql = format!(
            "SELECT {} FROM partitions {} ORDER BY dt DESC, partition_spec ASC LIMIT {}",
            partition_columns(self.dialect(), None),
            f.sql(),
            q.limit + 1
        );
        let mut r = self.read().await?;
        let mut items: Vec<PartitionRecord> = r.conn().all(&sql, f.args).await?;
        let more = items.len() as i64 > q.limit;
        items.truncate(q.limit as usize);
        let next = items.last().filter(|_| more).map(|p| Position::Partition(p.dt, p.partition.clone()));
        Ok(Page { items, next })
    }

    /// The current standing of each named partition, in order; `None` where
    /// no batch ever named it.
    #[tracing::instrument(level = "debug", skip_all, fields(dataset = %dataset))]
    pub async fn partition_status(&self, dataset: &str, partitions: &[String]) -> Result<Vec<Option<PartitionRecord>>> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {} FROM partitions WHERE dataset = $1 AND partition_spec IN ({})",
            partition_columns(self.dialect(), None),
            placeholders(2, partitions.len())
        );
        let mut a = args![dataset];
        a.extend(partitions.iter().map(Arg::from));
        let mut r = self.read().await?;
        let found: Vec<PartitionRecord> = r.conn().all(&sql, a).await?;
        Ok(partitions.iter().map(|p| found.iter().find(|f| &f.partition == p).cloned()).collect())
    }

    /// The latest batch a task started for a data date.
    pub async fn latest_task_batch(&self, task: &str, dt: NaiveDate) -> Result<Option<TaskLatest>> {
        let mut r = self.read().await?;
        let mut c = r.conn();
        let latest: Option<(String, String)> = c
            .opt(
                "SELECT batch_id, dataset FROM batches WHERE task = $1 AND dt = $2 ORDER BY seq DESC LIMIT 1",
                args![task, dt],
            )
            .await?;
        let Some((batch_id, dataset)) = latest else {
            return Ok(None);
        };
        let parts: Vec<(String,)> = c
            .all(
                "SELECT target_partition FROM task_produce_log WHERE batch_id = $1 ORDER BY target_partition",
                args![&batch_id],
            )
            .await?;
        Ok(Some(TaskLatest { batch_id, dataset, partitions: parts.into_iter().map(|(p,)| p).collect() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The condition the statements repeat is the index's, on both
    /// backends, and names exactly the states the index leaves out.
    #[test]
    fn the_state_index_condition_is_the_migrations_and_names_the_states_left_out() {
        for migration in [
            include_str!("../../migrations/sqlite/0015_state_index_partial.sql"),
            include_str!("../../migrations/postgres/0015_state_index_partial.sql"),
        ] {
            assert!(migration.contains(&format!("WHERE {IN_STATE_INDEX};")), "{migration}");
        }
        for name in BatchState::ALL {
            let state: BatchState = name.parse().unwrap();
            assert_eq!(!in_state_index(state), IN_STATE_INDEX.contains(&format!("'{name}'")), "{name}");
        }
    }
}
