//! Datasets: each one's policy, created or replaced whole by `PUT`, or made
//! with the default policy when a batch names a dataset first.

use chrono::{DateTime, Utc};

use super::db::{args, Arg, Conn};
use super::records::{DatasetRow, DATASET_COLUMNS};
use super::{DatasetRecord, SqlStore};
use crate::domain::names::DatasetName;
use crate::domain::policy::DatasetPolicy;
use crate::error::Result;

/// Batches remembered by [`BatchDatasets`] before it starts again empty.
const REMEMBERED_BATCHES: usize = 4096;

/// Which dataset a batch writes, for the batches this instance started or
/// looked up lately: a commit, fail or heartbeat then needs no statement to
/// authorise it and lock its dataset. A batch's dataset never changes and
/// batches are never deleted, so an entry cannot go stale; only batches that
/// exist are remembered (a start only once it is committed: a start rolled
/// back frees its id for the next start of the task and date, which may
/// name another dataset). Bounded: full, it forgets everything and fills
/// again with the running batches, which are what is asked about.
#[derive(Default)]
pub(super) struct BatchDatasets(std::sync::Mutex<std::collections::HashMap<String, String>>);

impl BatchDatasets {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, String>> {
        // Nothing panics while holding it; a poisoned map is still whole.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, batch_id: &str) -> Option<String> {
        self.lock().get(batch_id).cloned()
    }

    pub(super) fn remember(&self, batch_id: &str, dataset: &str) {
        let mut known = self.lock();
        if known.len() >= REMEMBERED_BATCHES {
            known.clear();
        }
        known.insert(batch_id.to_owned(), dataset.to_owned());
    }
}

/// A dataset row with every policy column given: what a policy says is
/// written, never a column's SQL `DEFAULT` (see [`crate::domain::policy`]).
/// Its values are [`dataset_args`].
const INSERT_DATASET: &str =
    "INSERT INTO datasets (name, tier, write_mode, unique_key, timezone, max_volume_change, baseline_periods, allow_empty, owner, \
       max_partitions_per_batch, deadline, webhook_url, airflow_asset, partition_key, events_url, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $14, $15, $16, $13, $13)";

fn dataset_args(name: &str, p: &DatasetPolicy, now: DateTime<Utc>) -> Vec<Arg> {
    args![
        name,
        p.tier.as_str(),
        p.write_mode.as_str(),
        sqlx::types::Json(&p.unique_key),
        p.timezone.clone(),
        p.max_volume_change,
        i64::from(p.baseline_periods),
        p.allow_empty,
        p.owner.clone(),
        i64::from(p.max_partitions_per_batch),
        p.deadline.as_ref().map(sqlx::types::Json),
        p.webhook_url.clone(),
        now,
        p.airflow_asset.clone(),
        p.partition_key.clone(),
        p.events_url.clone()
    ]
}

/// The row of the dataset a batch names: one nobody described is made
/// with the default policy, written out in full. A dataset that exists
/// (every start but its first) costs one statement.
pub(super) async fn ensure_dataset(c: &mut Conn<'_>, name: &str, now: DateTime<Utc>) -> Result<DatasetRow> {
    let select = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE name = $1");
    if let Some(row) = c.opt(&select, args![name]).await? {
        return Ok(row);
    }
    let insert = format!("{INSERT_DATASET} ON CONFLICT (name) DO NOTHING");
    c.exec(&insert, dataset_args(name, &DatasetPolicy::default(), now)).await?;
    super::batches::load_policy(c, name).await
}

impl SqlStore {
    #[tracing::instrument(skip_all, fields(dataset = %name))]
    pub async fn put_dataset(&self, name: &DatasetName, p: &DatasetPolicy) -> Result<(DatasetRecord, bool)> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let mut c = tx.conn();
        let existed: Option<(String,)> =
            c.opt("SELECT name FROM datasets WHERE name = $1", args![name.as_str()]).await?;
        let sql = format!(
            "{INSERT_DATASET} \
             ON CONFLICT (name) DO UPDATE SET tier = excluded.tier, write_mode = excluded.write_mode, unique_key = excluded.unique_key, \
               timezone = excluded.timezone, max_volume_change = excluded.max_volume_change, baseline_periods = excluded.baseline_periods, \
               allow_empty = excluded.allow_empty, owner = excluded.owner, max_partitions_per_batch = excluded.max_partitions_per_batch, \
               deadline = excluded.deadline, webhook_url = excluded.webhook_url, airflow_asset = excluded.airflow_asset, \
               partition_key = excluded.partition_key, events_url = excluded.events_url, updated_at = excluded.updated_at \
             RETURNING {DATASET_COLUMNS}"
        );
        let row: DatasetRow = c.one(&sql, dataset_args(name.as_str(), p, now)).await?;
        tx.commit().await?;
        Ok((row.into(), existed.is_none()))
    }

    pub async fn get_dataset(&self, name: &str) -> Result<Option<DatasetRecord>> {
        let mut r = self.read().await?;
        let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE name = $1");
        Ok(r.conn().opt::<DatasetRow>(&sql, args![name]).await?.map(Into::into))
    }

    /// The dataset a batch writes, for authorising a request about the
    /// batch and for locking its dataset: from memory when this instance
    /// started the batch or looked it up before ([`BatchDatasets`]), else
    /// one statement, not the batch's record.
    pub async fn dataset_of_batch(&self, batch_id: &str) -> Result<Option<String>> {
        if let Some(dataset) = self.batch_datasets.get(batch_id) {
            return Ok(Some(dataset));
        }
        let mut r = self.read().await?;
        let row: Option<(String,)> =
            r.conn().opt("SELECT dataset FROM batches WHERE batch_id = $1", args![batch_id]).await?;
        if let Some((dataset,)) = &row {
            self.batch_datasets.remember(batch_id, dataset);
        }
        Ok(row.map(|(d,)| d))
    }

    pub async fn list_datasets(&self) -> Result<Vec<DatasetRecord>> {
        let mut r = self.read().await?;
        let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets ORDER BY name");
        Ok(r.conn().all::<DatasetRow>(&sql, args![]).await?.into_iter().map(Into::into).collect())
    }
}
