//! The API's wire types: the request bodies the service accepts and the
//! client sends, the response bodies the HTTP layer assembles, and the
//! OpenAPI document generated from them ([`openapi`]).
//!
//! Records that the store returns (batches, partitions, datasets, alerts …)
//! are declared where they are made and derive [`utoipa::ToSchema`] there;
//! this module lists them in the document.

pub mod openapi;
mod params;
mod requests;
mod responses;
pub mod schemas;

pub use params::*;
pub use requests::*;
pub use responses::*;
