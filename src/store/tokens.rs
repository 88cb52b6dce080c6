//! API tokens (hashes only) and the audit log.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;

use super::db::{args, Arg};
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

    /// Appends audit rows. Every write request does, after its own
    /// transaction: inserts only, so other writers go on meanwhile (the
    /// registry's exclusive lock here stopped them all once per request).
    pub async fn record_audit(&self, entries: &[AuditEntry]) -> Result<()> {
        let mut tx = self.begin_write_under(&[]).await?;
        let at = self.now();
        for e in entries {
            tx.conn()
                .exec(
                    "INSERT INTO audit (at, actor, request_id, action, method, path, dataset, status) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    args![
                        at,
                        &e.actor,
                        &e.request_id,
                        &e.action,
                        &e.method,
                        &e.path,
                        e.dataset.clone(),
                        i64::from(e.status)
                    ],
                )
                .await?;
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
