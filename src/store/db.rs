//! The thin layer between the registry's SQL and the two backends.
//!
//! The registry's statements are written once, in the SQL both SQLite and
//! PostgreSQL accept (`$n` placeholders, `ON CONFLICT`, `RETURNING`). Arguments
//! travel as [`Arg`] values and rows decode through types that implement
//! `FromRow` for both backends, so each statement runs natively on either
//! without `sqlx::Any` and without losing types.

use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;
use serde_json::Value;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::types::Json;
use sqlx::{Arguments, FromRow, PgConnection, Postgres, Sqlite, SqliteConnection};

use super::sqlite::WriteTx;

/// One bound value.
#[derive(Debug, Clone)]
pub enum Arg {
    Text(Option<String>),
    Int(Option<i64>),
    Real(Option<f64>),
    Bool(bool),
    Date(Option<NaiveDate>),
    Time(Option<DateTime<Utc>>),
    Json(Option<Value>),
}

macro_rules! arg_from {
    ($($t:ty => $variant:ident $(via $conv:expr)?),+ $(,)?) => {$(
        impl From<$t> for Arg {
            fn from(v: $t) -> Self { Arg::$variant(arg_from!(@conv v $(, $conv)?)) }
        }
    )+};
    (@conv $v:ident) => { $v };
    (@conv $v:ident, $conv:expr) => { $conv($v) };
}

arg_from! {
    String => Text via Some,
    Option<String> => Text,
    i64 => Int via Some,
    Option<i64> => Int,
    f64 => Real via Some,
    bool => Bool,
    NaiveDate => Date via Some,
    Option<NaiveDate> => Date,
    DateTime<Utc> => Time via Some,
    Option<DateTime<Utc>> => Time,
    Value => Json via Some,
    Option<Value> => Json,
}

/// A typed document, stored as JSON.
impl<T: serde::Serialize> From<Json<T>> for Arg {
    fn from(v: Json<T>) -> Self {
        // Documents are structs and enums with string keys: serialising them cannot fail.
        Arg::Json(Some(serde_json::to_value(&v.0).expect("a typed document serialises")))
    }
}

/// An optional typed document, stored as JSON or NULL.
impl<T: serde::Serialize> From<Option<Json<T>>> for Arg {
    fn from(v: Option<Json<T>>) -> Self {
        Arg::Json(v.map(|v| serde_json::to_value(&v.0).expect("a typed document serialises")))
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Arg::Text(Some(v.to_owned()))
    }
}

impl From<&String> for Arg {
    fn from(v: &String) -> Self {
        Arg::Text(Some(v.clone()))
    }
}

impl From<Option<&str>> for Arg {
    fn from(v: Option<&str>) -> Self {
        Arg::Text(v.map(str::to_owned))
    }
}

/// Stores domain enums as their text and reads them back checked, on both
/// backends: an unknown stored value is a decode error that names the column
/// (sqlx adds it) and the value, never a panic and never a guess.
macro_rules! text_enum {
    ($($t:ty),+ $(,)?) => {$(
        impl<DB: sqlx::Database> sqlx::Type<DB> for $t
        where
            str: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as sqlx::Type<DB>>::type_info()
            }
            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $t
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&str as sqlx::Decode<DB>>::decode(value)?;
                text.parse::<$t>().map_err(|e| format!("unknown stored value: {e}").into())
            }
        }

        impl From<$t> for Arg {
            fn from(v: $t) -> Self {
                Arg::Text(Some(v.as_str().to_owned()))
            }
        }

        impl From<Option<$t>> for Arg {
            fn from(v: Option<$t>) -> Self {
                Arg::Text(v.map(|v| v.as_str().to_owned()))
            }
        }
    )+};
}

text_enum!(
    crate::domain::alerts::Action,
    crate::domain::alerts::AlertKind,
    crate::domain::alerts::AlertState,
    crate::domain::alerts::Severity,
    crate::domain::batch::BatchState,
    crate::domain::batch::EventKind,
    crate::domain::batch::FailCategory,
    crate::domain::batch::FailStage,
    crate::domain::batch::Trigger,
    crate::domain::checks::CheckName,
    crate::domain::policy::Tier,
    crate::domain::policy::WriteMode,
    crate::domain::push::Target,
    crate::domain::readiness::ChangeKind,
    crate::domain::readiness::PartitionState,
    crate::domain::repair::RepairAction,
);

/// Builds a `Vec<Arg>` from values of mixed types.
macro_rules! args {
    ($($v:expr),* $(,)?) => { vec![$($crate::store::db::Arg::from($v)),*] };
}
pub(crate) use args;

/// A timestamp as SQLite stores it: RFC 3339 text in UTC, always six
/// fractional digits and `Z` (27 characters; sqlx's own encoding, `+00:00`
/// and as many digits as needed, took up to 32, ten times per batch). Text
/// of one form sorts in time order. Rows written before in the other form
/// compare with these in time order too, ties aside: up to the fraction
/// both agree, and where one ends, its `+` or `Z` sorts below the other's
/// next digit. A filter compares each with text of its own form
/// ([`Dialect::compare_text_instant`]).
fn sqlite_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// A clause with a `$?` for each of its arguments, in order (as
/// [`Dialect::compare_instant`] gives it), numbered after the arguments
/// already in `args`, to which its own are added.
pub fn numbered((clause, own): (String, Vec<Arg>), args: &mut Vec<Arg>) -> String {
    debug_assert_eq!(clause.matches("$?").count(), own.len(), "{clause}");
    let mut parts = clause.split("$?");
    let mut out = parts.next().unwrap_or_default().to_owned();
    for (part, arg) in parts.zip(own) {
        args.push(arg);
        out.push_str(&format!("${}{part}", args.len()));
    }
    out
}

/// A timestamp as sqlx encodes it for SQLite, the form the first versions
/// stored (see [`Dialect::compare_text_instant`]).
fn sqlx_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)
}

fn sqlite_args(args: Vec<Arg>) -> SqliteArguments<'static> {
    let mut out = SqliteArguments::default();
    for a in args {
        let r = match a {
            Arg::Text(v) => out.add(v),
            Arg::Int(v) => out.add(v),
            Arg::Real(v) => out.add(v),
            Arg::Bool(v) => out.add(v),
            Arg::Date(v) => out.add(v),
            Arg::Time(v) => out.add(v.map(sqlite_time)),
            Arg::Json(v) => out.add(v.map(Json)),
        };
        r.expect("encoding into SqliteArguments does not fail");
    }
    out
}

fn pg_args(args: Vec<Arg>) -> PgArguments {
    let mut out = PgArguments::default();
    for a in args {
        let r = match a {
            Arg::Text(v) => out.add(v),
            Arg::Int(v) => out.add(v),
            Arg::Real(v) => out.add(v),
            Arg::Bool(v) => out.add(v),
            Arg::Date(v) => out.add(v),
            Arg::Time(v) => out.add(v),
            Arg::Json(v) => out.add(v.map(Json)),
        };
        r.expect("encoding into PgArguments does not fail");
    }
    out
}

/// A row type both backends can decode.
pub trait Row: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin {}
impl<T> Row for T where T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin {}

/// A document as [`Dialect::packed`] stores it (its JSON text as one JSON
/// string), or as documents were stored before it (the document itself):
/// both read back as `T`. `T` is never a JSON string itself, so the two
/// cannot be mistaken for each other.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed<T>(pub T);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Packed<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::String(text) => serde_json::from_str(&text),
            whole => T::deserialize(whole),
        }
        .map(Packed)
        .map_err(D::Error::custom)
    }
}

/// A connection of either backend, borrowed from a pool or a transaction.
pub enum Conn<'c> {
    Sqlite(&'c mut SqliteConnection),
    Postgres(&'c mut PgConnection),
}

/// `columns` (`"a, b"`) as a `SELECT` lists them, qualified by `alias`
/// when given (`"d.a, d.b"`, for a query that joins the table), with each
/// of `instants` read by [`Dialect::split_instant`] under its own name.
pub(super) fn select_columns(d: Dialect, alias: Option<&str>, columns: &str, instants: &[&str]) -> String {
    columns
        .split(',')
        .map(|col| {
            let col = col.trim();
            let named = alias.map(|a| format!("{a}.{col}")).unwrap_or_else(|| col.to_owned());
            if instants.contains(&col) {
                format!("{} AS {col}", d.split_instant(&named))
            } else {
                named
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `$first, $first+1, …` for `n` values: an `IN (…)` list, or one row of
/// a multi-row `VALUES`.
pub(super) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// The SQL that is not the same on both backends, kept here: a JSON array
/// built inside a query, and an instant kept as a number on SQLite.
/// Everything else is written once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A key of an object [`Dialect::json_rows`] builds, and the column it shows.
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    /// A plain column: text, number or NULL.
    Col(&'a str, &'a str),
    /// A column holding a JSON document, embedded as that document.
    Doc(&'a str, &'a str),
}

impl Dialect {
    /// `t` as an instant column of the compact kind holds it (`audit_log.at`):
    /// microseconds since 1970-01-01 UTC on SQLite (an `INTEGER`, 8 bytes
    /// where the text form takes 27), a `TIMESTAMPTZ` on PostgreSQL.
    pub fn instant(self, t: DateTime<Utc>) -> Arg {
        match self {
            Dialect::Sqlite => Arg::Int(Some(t.timestamp_micros())),
            Dialect::Postgres => Arg::Time(Some(t)),
        }
    }

    /// The instant column `col` (see [`Dialect::instant`]) as a query gives
    /// it back: on SQLite the text form of [`sqlite_time`], which reads back
    /// as a `DateTime<Utc>` to the microsecond.
    pub fn instant_value(self, col: &str) -> String {
        match self {
            // SQLite's `/` and `%` round toward zero: the fraction is
            // taken modulo a second upwards, so times before 1970 read too.
            Dialect::Sqlite => {
                let fraction = format!("(({col} % 1000000 + 1000000) % 1000000)");
                format!(
                    "(strftime('%Y-%m-%dT%H:%M:%S', ({col} - {fraction}) / 1000000, 'unixepoch') \
                     || printf('.%06dZ', {fraction}))"
                )
            }
            Dialect::Postgres => col.to_owned(),
        }
    }

    /// The instant column `col` of `batches` or `partitions` (one of
    /// `batches::BATCH_INSTANTS` or `records::PARTITION_INSTANTS`) as a
    /// query reads it. On SQLite, since migration 0022, such an instant is
    /// kept as a number in `{col}_us` (see
    /// [`Dialect::instant`]) and its first, text column holds `''` (it is
    /// `NOT NULL` and a table is not rewritten to change that); rows written
    /// before hold the text alone. Either reads as the same text form, so
    /// the value compares with an instant bound as [`Arg::Time`] in time
    /// order. On PostgreSQL the column is a `TIMESTAMPTZ`, read as it is.
    /// `col` may be qualified (`b.started_at`).
    pub fn split_instant(self, col: &str) -> String {
        match self {
            Dialect::Sqlite => format!("COALESCE({}, NULLIF({col}, ''))", self.instant_value(&format!("{col}_us"))),
            Dialect::Postgres => col.to_owned(),
        }
    }

    /// A condition `{col} {op} t` (`op` one of `<`, `<=`, `>=`, `>`) on an
    /// instant column read by [`Dialect::split_instant`], with `$?` where
    /// each of its arguments goes, and those arguments in order. On SQLite
    /// it compares the number in `{col}_us` with `t`'s, and the text of a
    /// row written before migration 0022 with `t` as text of the row's form
    /// ([`Dialect::compare_text_instant`]), so that a scan does not convert
    /// every row it passes to text (about six times the cost of either
    /// comparison). On PostgreSQL it compares the column.
    pub fn compare_instant(self, col: &str, op: &str, t: DateTime<Utc>) -> (String, Vec<Arg>) {
        match self {
            Dialect::Sqlite => {
                let (text, mut args) = self.compare_text_instant(col, op, t);
                args.insert(0, self.instant(t));
                (format!("COALESCE({col}_us {op} $?, {text})"), args)
            }
            Dialect::Postgres => (format!("{col} {op} $?"), vec![t.into()]),
        }
    }

    /// A condition `{col} {op} t` on an instant column of text, with `$?`
    /// where each of its arguments goes, and those arguments in order. On
    /// SQLite such a row holds one of two forms: sqlx's encoding, which the
    /// first versions wrote (`+00:00` and three, six or nine digits, or none,
    /// as the instant needs), or [`sqlite_time`]'s (six digits and `Z`),
    /// written since. Either sorts in time order against text of its own
    /// form, ties included; against the other form a tie does not compare
    /// equal (`…:00+00:00` sorts below `…:00.000000Z`). So each row is
    /// compared with `t` written in the row's form, told by its last
    /// character: a scan still compares text, not converted instants. On
    /// PostgreSQL the column is a `TIMESTAMPTZ`.
    pub fn compare_text_instant(self, col: &str, op: &str, t: DateTime<Utc>) -> (String, Vec<Arg>) {
        match self {
            Dialect::Sqlite => (
                format!("CASE WHEN substr({col}, -1) = 'Z' THEN {col} {op} $? ELSE {col} {op} $? END"),
                vec![Arg::Text(Some(sqlite_time(t))), Arg::Text(Some(sqlx_time(t)))],
            ),
            Dialect::Postgres => (format!("{col} {op} $?"), vec![t.into()]),
        }
    }

    /// `col = value` in an `UPDATE`'s `SET` for an instant column read by
    /// [`Dialect::split_instant`]: `value` is an instant bound by
    /// [`Dialect::instant`], or the `excluded` one of an upsert
    /// ([`Dialect::excluded_instant`]).
    pub fn set_instant(self, col: &str, value: &str) -> String {
        match self {
            Dialect::Sqlite => format!("{col} = '', {col}_us = {value}"),
            Dialect::Postgres => format!("{col} = {value}"),
        }
    }

    /// The column list of an `INSERT` for an instant column read by
    /// [`Dialect::split_instant`], and its values for `value` (an instant
    /// bound by [`Dialect::instant`]).
    pub fn insert_instant(self, col: &str, value: &str) -> (String, String) {
        match self {
            Dialect::Sqlite => (format!("{col}, {col}_us"), format!("'', {value}")),
            Dialect::Postgres => (col.to_owned(), value.to_owned()),
        }
    }

    /// The instant an upsert's `INSERT` proposed for `col`, in the
    /// `ON CONFLICT … DO UPDATE` clause.
    pub fn excluded_instant(self, col: &str) -> String {
        match self {
            Dialect::Sqlite => format!("excluded.{col}_us"),
            Dialect::Postgres => format!("excluded.{col}"),
        }
    }

    /// A document the registry keeps for itself (a batch's stored checks)
    /// as the fewest bytes its JSON column takes on each backend: on SQLite
    /// the column is text and holds the document's JSON text; on PostgreSQL
    /// the column is `JSONB`, which keeps every number as a `NUMERIC` with
    /// a header of its own and an entry per element (a batch's usual eight
    /// checks, `[1,9,17,31,39,41,[48,[1000.0,0.3,7]],63]`: 156 bytes as a
    /// JSONB array), so it holds that same text as one JSONB string (52
    /// bytes). [`Packed`] reads either form back.
    pub fn packed<T: serde::Serialize>(self, doc: &T) -> Arg {
        // Documents are structs and enums with string keys: serialising them cannot fail.
        let text = serde_json::to_string(doc).expect("a typed document serialises");
        match self {
            Dialect::Sqlite => Arg::Text(Some(text)),
            Dialect::Postgres => Arg::Json(Some(Value::String(text))),
        }
    }

    /// A scalar subquery: a JSON array with one object of `fields` per row of
    /// `from` (tables and `WHERE`), ordered by the values of the keys `order`;
    /// `[]` when there is none.
    pub fn json_rows(self, fields: &[Field], from: &str, order: &[&str]) -> String {
        let column = |key: &str| {
            fields.iter().find_map(|f| match f {
                Field::Col(k, col) | Field::Doc(k, col) => (*k == key).then_some(*col),
            })
        };
        match self {
            // group_concat rather than json_group_array: text needs no JSON
            // subtype to come through the aggregate's ORDER BY.
            Dialect::Sqlite => {
                let pairs = fields
                    .iter()
                    .map(|f| match f {
                        Field::Col(key, col) => format!("'{key}', {col}"),
                        Field::Doc(key, col) => format!("'{key}', json({col})"),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let order = order.iter().map(|k| column(k).expect("an order key is a field")).collect::<Vec<_>>();
                format!(
                    "(SELECT COALESCE('[' || group_concat(json_object({pairs}), ',' ORDER BY {}) || ']', '[]') FROM {from})",
                    order.join(", ")
                )
            }
            // json_agg of a row rather than of json_build_object(...): it
            // costs PostgreSQL about a third less per object.
            Dialect::Postgres => {
                let columns = fields
                    .iter()
                    .map(|f| match f {
                        Field::Col(key, col) | Field::Doc(key, col) => format!("{col} AS \"{key}\""),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let order = order.iter().map(|k| format!("x.\"{k}\"")).collect::<Vec<_>>().join(", ");
                format!(
                    "(SELECT COALESCE(json_agg(x ORDER BY {order}), '[]') FROM (SELECT {columns} FROM {from}) AS x)"
                )
            }
        }
    }
}

tokio::task_local! {
    /// Statements run through [`Conn`] by the task inside [`count_statements`].
    static STATEMENTS: std::cell::Cell<u64>;
}

/// Runs `op` and counts the statements it runs through [`Conn`] on this
/// task (`BEGIN`, `COMMIT` and PostgreSQL's lock statements are not
/// [`Conn`]'s): the tests pin what a start and a commit cost, so that a
/// statement added back shows. Outside it nothing is counted.
#[doc(hidden)]
pub async fn count_statements<F: std::future::Future>(op: F) -> (F::Output, u64) {
    STATEMENTS
        .scope(std::cell::Cell::new(0), async {
            let out = op.await;
            (out, STATEMENTS.with(std::cell::Cell::get))
        })
        .await
}

fn counted() {
    let _ = STATEMENTS.try_with(|n| n.set(n.get() + 1));
}

impl Conn<'_> {
    pub fn dialect(&self) -> Dialect {
        match self {
            Conn::Sqlite(_) => Dialect::Sqlite,
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    pub async fn all<R: Row>(&mut self, sql: &str, args: Vec<Arg>) -> sqlx::Result<Vec<R>> {
        counted();
        match self {
            Conn::Sqlite(c) => sqlx::query_as_with(sql, sqlite_args(args)).fetch_all(&mut **c).await,
            Conn::Postgres(c) => sqlx::query_as_with(sql, pg_args(args)).fetch_all(&mut **c).await,
        }
    }

    pub async fn opt<R: Row>(&mut self, sql: &str, args: Vec<Arg>) -> sqlx::Result<Option<R>> {
        counted();
        match self {
            Conn::Sqlite(c) => sqlx::query_as_with(sql, sqlite_args(args)).fetch_optional(&mut **c).await,
            Conn::Postgres(c) => sqlx::query_as_with(sql, pg_args(args)).fetch_optional(&mut **c).await,
        }
    }

    pub async fn one<R: Row>(&mut self, sql: &str, args: Vec<Arg>) -> sqlx::Result<R> {
        counted();
        match self {
            Conn::Sqlite(c) => sqlx::query_as_with(sql, sqlite_args(args)).fetch_one(&mut **c).await,
            Conn::Postgres(c) => sqlx::query_as_with(sql, pg_args(args)).fetch_one(&mut **c).await,
        }
    }

    /// Runs a statement; returns the number of rows it affected.
    pub async fn exec(&mut self, sql: &str, args: Vec<Arg>) -> sqlx::Result<u64> {
        counted();
        match self {
            Conn::Sqlite(c) => {
                sqlx::query_with(sql, sqlite_args(args)).execute(&mut **c).await.map(|r| r.rows_affected())
            }
            Conn::Postgres(c) => {
                sqlx::query_with(sql, pg_args(args)).execute(&mut **c).await.map(|r| r.rows_affected())
            }
        }
    }
}

/// Writes whose results nobody reads and that do not read each other's
/// rows, to run with [`Conn::exec_writes`] as one statement: on SQLite one
/// call to sqlx's worker thread running them in order, on PostgreSQL one
/// round trip of data-modifying `WITH` queries.
///
/// Each statement handed to the SQLite worker costs two thread wake-ups
/// (the worker's and the waiting task's), which on this service's 2-core
/// machines cost more CPU than the statements themselves (issue 14: most of
/// a start+commit's CPU was spent waking threads); on PostgreSQL each is a
/// round trip to the server. Sent together, several writes cost one.
///
/// On PostgreSQL the parts of one statement run on one snapshot, in no set
/// order: a part must not read or change a row another part writes (rows
/// the parts add may refer to each other, and to rows written before).
#[derive(Debug, Default)]
pub struct Writes {
    statements: Vec<(String, Vec<Arg>)>,
}

impl Writes {
    /// Adds a statement, with its own `$1…$n`.
    pub fn push(&mut self, sql: impl Into<String>, args: Vec<Arg>) {
        self.statements.push((sql.into(), args));
    }

    /// One query of all the statements in `dialect`, each one's `$k` moved
    /// past the arguments of those before it, and all their arguments.
    fn joined(self, dialect: Dialect) -> (String, Vec<Arg>) {
        let mut sql = String::new();
        let mut all = Vec::new();
        for (n, (statement, args)) in self.statements.into_iter().enumerate() {
            let statement = renumbered(&statement, all.len());
            match dialect {
                Dialect::Sqlite => {
                    sql.push_str(&statement);
                    sql.push_str(";\n");
                }
                Dialect::Postgres => {
                    sql.push_str(if n == 0 { "WITH " } else { ", " });
                    sql.push_str(&format!("w{n} AS ({statement})"));
                }
            }
            all.extend(args);
        }
        if dialect == Dialect::Postgres {
            // Data-modifying WITH queries run to completion whether or not
            // the main query reads them.
            sql.push_str(" SELECT 1");
        }
        (sql, all)
    }
}

/// `sql` with every placeholder `$k` written `$(k + offset)`. The registry's
/// statements hold no `$` but their placeholders.
fn renumbered(sql: &str, offset: usize) -> String {
    if offset == 0 {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(k) => out.push_str(&(k + offset).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

impl Conn<'_> {
    /// Runs `writes` as one statement. One that fails fails it (on SQLite
    /// those before it ran, and the caller's transaction undoes them, as for
    /// any failed statement).
    pub async fn exec_writes(&mut self, mut writes: Writes) -> sqlx::Result<()> {
        if writes.statements.len() <= 1 {
            return match writes.statements.pop() {
                Some((sql, args)) => self.exec(&sql, args).await.map(drop),
                None => Ok(()),
            };
        }
        let (sql, args) = writes.joined(self.dialect());
        self.exec(&sql, args).await.map(drop)
    }
}

/// A write transaction of either backend: on SQLite, a turn on the write
/// lane (see `sqlite.rs`).
pub enum Tx {
    Sqlite(WriteTx),
    Postgres(super::postgres::PgTx),
}

impl Tx {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::Sqlite(t) => Conn::Sqlite(t.conn()),
            Tx::Postgres(t) => Conn::Postgres(t.conn()),
        }
    }

    pub async fn commit(self) -> sqlx::Result<()> {
        match self {
            Tx::Sqlite(t) => t.commit(Vec::new()).await,
            Tx::Postgres(t) => t.commit().await,
        }
    }
}

/// A pooled connection of either backend, for reads.
pub enum Pooled {
    Sqlite(sqlx::pool::PoolConnection<Sqlite>),
    Postgres(sqlx::pool::PoolConnection<Postgres>),
}

impl Pooled {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Pooled::Sqlite(c) => Conn::Sqlite(c),
            Pooled::Postgres(c) => Conn::Postgres(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_move_past_the_arguments_before_them() {
        assert_eq!(
            renumbered("UPDATE t SET a = $1, b = $10 WHERE c = $2", 3),
            "UPDATE t SET a = $4, b = $13 WHERE c = $5"
        );
        assert_eq!(renumbered("INSERT INTO t VALUES ($1)", 0), "INSERT INTO t VALUES ($1)");
        assert_eq!(renumbered("SELECT 1", 7), "SELECT 1");
        let mut w = Writes::default();
        w.push("INSERT INTO a VALUES ($1, $2)", args![1_i64, 2_i64]);
        w.push("UPDATE b SET x = $2 WHERE y = $1", args![3_i64, 4_i64]);
        let (sql, all) = w.joined(Dialect::Sqlite);
        assert_eq!(sql, "INSERT INTO a VALUES ($1, $2);\nUPDATE b SET x = $4 WHERE y = $3;\n");
        assert_eq!(all.len(), 4);
        let mut w = Writes::default();
        w.push("INSERT INTO a VALUES ($1, $2)", args![1_i64, 2_i64]);
        w.push("UPDATE b SET x = $2 WHERE y = $1", args![3_i64, 4_i64]);
        let (sql, _) = w.joined(Dialect::Postgres);
        assert_eq!(
            sql,
            "WITH w0 AS (INSERT INTO a VALUES ($1, $2)), w1 AS (UPDATE b SET x = $4 WHERE y = $3) SELECT 1"
        );
    }

    /// The joined statements run on SQLite in order, each with its own
    /// arguments; one that fails stops those after it. (PostgreSQL's form
    /// runs in every start and commit of the API tests.)
    #[tokio::test]
    async fn writes_run_together_on_sqlite() {
        use sqlx::Connection;
        crate::store::sqlite_memory::configure();
        let mut c = SqliteConnection::connect("sqlite::memory:").await.expect("sqlite");
        sqlx::raw_sql("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)").execute(&mut c).await.expect("table");
        let mut w = Writes::default();
        w.push("INSERT INTO t (k, v) VALUES ($1, $2)", args!["a", 1_i64]);
        w.push("INSERT INTO t (k, v) VALUES ($2, $1)", args![2_i64, "b"]);
        w.push("UPDATE t SET v = v + $1 WHERE k = $2", args![10_i64, "a"]);
        Conn::Sqlite(&mut c).exec_writes(w).await.expect("writes");
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT k, v FROM t ORDER BY k").fetch_all(&mut c).await.expect("rows");
        assert_eq!(rows, [("a".to_owned(), 11), ("b".to_owned(), 2)]);

        let mut w = Writes::default();
        w.push("INSERT INTO t (k, v) VALUES ($1, $2)", args!["c", 3_i64]);
        w.push("INSERT INTO t (k, v) VALUES ($1, $2)", args!["a", 4_i64]);
        w.push("INSERT INTO t (k, v) VALUES ($1, $2)", args!["d", 5_i64]);
        assert!(Conn::Sqlite(&mut c).exec_writes(w).await.is_err(), "a duplicate key fails the writes");
        let keys: Vec<(String,)> = sqlx::query_as("SELECT k FROM t ORDER BY k").fetch_all(&mut c).await.expect("rows");
        assert_eq!(
            keys,
            [("a".to_owned(),), ("b".to_owned(),), ("c".to_owned(),)],
            "the statement after the failed one did not run"
        );
    }

    /// SQLite's timestamps are 27 characters, read back as written, and
    /// sort in time order among themselves and against sqlx's own form (the
    /// rows written before), ties aside.
    #[tokio::test]
    async fn sqlite_timestamps_are_short_read_back_whole_and_sort_in_time_order() {
        use sqlx::Connection;
        let base: DateTime<Utc> = "2026-12-03T12:17:46Z".parse().unwrap();
        let times: Vec<DateTime<Utc>> = [0, 1, 500_000, 500_001, 999_999, 1_000_000, 61_000_000]
            .iter()
            .map(|&us| base + chrono::Duration::microseconds(us))
            .collect();
        let mut c = sqlx::SqliteConnection::connect("sqlite::memory:").await.unwrap();
        sqlx::query("CREATE TABLE t (at TEXT NOT NULL)").execute(&mut c).await.unwrap();
        for t in &times {
            assert_eq!(sqlite_time(*t).len(), 27, "{}", sqlite_time(*t));
            sqlx::query_with("INSERT INTO t (at) VALUES ($1)", sqlite_args(args![*t])).execute(&mut c).await.unwrap();
        }
        let back: Vec<DateTime<Utc>> =
            sqlx::query_scalar("SELECT at FROM t ORDER BY at").fetch_all(&mut c).await.unwrap();
        assert_eq!(back, times);
        for old in &times {
            let old_form = sqlx::query_scalar::<_, String>("SELECT $1").bind(*old).fetch_one(&mut c).await.unwrap();
            for new in &times {
                let (lt,): (bool,) = sqlx::query_as_with("SELECT $1 < $2", {
                    let mut a = sqlite_args(args![old_form.clone()]);
                    a.add(sqlite_time(*new)).unwrap();
                    a
                })
                .fetch_one(&mut c)
                .await
                .unwrap();
                if old != new {
                    assert_eq!(lt, old < new, "{old_form} < {}", sqlite_time(*new));
                }
            }
        }
    }

    /// An instant column of the compact kind holds an integer on SQLite (8
    /// bytes), reads back to the microsecond as the text form the other
    /// columns hold, and compares in time order with an instant bound the
    /// same way.
    #[tokio::test]
    async fn sqlite_instants_are_integers_read_back_to_the_microsecond() {
        use sqlx::Connection;
        let base: DateTime<Utc> = "2026-12-04T23:59:59Z".parse().unwrap();
        let mut times: Vec<DateTime<Utc>> = [0, 1, 500_000, 999_999, 1_000_000, 86_400_000_001]
            .iter()
            .map(|&us| base + chrono::Duration::microseconds(us))
            .collect();
        // Before 1970 (never written by the clock, but read the same way).
        let epoch = DateTime::<Utc>::UNIX_EPOCH;
        times.splice(0..0, [-1_000_001, -1, 0].map(|us| epoch + chrono::Duration::microseconds(us)));
        let mut c = sqlx::SqliteConnection::connect("sqlite::memory:").await.unwrap();
        sqlx::query("CREATE TABLE t (at INTEGER NOT NULL)").execute(&mut c).await.unwrap();
        for t in &times {
            let a = sqlite_args(vec![Dialect::Sqlite.instant(*t)]);
            sqlx::query_with("INSERT INTO t (at) VALUES ($1)", a).execute(&mut c).await.unwrap();
        }
        let read = format!("SELECT {} FROM t ORDER BY at", Dialect::Sqlite.instant_value("at"));
        let back: Vec<String> = sqlx::query_scalar(&read).fetch_all(&mut c).await.unwrap();
        assert_eq!(
            back,
            times.iter().map(|t| sqlite_time(*t)).collect::<Vec<_>>(),
            "the text form, to the microsecond"
        );
        let back: Vec<DateTime<Utc>> = sqlx::query_scalar(&read).fetch_all(&mut c).await.unwrap();
        assert_eq!(back, times);
        let kinds: Vec<String> = sqlx::query_scalar("SELECT typeof(at) FROM t").fetch_all(&mut c).await.unwrap();
        assert!(kinds.iter().all(|k| k == "integer"), "{kinds:?}");
        for (i, t) in times.iter().enumerate() {
            let a = sqlite_args(vec![Dialect::Sqlite.instant(*t)]);
            let later: i64 =
                sqlx::query_scalar_with("SELECT COUNT(*) FROM t WHERE at >= $1", a).fetch_one(&mut c).await.unwrap();
            assert_eq!(later as usize, times.len() - i, "at >= {t}");
        }
    }
}
