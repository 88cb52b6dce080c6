//! API tokens (hashes only) and the audit log.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;
use tokio::sync::oneshot;

use super::db::{args, placeholders, Arg};
use super::{Page, Position, SqlStore};
use crate::changes::Change;
use crate::error::{Error, Result};

/// The `dataset` of the change published when a token is revoked: every
/// replica's token cache is dropped on any change, so the name only has to
/// be one no dataset can have.
pub const TOKENS_CHANGED: &str = "#tokens";

/// A token as listed: never the secret, only its hash is stored.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = Token)]
pub struct TokenRecord {
    pub name: String,
    #[serde(skip)]
    pub secret_hash: String,
    /// `read`, `produce:<glob>`, `operate:<glob>` or `admin`.
    #[schema(value_type = Vec<String>)]
    pub scopes: Json<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Updated at most once a minute.
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A token about to be stored.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub name: String,
    pub secret_hash: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// One write, as the audit log keeps it.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub actor: String,
    pub request_id: String,
    pub action: String,
    pub method: String,
    pub path: String,
    pub dataset: Option<String>,
    pub status: u16,
}

/// One write, who made it and how it ended.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct AuditRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// A token's name, `jwt:<sub>`, `bootstrap`, `anonymous` (auth off) or `cli:<user>`.
    pub actor: String,
    /// The `x-request-id` of the write.
    pub request_id: String,
    #[schema(example = "batch.commit")]
    pub action: String,
    pub method: String,
    pub path: String,
    pub dataset: Option<String>,
    /// The HTTP status the write was answered with (refusals included).
    pub status: i64,
}

#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub actor: Option<String>,
    pub dataset: Option<String>,
    pub action: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub limit: i64,
    /// Id of the last row of the previous page (newest first).
    pub before_id: Option<i64>,
}

/// Most audit rows one `INSERT` carries: 8 parameters each, far below
/// either backend's limit on parameters per statement.
const AUDIT_ROWS_PER_INSERT: usize = 500;

/// Audit rows waiting for the audit writer, in the order they were
/// recorded (their ids follow it).
#[derive(Default)]
pub(super) struct AuditQueue {
    state: std::sync::Mutex<Queued>,
    /// Tests: the writer panics on its next turn, as a bug in it would.
    #[cfg(test)]
    panic_next: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Queued {
    pending: Vec<Pending>,
    /// A task is writing the queue: it takes what arrives meanwhile.
    writing: bool,
}

/// One request's rows, and who waits for them.
struct Pending {
    at: DateTime<Utc>,
    entries: Vec<AuditEntry>,
    reply: oneshot::Sender<Result<()>>,
}

impl AuditQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        // Nothing panics while holding it; a poisoned queue is still whole.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

const TOKEN_COLUMNS: &str = "name, secret_hash, scopes, created_at, expires_at, last_used_at";

/// The `details` of an error about one request field.
#[derive(serde::Serialize)]
struct FieldDetail {
    field: &'static str,
}

impl SqlStore {
    /// Stores a token's hash; 409 `token_exists` when the name is taken.
    #[tracing::instrument(skip_all, fields(name = %t.name))]
    pub async fn create_token(&self, t: &NewToken) -> Result<TokenRecord> {
        let mut tx = self.begin_write().await?;
        let mut c = tx.conn();
        let exists: Option<(String,)> = c.opt("SELECT name FROM tokens WHERE name = $1", args![&t.name]).await?;
        if exists.is_some() {
            return Err(Error::conflict(
                "token_exists",
                format!("a token named {:?} exists; revoke it first or choose another name", t.name),
                serde_json::to_value(FieldDetail { field: "name" }).map_err(anyhow::Error::from)?,
            ));
        }
        let rec: TokenRecord = c
            .one(
                &format!(
                    "INSERT INTO tokens (name, secret_hash, scopes, created_at, expires_at) VALUES ($1, $2, $3, $4, $5) \
                     RETURNING {TOKEN_COLUMNS}"
                ),
                args![&t.name, &t.secret_hash, Json(&t.scopes), self.now(), t.expires_at],
            )
            .await?;
        self.finish(tx, Vec::new()).await?;
        tracing::info!(token = %t.name, scopes = ?t.scopes, "token created");
        Ok(rec)
    }

    /// Deletes the token and tells every replica to forget what it cached.
    #[tracing::instrument(skip_all, fields(name = %name))]
    pub async fn revoke_token(&self, name: &str) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let n = tx.conn().exec("DELETE FROM tokens WHERE name = $1", args![name]).await?;
        let change = Change { dataset: TOKENS_CHANGED.to_owned(), partitions: None };
        self.finish(tx, if n > 0 { vec![change] } else { Vec::new() }).await?;
        if n > 0 {
            tracing::info!(token = %name, "token revoked");
        }
        Ok(n > 0)
    }

    /// Every token, by name (hashes included, for the caller to keep to itself).
    pub async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let mut r = self.read().await?;
        Ok(r.conn().all(&format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY name"), args![]).await?)
    }

    pub async fn find_token(&self, secret_hash: &str) -> Result<Option<TokenRecord>> {
        let mut r = self.read().await?;
        Ok(r.conn()
            .opt(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE secret_hash = $1"), args![secret_hash])
            .await?)
    }

    pub async fn touch_token(&self, name: &str, at: DateTime<Utc>) -> Result<()> {
        // One row, nothing read: no need to stop other writers.
        let mut tx = self.begin_write_under(&[]).await?;
        tx.conn().exec("UPDATE tokens SET last_used_at = $2 WHERE name = $1", args![name, at]).await?;
        Ok(tx.commit().await?)
    }

    /// Appends audit rows, and returns once they are durably written (or
    /// with the error that kept them out). Every write request does, after
    /// its own transaction: rows queued meanwhile by other requests are
    /// written together, in one transaction and one statement, so a busy
    /// registry spends one write turn (and one fsync) on many requests'
    /// rows instead of one each. The writing runs in a task: a request
    /// cancelled meanwhile does not take the rows of the others with it.
    pub async fn record_audit(self: &Arc<Self>, entries: &[AuditEntry]) -> Result<()> {
        let (reply, written) = oneshot::channel();
        let start = {
            let mut q = self.audit.lock();
            q.pending.push(Pending { at: self.now(), entries: entries.to_vec(), reply });
            !std::mem::replace(&mut q.writing, true)
        };
        if start {
            let store = self.clone();
            tokio::spawn(async move {
                let writer = tokio::spawn({
                    let store = store.clone();
                    async move { store.write_audit_queue().await }
                });
                if let Err(e) = writer.await {
                    // The writer died (a bug) holding the turn: nobody else
                    // could start one. Whoever still waits hears that their
                    // rows were not written, and the next request starts
                    // a new writer.
                    tracing::error!(error = %e, "the audit writer stopped");
                    let mut q = store.audit.lock();
                    q.writing = false;
                    q.pending.clear();
                }
            });
        }
        written.await.unwrap_or_else(|_| Err(anyhow::anyhow!("the audit writer stopped before answering").into()))
    }

    /// Writes what is queued, then what was queued meanwhile, until nothing is.
    async fn write_audit_queue(&self) {
        loop {
            let batch = {
                let mut q = self.audit.lock();
                if q.pending.is_empty() {
                    q.writing = false;
                    return;
                }
                std::mem::take(&mut q.pending)
            };
            #[cfg(test)]
            if self.audit.panic_next.swap(false, std::sync::atomic::Ordering::SeqCst) {
                panic!("the audit writer's bug, injected by a test");
            }
            let result = self.insert_audit(&batch).await;
            let shared = result.as_ref().err().map(|e| e.to_string());
            for p in batch {
                drop(p.reply.send(match &shared {
                    None => Ok(()),
                    Some(e) => Err(anyhow::anyhow!("cannot write audit rows: {e}").into()),
                }));
            }
        }
    }

    /// The rows of `batch`, inserts only, so other writers go on meanwhile
    /// (the registry's exclusive lock here stopped them all). Up to
    /// [`AUDIT_ROWS_PER_INSERT`] rows are one statement that is its own
    /// transaction ([`SqlStore::write_alone`]: one round trip on
    /// PostgreSQL); more, one transaction of such statements.
    async fn insert_audit(&self, batch: &[Pending]) -> Result<()> {
        let mut inserts = audit_inserts(batch);
        if inserts.len() == 1 {
            let (sql, a) = inserts.pop().expect("one insert");
            self.write_alone(&sql, a).await?;
            return Ok(());
        }
        let mut tx = self.begin_write_under(&[]).await?;
        for (sql, a) in inserts {
            tx.conn().exec(&sql, a).await?;
        }
        Ok(tx.commit().await?)
    }

    pub async fn list_audit(&self, q: &AuditQuery) -> Result<Page<AuditRecord>> {
        let mut clauses = Vec::new();
        let mut a: Vec<Arg> = Vec::new();
        for (col, v) in [("actor", &q.actor), ("dataset", &q.dataset), ("action", &q.action)] {
            if let Some(v) = v {
                a.push(v.into());
                clauses.push(format!("{col} = ${}", a.len()));
            }
        }
        if let Some(since) = q.since {
            a.push(since.into());
            clauses.push(format!("at >= ${}", a.len()));
        }
        if let Some(id) = q.before_id {
            a.push(id.into());
            clauses.push(format!("id < ${}", a.len()));
        }
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        let sql = format!(
            "SELECT id, at, actor, request_id, action, method, path, dataset, status FROM audit {filter} \
             ORDER BY id DESC LIMIT {}",
            q.limit + 1
        );
        let mut r = self.read().await?;
        let mut items: Vec<AuditRecord> = r.conn().all(&sql, a).await?;
        let more = items.len() as i64 > q.limit;
        items.truncate(q.limit as usize);
        let next = items.last().filter(|_| more).map(|x| Position::Id(x.id));
        Ok(Page { items, next })
    }
}

/// The statements that append the rows of `batch` to the audit log, each
/// an `INSERT … SELECT` of at most [`AUDIT_ROWS_PER_INSERT`] rows.
fn audit_inserts(batch: &[Pending]) -> Vec<(String, Vec<Arg>)> {
    const COLUMNS: usize = 8;
    let rows: Vec<(DateTime<Utc>, &AuditEntry)> =
        batch.iter().flat_map(|p| p.entries.iter().map(move |e| (p.at, e))).collect();
    rows.chunks(AUDIT_ROWS_PER_INSERT)
        .map(|chunk| {
            let values: Vec<String> =
                (0..chunk.len()).map(|r| format!("({})", placeholders(r * COLUMNS + 1, COLUMNS))).collect();
            let mut a: Vec<Arg> = Vec::with_capacity(chunk.len() * COLUMNS);
            for (at, e) in chunk {
                a.extend(args![
                    *at,
                    &e.actor,
                    &e.request_id,
                    &e.action,
                    &e.method,
                    &e.path,
                    e.dataset.clone(),
                    i64::from(e.status)
                ]);
            }
            let sql = format!(
                "INSERT INTO audit (at, actor, request_id, action, method, path, dataset, status) \
                 SELECT * FROM (VALUES {}) AS v",
                values.join(", ")
            );
            (sql, a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::*;
    use crate::clock::SystemClock;
    use crate::store::DbOptions;

    fn entry(request_id: &str) -> AuditEntry {
        AuditEntry {
            actor: "tester".into(),
            request_id: request_id.into(),
            action: "batch.start".into(),
            method: "POST".into(),
            path: "/v1/batches".into(),
            dataset: Some("d".into()),
            status: 201,
        }
    }

    /// A writer that dies (a bug) answers its waiters with an error instead
    /// of leaving them waiting, and frees the turn: the next request's rows
    /// are written by a new writer.
    #[tokio::test]
    async fn a_dead_audit_writer_fails_its_waiters_and_the_next_write_starts_another() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("audit.db").display());
        let store = SqlStore::connect(&url, &DbOptions::default(), Arc::new(SystemClock)).await.expect("store");

        store.audit.panic_next.store(true, Ordering::SeqCst);
        let lost = tokio::time::timeout(std::time::Duration::from_secs(10), store.record_audit(&[entry("r1")]))
            .await
            .expect("the waiter is answered, not left waiting");
        let err = lost.expect_err("its rows were not written");
        assert!(err.to_string().contains("stopped"), "{err}");

        tokio::time::timeout(std::time::Duration::from_secs(10), store.record_audit(&[entry("r2")]))
            .await
            .expect("a new writer takes the turn")
            .expect("written");
        let q = AuditQuery { actor: None, dataset: None, action: None, since: None, limit: 10, before_id: None };
        let rows: Vec<String> =
            store.list_audit(&q).await.expect("list").items.into_iter().map(|r| r.request_id).collect();
        assert_eq!(rows, vec!["r2".to_owned()]);
    }
}
