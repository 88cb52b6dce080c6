//! `/v1/tokens` (admin): make, list and revoke API tokens. The secret is in
//! the answer to the POST and nowhere else, ever.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use axum::{Json, Router};

use super::error::AppJson;
use super::AppState;
use crate::api::{Lifetime, TokenCreateRequest, TokenCreated, TokenList};
use crate::auth::{issue_token, tokens};
use crate::error::{Error, Result};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/tokens", post(create).get(list)).route("/v1/tokens/{name}", delete(revoke))
}

#[utoipa::path(
    post,
    path = "/v1/tokens",
    tag = "auth",
    operation_id = "createToken",
    summary = "Make an API token (admin); the secret is in the answer, once",
    request_body = crate::api::TokenCreateRequest,
    responses(
        (status = 201, description = "Made.", body = crate::api::TokenCreated),
        (status = 400, response = crate::api::BadRequest),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 409, description = "`token_exists`: the name is taken.", body = crate::api::ErrorBody),
        (status = 413, response = crate::api::PayloadTooLarge),
        (status = 415, response = crate::api::UnsupportedMediaType),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn create(State(app): State<AppState>, body: AppJson<TokenCreateRequest>) -> Result<Response> {
    let b = body.value;
    let lifetime = b
        .expires_in
        .map(|l| match l {
            Lifetime::Seconds(s) => tokens::check_lifetime(std::time::Duration::from_secs(s), &format!("{s} s")),
            Lifetime::Text(t) => tokens::parse_lifetime(&t),
        })
        .transpose()
        .map_err(|m| Error::invalid("expires_in", m))?;
    let now = app.auth.authenticator.now();
    let (token, record) = issue_token(app.store.as_ref(), now, &b.name, &b.scopes, lifetime).await?;
    Ok((StatusCode::CREATED, Json(TokenCreated { record, token })).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/tokens",
    tag = "auth",
    operation_id = "listTokens",
    summary = "List API tokens (admin): never the secrets",
    responses(
        (status = 200, description = "Every token, by name.", body = crate::api::TokenList),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn list(State(app): State<AppState>) -> Result<Json<TokenList>> {
    Ok(Json(TokenList { items: app.store.list_tokens().await? }))
}

#[utoipa::path(
    delete,
    path = "/v1/tokens/{name}",
    tag = "auth",
    operation_id = "revokeToken",
    summary = "Revoke an API token (admin): it stops working at once on every replica",
    params(
        ("name" = String, Path),
    ),
    responses(
        (status = 204, description = "Revoked."),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, description = "`token_not_found`.", body = crate::api::ErrorBody),
        (status = 422, response = crate::api::Invalid),
        (status = 500, response = crate::api::StorageError),
        (status = 503, response = crate::api::StorageUnavailable),
    ),
)]
async fn revoke(State(app): State<AppState>, Path(name): Path<String>) -> Result<Response> {
    if app.store.revoke_token(&name).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(Error::not_found("token_not_found", format!("no token named {name:?}")))
    }
}
