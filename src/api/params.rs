//! Parameters several operations share, declared once for the spec.

use utoipa::IntoParams;

use crate::api::schemas::{BatchIdText, DatasetNameText};

/// The batch in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct BatchPath {
    /// `{task}-{YYYYMMDD}-{NNN}`: the task, the data date and the attempt
    /// number (from 001, never reused).
    #[param(value_type = BatchIdText)]
    batch_id: String,
}

/// The dataset in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct DatasetPath {
    /// A target table, e.g. `dws.order_detail`.
    #[param(value_type = DatasetNameText)]
    dataset: String,
}

/// Keyset pagination of a listing.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct PageQuery {
    /// Page size, 1 to 500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// The `next_cursor` of the previous page (opaque; URL-encode it).
    cursor: Option<String>,
}
