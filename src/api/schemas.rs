//! Shapes the spec names that have no Rust type of their own. The enums the
//! registry stores are typed where they live (`domain/`, `string_enum!`
//! derives `ToSchema`). The response-schema check in the API tests keeps
//! these true to what the service sends.

use utoipa::ToSchema;

/// Where a delivery stands.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum DeliveryState {
    Pending,
    Delivered,
    GivenUp,
}

/// When a `/ready` long-poll may answer before its deadline.
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum Until {
    Ready,
    ReadyOrRejected,
}
