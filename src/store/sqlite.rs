//! SQLite, the embedded default: one file, WAL, one writer at a time.

use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::DbOptions;

pub(super) async fn connect(url: &str, opts: &DbOptions) -> anyhow::Result<SqlitePool> {
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a commit the service acknowledged survives a power cut, not
        // only a killed process.
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        // A writer waits this long for another's lock (another process's
        // too), then the request answers 503 storage_unavailable.
        .busy_timeout(opts.timeout);
    let pool = SqlitePoolOptions::new()
        .max_connections(opts.max_connections.max(2))
        .acquire_timeout(opts.timeout)
        .connect_with(options)
        .await?;
    sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
    Ok(pool)
}

/// `BEGIN IMMEDIATE` takes the writer lock up front, so two writers queue on
/// the busy timeout instead of failing when a reader tries to upgrade.
pub(super) async fn begin_write(pool: &SqlitePool) -> sqlx::Result<Transaction<'static, Sqlite>> {
    pool.begin_with("BEGIN IMMEDIATE").await
}
