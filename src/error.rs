//! The one error type of the service. Every variant has a stable snake_case
//! `code` that clients may match on; [`crate::http::error`] turns it into the
//! JSON error body.

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is well-formed but a field's value is not acceptable (422).
    #[error("{message}")]
    Invalid { code: &'static str, field: Option<String>, message: String, details: Value },
    /// The thing named does not exist (404).
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    /// The request contradicts the registry's state (409).
    #[error("{message}")]
    Conflict { code: &'static str, message: String, details: Value },
    /// A request-level problem the HTTP layer detects (413, 415, 400 …).
    #[error("{message}")]
    Request { status: u16, code: &'static str, message: String },
    /// The database failed; the transaction was rolled back.
    #[error("storage error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("internal error: {0}")]
    Internal(#[from] anyhow::Error),
    /// The write is stored, but its answer could not be read back (503
    /// `answer_unavailable`): the same request again gets it.
    #[error("{message} ({cause})")]
    Unanswered { message: String, cause: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A 422 naming the field at fault.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::invalid_code("invalid_field", field, message)
    }

    pub fn invalid_code(code: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        Self::Invalid {
            code,
            details: serde_json::json!({ "field": field }),
            field: Some(field),
            message: message.into(),
        }
    }

    /// A 409; `details` is a typed struct naming the batch and its state
    /// (any `Serialize`).
    pub fn conflict(code: &'static str, message: impl Into<String>, details: impl serde::Serialize) -> Self {
        // A struct of plain fields always serialises; were one not to, the
        // conflict would still be answered, with empty details.
        let details = serde_json::to_value(details).unwrap_or_else(|_| Value::Object(Default::default()));
        Self::Conflict { code, message: message.into(), details }
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::NotFound { code, message: message.into() }
    }

    pub fn status(&self) -> u16 {
        match self {
            Error::Invalid { .. } => 422,
            Error::NotFound { .. } => 404,
            Error::Conflict { .. } => 409,
            Error::Request { status, .. } => *status,
            Error::Database(e) if is_unavailable(e) => 503,
            Error::Database(_) | Error::Internal(_) => 500,
            Error::Unanswered { .. } => 503,
        }
    }

    /// PostgreSQL refused the transaction to break a deadlock (`40P01`) or a
    /// serialization conflict (`40001`): it was rolled back whole, and the
    /// same write run again may well succeed (see `store::retrying`).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Database(sqlx::Error::Database(d)) if matches!(d.code().as_deref(), Some("40P01" | "40001")))
    }

    pub fn code(&self) -> &'static str {
        match self {
            Error::Invalid { code, .. }
            | Error::NotFound { code, .. }
            | Error::Conflict { code, .. }
            | Error::Request { code, .. } => code,
            Error::Database(e) if is_unavailable(e) => "storage_unavailable",
            Error::Database(_) => "storage_error",
            Error::Internal(_) => "internal_error",
            Error::Unanswered { .. } => "answer_unavailable",
        }
    }
}

/// Errors that mean "the database cannot be reached right now" rather than
/// "this statement failed".
pub(crate) fn is_unavailable(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_))
        || matches!(e, sqlx::Error::Database(d) if d.code().as_deref().is_some_and(|c| c == "5" || c == "6" || c == "517"))
}
