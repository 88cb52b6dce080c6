//! The OpenLineage intake's storage: every event as received, and the
//! batches a run started (found by their `run_ref` and Idempotency-Key, so a
//! run's batches need no table of their own).

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::batches::load_record;
use super::db::args;
use super::{BatchRecord, SqlStore};
use crate::error::Result;

/// An OpenLineage event as received, with the header fields it carried.
#[derive(Debug, Clone)]
pub struct LineageEvent {
    pub run_id: Option<String>,
    pub event_type: Option<String>,
    pub job_namespace: Option<String>,
    pub job: Option<String>,
    pub body: Value,
}

/// Where an event is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub id: i64,
    /// An exact repeat of the stored event `id`, not stored again.
    pub repeat: bool,
}

/// The SHA-256 of an event's JSON, written canonically (object keys sorted,
/// no spaces), so an exact repeat hashes the same.
fn body_hash(body: &Value) -> String {
    let canonical = serde_json::to_vec(body).expect("a JSON value serialises");
    hex::encode(Sha256::digest(canonical))
}

impl SqlStore {
    /// Stores an OpenLineage event as received, once: an exact repeat of a
    /// stored event is not stored again.
    #[tracing::instrument(skip_all, fields(run_id = e.run_id.as_deref(), event_type = e.event_type.as_deref()))]
    pub async fn record_lineage_event(&self, e: &LineageEvent) -> Result<Recorded> {
        let received_at = self.now();
        let hash = body_hash(&e.body);
        let mut tx = self.begin_write().await?;
        let mut c = tx.conn();
        let stored: Option<(i64,)> =
            c.opt("SELECT id FROM openlineage_events WHERE body_sha256 = $1", args![hash.clone()]).await?;
        let recorded = match stored {
            Some((id,)) => Recorded { id, repeat: true },
            None => {
                let (id,): (i64,) = c
                    .one(
                        "INSERT INTO openlineage_events (received_at, run_id, event_type, job_namespace, job, body, body_sha256) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                        args![
                            received_at,
                            e.run_id.clone(),
                            e.event_type.clone(),
                            e.job_namespace.clone(),
                            e.job.clone(),
                            e.body.clone(),
                            hash
                        ],
                    )
                    .await?;
                Recorded { id, repeat: false }
            }
        };
        tx.commit().await?;
        Ok(recorded)
    }

    /// Records what the intake made of a stored OpenLineage event.
    #[tracing::instrument(skip_all, fields(event_id = id))]
    pub async fn set_lineage_outcome(&self, id: i64, outcome: &Value) -> Result<()> {
        let mut tx = self.begin_write().await?;
        tx.conn().exec("UPDATE openlineage_events SET outcome = $2 WHERE id = $1", args![id, outcome.clone()]).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The batches an OpenLineage run started, oldest first.
    #[tracing::instrument(level = "debug", skip_all, fields(run_id = %run_id))]
    pub async fn lineage_batches(&self, run_id: &str) -> Result<Vec<BatchRecord>> {
        let mut r = self.read().await?;
        let mut c = r.conn();
        let ids: Vec<(String,)> = c
            .all(
                "SELECT batch_id FROM batches WHERE run_ref = $1 AND idempotency_key = 'openlineage:' || $1 || ':' || dataset \
                 ORDER BY id",
                args![run_id],
            )
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for (id,) in ids {
            if let Some(record) = load_record(&mut c, &id).await? {
                out.push(record);
            }
        }
        Ok(out)
    }
}
