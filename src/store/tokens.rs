//! API tokens (hashes only) and the audit log.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;
use tokio::sync::oneshot;

use super::audit_form::{batch_parameter, fill_route, request_id_numbers, request_id_text, route_parameters};
use super::db::{args, numbered, placeholders, Arg, Dialect};
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
    /// The route `path` matched (`/v1/batches/{batch_id}/commit`), if any:
    /// the row then keeps the path as the route and its parameters.
    pub route: Option<String>,
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

/// An audit row as read: [`AuditRecord`]'s columns, its path and request
/// id perhaps in their compact form (see [`super::audit_form`]).
#[derive(sqlx::FromRow)]
struct StoredAudit {
    #[sqlx(flatten)]
    record: AuditRecord,
    route: Option<String>,
    request_process: Option<i64>,
    request_seq: Option<i64>,
    /// The id of the batch the row refers to by number: the path's parameters.
    batch_id: Option<String>,
}

impl StoredAudit {
    /// The row as it was recorded, whichever form it was kept in.
    fn record(self) -> AuditRecord {
        let mut record = self.record;
        if let Some(route) = self.route {
            record.path = fill_route(&route, self.batch_id.as_deref().unwrap_or(&record.path));
        }
        if let (Some(process), Some(seq)) = (self.request_process, self.request_seq) {
            record.request_id = request_id_text(process, seq);
        }
        record
    }
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

/// Most audit rows one `INSERT` carries: 12 parameters each, far below
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
        let numbers = self.audit_numbers(batch).await?;
        let mut inserts = audit_inserts(self.dialect(), batch, &numbers);
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

    /// The number in `audit_names` of every name the rows of `batch` use.
    async fn audit_numbers(&self, batch: &[Pending]) -> Result<HashMap<String, i64>> {
        let used: BTreeSet<&str> = batch
            .iter()
            .flat_map(|p| &p.entries)
            .flat_map(|e| [Some(&e.actor), Some(&e.action), Some(&e.method), e.dataset.as_ref(), e.route.as_ref()])
            .flatten()
            .map(String::as_str)
            .collect();
        self.name_numbers(used).await
    }

    pub async fn list_audit(&self, q: &AuditQuery) -> Result<Page<AuditRecord>> {
        let filters = [&q.actor, &q.dataset, &q.action];
        let names: Vec<&str> = filters.into_iter().flatten().map(String::as_str).collect();
        let mut r = self.read().await?;
        let numbers = self.stored_numbers(&mut r.conn(), &names).await?;
        let (sql, a) = audit_page_sql(self.dialect(), q, &numbers);
        let stored: Vec<StoredAudit> = r.conn().all(&sql, a).await?;
        let mut items: Vec<AuditRecord> = stored.into_iter().map(StoredAudit::record).collect();
        let more = items.len() as i64 > q.limit;
        items.truncate(q.limit as usize);
        let next = items.last().filter(|_| more).map(|x| Position::Id(x.id));
        Ok(Page { items, next })
    }
}

/// A page of the audit log, newest first: the rows of `audit_log`, their
/// names looked up by number, and those of `audit` (written before
/// migration 0019), merged by id. Each filter applies to both, by its
/// number in `numbers` on `audit_log` (bound, so that the planner sees how
/// common it is; a name `numbers` lacks was never stored and matches no
/// row there). Each table is read along an index in id order, so a page
/// stops after its rows.
pub fn audit_page_sql(d: Dialect, q: &AuditQuery, numbers: &HashMap<String, i64>) -> (String, Vec<Arg>) {
    let mut a: Vec<Arg> = Vec::new();
    let (mut compact, mut old) = (Vec::new(), Vec::new());
    for (column, value) in [("actor", &q.actor), ("dataset", &q.dataset), ("action", &q.action)] {
        if let Some(v) = value {
            a.push(numbers.get(v).copied().into());
            compact.push(format!("l.{column} = ${}", a.len()));
            a.push(v.into());
            old.push(format!("{column} = ${}", a.len()));
        }
    }
    if let Some(since) = q.since {
        a.push(d.instant(since));
        compact.push(format!("l.at >= ${}", a.len()));
        old.push(numbered(d.compare_text_instant("at", ">=", since), &mut a));
    }
    if let Some(id) = q.before_id {
        a.push(id.into());
        compact.push(format!("l.id < ${}", a.len()));
        old.push(format!("id < ${}", a.len()));
    }
    let filter = |clauses: Vec<String>| {
        if clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", clauses.join(" AND "))
        }
    };
    // Each table's page is taken first: PostgreSQL sorts the union of the
    // two pages, not of the two tables.
    let sql = format!(
        "SELECT * FROM (\
            SELECT l.id AS id, {at} AS at, who.name AS actor, l.request_id AS request_id, what.name AS action, \
                   how.name AS method, l.path AS path, ds.name AS dataset, l.status AS status, rt.name AS route, \
                   l.request_process AS request_process, l.request_seq AS request_seq, bt.batch_id AS batch_id \
            FROM audit_log l JOIN audit_names who ON who.id = l.actor JOIN audit_names what ON what.id = l.action \
                 JOIN audit_names how ON how.id = l.method LEFT JOIN audit_names ds ON ds.id = l.dataset \
                 LEFT JOIN audit_names rt ON rt.id = l.route LEFT JOIN batches bt ON bt.id = l.batch{compact} \
            ORDER BY l.id DESC LIMIT {limit}) AS compact \
         UNION ALL \
         SELECT * FROM (\
            SELECT id, at, actor, request_id, action, method, path, dataset, status, CAST(NULL AS TEXT) AS route, \
                   CAST(NULL AS BIGINT) AS request_process, CAST(NULL AS BIGINT) AS request_seq, \
                   CAST(NULL AS TEXT) AS batch_id FROM audit{old} \
            ORDER BY id DESC LIMIT {limit}) AS old \
         ORDER BY id DESC LIMIT {limit}",
        at = d.instant_value("l.at"),
        compact = filter(compact),
        old = filter(old),
        limit = q.limit + 1
    );
    (sql, a)
}

/// The statements that append the rows of `batch` to the audit log, each
/// an `INSERT … SELECT` of at most [`AUDIT_ROWS_PER_INSERT`] rows, every
/// name given by its number in `numbers`.
fn audit_inserts(d: Dialect, batch: &[Pending], numbers: &HashMap<String, i64>) -> Vec<(String, Vec<Arg>)> {
    const COLUMNS: usize = 12;
    let number = |name: &str| numbers.get(name).copied();
    let rows: Vec<(DateTime<Utc>, &AuditEntry)> =
        batch.iter().flat_map(|p| p.entries.iter().map(move |e| (p.at, e))).collect();
    rows.chunks(AUDIT_ROWS_PER_INSERT)
        .map(|chunk| {
            let values: Vec<String> =
                (0..chunk.len()).map(|r| format!("({})", placeholders(r * COLUMNS + 1, COLUMNS))).collect();
            let mut a: Vec<Arg> = Vec::with_capacity(chunk.len() * COLUMNS);
            for (at, e) in chunk {
                let by_route = e.route.as_deref().and_then(|r| Some((r, number(r)?, route_parameters(r, &e.path)?)));
                let (route, path, batch_id) = match by_route {
                    Some((route, n, parameters)) => {
                        let batch_id = batch_parameter(route, &parameters).map(str::to_owned);
                        (Some(n), parameters, batch_id)
                    }
                    None => (None, e.path.clone(), None),
                };
                let (request_id, process, seq) = match request_id_numbers(&e.request_id) {
                    Some((process, seq)) => ("", Some(process), Some(seq)),
                    None => (e.request_id.as_str(), None, None),
                };
                a.push(d.instant(*at));
                a.extend(args![
                    number(&e.actor),
                    number(&e.action),
                    number(&e.method),
                    e.dataset.as_deref().and_then(number),
                    i64::from(e.status),
                    request_id,
                    path,
                    route,
                    process,
                    seq,
                    batch_id
                ]);
            }
            // A stored batch's id is kept as its number; the path's
            // parameters then as nothing. Rows go in in the order given:
            // a lookup each, no join to reorder them.
            let sql = format!(
                "INSERT INTO audit_log (at, actor, action, method, dataset, status, request_id, path, route, \
                 request_process, request_seq, batch) \
                 SELECT column1, column2, column3, column4, column5, column6, column7, \
                        CASE WHEN batch IS NULL THEN column8 ELSE '' END, column9, column10, column11, batch \
                 FROM (SELECT v.*, (SELECT b.id FROM batches b WHERE b.batch_id = v.column12) AS batch \
                       FROM (VALUES {}) AS v) AS w",
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
            route: Some("/v1/batches".into()),
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

    /// The names kept in memory are bounded: past `NAMES_KEPT` they are
    /// forgotten, and a forgotten name's number is read again, not stored
    /// twice.
    #[tokio::test]
    async fn the_names_kept_in_memory_are_bounded_and_forgotten_ones_read_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("audit.db").display());
        let store = SqlStore::connect(&url, &DbOptions::default(), Arc::new(SystemClock)).await.expect("store");
        store.record_audit(&[entry("r1")]).await.expect("written");
        let names: Vec<(i64, String)> = {
            let mut r = store.read().await.expect("read");
            r.conn().all("SELECT CAST(id AS BIGINT), name FROM audit_names ORDER BY id", args![]).await.expect("names")
        };
        let names: Vec<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
        let kinds = ["published", "restated", "invalidated", "stale", "fresh_again"];
        assert_eq!(
            names,
            [&kinds[..], &["/v1/batches", "POST", "batch.start", "d", "tester"]].concat(),
            "the feed's kinds (0020) first, then the names the row used (its route among them, 0021)"
        );
        store.names.lock().extend((0..super::super::names::NAMES_KEPT).map(|i| (format!("filler-{i}"), -1)));

        let mut other = entry("r2");
        other.dataset = Some("e".into());
        store.record_audit(&[other]).await.expect("written");
        let kept: Vec<String> = store.names.lock().keys().cloned().collect();
        assert_eq!(kept, ["e"], "the full cache was dropped, then the new name kept");
        let q = AuditQuery { limit: 10, ..AuditQuery::default() };
        let rows = store.list_audit(&q).await.expect("list").items;
        let seen: Vec<(&str, Option<&str>, &str)> =
            rows.iter().map(|r| (r.request_id.as_str(), r.dataset.as_deref(), r.actor.as_str())).collect();
        assert_eq!(seen, [("r2", Some("e"), "tester"), ("r1", Some("d"), "tester")]);
        let mut r = store.read().await.expect("read");
        let count: (i64,) = r.conn().one("SELECT COUNT(*) FROM audit_names", args![]).await.expect("count");
        assert_eq!(count.0, 11, "only e was new");
    }
}
