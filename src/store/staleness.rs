//! Staleness in the registry: after a publish or an invalidation, which
//! partitions built on the old data are stale now, transitively (the rule
//! itself is `domain/staleness.rs`), each change written to the feed in the
//! same transaction.

use std::collections::{BTreeSet, VecDeque};

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::types::Json;

use super::alerts::{self, NewAlert};
use super::batches::load_policy;
use super::db::{args, Conn};
use super::events::ChangeDetail;
use super::feed::emit;
use super::outbox::Receivers;
use super::records::{load_partition, partition_columns, PartitionRecord};
use crate::changes::Change;
use crate::domain::alerts::{self as alert_rules, Action, AlertKind};
use crate::domain::policy::DatasetPolicy;
use crate::domain::readiness::{ChangeKind, PartitionState, Standing};
use crate::domain::staleness::Staleness;
use crate::error::Result;

/// What a change to a partition set off: the partitions whose readiness
/// changed (for the change hub), and where alerts about them go.
pub(super) struct Ripple {
    pub changes: Vec<Change>,
    /// The service-wide receivers: alert webhook, CloudEvents, Airflow.
    pub receivers: Receivers,
    /// The transaction holds the feed's lock ([`super::feed::lock`]), so
    /// numbering a change needs no round trip to take it again.
    pub feed_locked: bool,
    /// The numbers of names the instance knows (the feed's datasets).
    pub names: std::sync::Arc<super::names::Names>,
    /// Numbers the transaction read or stored: remembered once it commits.
    pub learned: Vec<(i64, String)>,
}

/// Where an upstream partition stands: what staleness is judged against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Upstream {
    pub standing: Standing,
    pub version: i64,
}

impl From<&PartitionRecord> for Upstream {
    fn from(p: &PartitionRecord) -> Self {
        Self { standing: p.standing(), version: p.version }
    }
}

/// Why a partition built from `input` at `built_on` is stale now, if it is.
fn staleness(input_dataset: &str, input_partition: &str, built_on: i64, now: Upstream) -> Option<Staleness> {
    Staleness::of(input_dataset, input_partition, built_on, now.standing, now.version)
}

/// An input of a batch with its partition's row as it is now (inputs
/// without a row are left out: nothing was published there to go stale).
#[derive(sqlx::FromRow)]
struct InputNow {
    input_dataset: String,
    input_partition: String,
    input_version: i64,
    #[sqlx(flatten)]
    partition: PartitionRecord,
}

/// Whether a version built by `batch_id` is stale at birth: the first of the
/// inputs it read (by dataset and partition) that has moved on since. One
/// statement for the inputs and their partitions.
async fn stale_at_birth(c: &mut Conn<'_>, batch_id: &str) -> Result<Option<Staleness>> {
    let columns = partition_columns(c.dialect(), Some("p"));
    let sql = format!(
        "SELECT i.input_dataset, i.input_partition, i.input_version, {columns} FROM batch_inputs i \
         JOIN partitions p ON p.dataset = i.input_dataset AND p.partition_spec = i.input_partition \
         WHERE i.batch_id = $1 ORDER BY i.input_dataset, i.input_partition"
    );
    let inputs: Vec<InputNow> = c.all(&sql, args![batch_id]).await?;
    Ok(inputs
        .iter()
        .find_map(|i| staleness(&i.input_dataset, &i.input_partition, i.input_version, Upstream::from(&i.partition))))
}

/// A partition a batch has just published: its version, the state the
/// publish wrote, and, when the publishing `UPDATE` also cleared its
/// invalidation and staleness ([`Published::cleared`]), whether it was stale
/// before.
pub(super) struct Published<'a> {
    pub dataset: &'a str,
    pub partition: &'a str,
    pub batch_id: &'a str,
    pub version: i64,
    pub state: PartitionState,
    /// `Some(was_stale)`: the publishing `UPDATE` cleared
    /// `invalidated_reason`, `invalidated_at` and `stale_upstream`, which
    /// were read before it (a batch of one partition that does not read it:
    /// nothing else in the transaction reads them between that `UPDATE` and
    /// here). `None`: they are read and cleared here.
    pub cleared: Option<bool>,
    /// Whether the batch read any partition: a batch that read none
    /// publishes nothing stale at birth, and its inputs are not looked up.
    pub read_inputs: bool,
}

/// After a batch published a partition: records the change, clears an
/// invalidation, decides whether the new version is itself stale (it read
/// an input that has moved on), and makes everything built on the old
/// version stale. `policy` is the dataset's.
pub(super) async fn on_published(
    c: &mut Conn<'_>,
    p: Published<'_>,
    policy: &DatasetPolicy,
    now: DateTime<Utc>,
    ripple: &mut Ripple,
) -> Result<()> {
    let Published { dataset, partition, batch_id, version, state, cleared, read_inputs } = p;
    let was_stale = match cleared {
        Some(was_stale) => was_stale,
        None => load_partition(c, dataset, partition).await?.is_some_and(|s| s.stale_upstream.is_some()),
    };
    let kind = if version == 1 { ChangeKind::Published } else { ChangeKind::Restated };
    let published = ChangeDetail::default();
    emit(c, ripple, policy, kind, dataset, partition, version, Some(batch_id), published, now).await?;

    let stale = if read_inputs { stale_at_birth(c, batch_id).await? } else { None };
    if cleared.is_none() || stale.is_some() {
        c.exec(
            "UPDATE partitions SET invalidated_reason = NULL, invalidated_at = NULL, stale_upstream = $3 WHERE dataset = $1 AND partition_spec = $2",
            args![dataset, partition, stale.clone().map(Json)],
        )
        .await?;
    }
    let standing = Standing { state, invalidated: false, stale_upstream: stale.is_some() };
    let next = match (stale, was_stale) {
        (Some(why), _) => Some((ChangeKind::Stale, ChangeDetail::stale(why))),
        (None, true) => Some((ChangeKind::FreshAgain, ChangeDetail::default())),
        (None, false) => None,
    };
    if let Some((kind, detail)) = next {
        emit(c, ripple, policy, kind, dataset, partition, version, Some(batch_id), detail, now).await?;
    }
    propagate(c, dataset, partition, Upstream { standing, version }, now, ripple).await?;
    Ok(())
}

/// Takes a partition out of service until a new batch publishes it.
pub(super) async fn invalidate(
    c: &mut Conn<'_>,
    dataset: &str,
    partition: &str,
    reason: &str,
    now: DateTime<Utc>,
    ripple: &mut Ripple,
) -> Result<bool> {
    let Some(s) = load_partition(c, dataset, partition).await? else {
        return Ok(false);
    };
    let d = c.dialect();
    c.exec(
        &format!(
            "UPDATE partitions SET invalidated_reason = $3, invalidated_at = $4, {} WHERE dataset = $1 AND partition_spec = $2",
            d.set_instant("updated_at", "$5")
        ),
        args![dataset, partition, reason, now, d.instant(now)],
    )
    .await?;
    let policy = load_policy(c, dataset).await?.policy();
    emit(
        c,
        ripple,
        &policy,
        ChangeKind::Invalidated,
        dataset,
        partition,
        s.version,
        s.published_batch_id.as_deref(),
        ChangeDetail::invalidated(reason),
        now,
    )
    .await?;
    ripple.changes.push(Change { dataset: dataset.to_owned(), partitions: Some(vec![partition.to_owned()]) });
    let standing = Standing { invalidated: true, ..s.standing() };
    propagate(c, dataset, partition, Upstream { standing, version: s.version }, now, ripple).await?;
    Ok(true)
}

/// A partition whose current version read an upstream partition.
#[derive(sqlx::FromRow)]
struct Consumer {
    dataset: String,
    partition: String,
    /// The upstream version it read.
    built_on: i64,
    version: i64,
    batch_id: Option<String>,
    stale: Option<Json<Staleness>>,
    dt: NaiveDate,
}

/// The partitions whose current version read upstream partition ($1, $2),
/// run for every publish and invalidation. It starts from the input's rows in
/// `batch_inputs`, and finds each reading batch's partitions by its
/// `task_produce_log` rows and then by the partitions' primary key, keeping
/// those it published (three seeks each; joined the other way round, it
/// scanned every partition). No index on the partition's batch columns is
/// needed, so a publish updates its partition in place (migration 0017).
pub const CONSUMERS_SQL: &str =
    "SELECT d.dataset, d.partition_spec AS partition, i.input_version AS built_on, d.version, \
       d.published_batch_id AS batch_id, d.stale_upstream AS stale, d.dt \
     FROM batch_inputs i JOIN task_produce_log l ON l.batch_id = i.batch_id \
       JOIN partitions d ON d.dataset = l.target_table AND d.partition_spec = l.target_partition \
     WHERE i.input_dataset = $1 AND i.input_partition = $2 AND d.published_batch_id = i.batch_id \
     ORDER BY d.dataset, d.partition_spec";

/// Marks stale, transitively, every partition whose current version was
/// built on an older version of the root partition (`dataset`,
/// `partition`), or on it while it is stale or invalidated. `root` is where
/// the root stands: the caller has just written it.
async fn propagate(
    c: &mut Conn<'_>,
    dataset: &str,
    partition: &str,
    root: Upstream,
    now: DateTime<Utc>,
    ripple: &mut Ripple,
) -> Result<()> {
    let mut queue = VecDeque::from([(dataset.to_owned(), partition.to_owned())]);
    let mut seen = BTreeSet::new();
    let mut root = Some(root);
    while let Some((ds, p)) = queue.pop_front() {
        if !seen.insert((ds.clone(), p.clone())) {
            continue;
        }
        let upstream = match root.take() {
            Some(root) => root,
            None => match load_partition(c, &ds, &p).await? {
                Some(upstream) => Upstream::from(&upstream),
                None => continue,
            },
        };
        let consumers: Vec<Consumer> = c.all(CONSUMERS_SQL, args![&ds, &p]).await?;
        for Consumer {
            dataset: cds,
            partition: cp,
            built_on,
            version: cversion,
            batch_id: cbatch,
            stale: cstale,
            dt: cdt,
        } in consumers
        {
            let Some(why) = staleness(&ds, &p, built_on, upstream) else {
                continue;
            };
            if cstale.is_none() {
                let d = c.dialect();
                c.exec(
                    &format!(
                        "UPDATE partitions SET stale_upstream = $3, {} WHERE dataset = $1 AND partition_spec = $2",
                        d.set_instant("updated_at", "$4")
                    ),
                    args![&cds, &cp, Json(&why), d.instant(now)],
                )
                .await?;
                let policy = load_policy(c, &cds).await?.policy();
                emit(
                    c,
                    ripple,
                    &policy,
                    ChangeKind::Stale,
                    &cds,
                    &cp,
                    cversion,
                    cbatch.as_deref(),
                    ChangeDetail::stale(why.clone()),
                    now,
                )
                .await?;
                ripple.changes.push(Change { dataset: cds.clone(), partitions: Some(vec![cp.clone()]) });
                let hooks: Vec<String> =
                    ripple.receivers.webhook.iter().chain(policy.webhook_url.iter()).cloned().collect();
                let alert = NewAlert {
                    kind: AlertKind::StaleDownstream,
                    dedup_key: format!("stale_downstream:{cds}:{cp}:{cversion}"),
                    severity: alert_rules::severity(policy.tier),
                    task: None,
                    dataset: cds.clone(),
                    dt: Some(cdt),
                    partitions: vec![cp.clone()],
                    batch_id: cbatch.clone(),
                    stage: None,
                    category: None,
                    failing_checks: Vec::new(),
                    owner: policy.owner.clone(),
                    action: Action::RecomputeDownstream,
                    retryable: true,
                    message: format!(
                        "{cds} {cp} version {cversion} was built on {ds} {p} version {built_on}, which is now {} (version {})",
                        why.cause,
                        upstream.version
                    ),
                };
                alerts::raise(c, alert, &hooks, now).await?;
            }
            queue.push_back((cds, cp));
        }
    }
    Ok(())
}

impl super::SqlStore {
    /// Takes a partition out of service until a new batch publishes it;
    /// everything built on it goes stale.
    #[tracing::instrument(skip_all, fields(dataset = %dataset, partition = %partition))]
    pub async fn invalidate_partition(&self, dataset: &str, partition: &str, reason: &str) -> Result<()> {
        let now = self.now();
        let mut tx = self.begin_write().await?;
        let mut ripple = self.ripple();
        if !invalidate(&mut tx.conn(), dataset, partition, reason, now, &mut ripple).await? {
            return Err(crate::error::Error::not_found(
                "partition_not_found",
                format!("no batch ever wrote {dataset} {partition}"),
            ));
        }
        self.finish(tx, ripple.changes).await?;
        self.names.learn(ripple.learned);
        Ok(())
    }
}
