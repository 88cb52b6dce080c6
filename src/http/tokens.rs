//! `/v1/tokens` (admin): make, list and revoke API tokens. The secret is in
//! the answer to the POST and nowhere else, ever.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::error::AppJson;
use super::AppState;
use crate::auth::{issue_token, tokens};
use crate::error::{Error, Result};
use crate::store::TokenRecord;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/tokens", post(create).get(list)).route("/v1/tokens/{name}", delete(revoke))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    scopes: Vec<String>,
    expires_in: Option<Lifetime>,
}

/// `"90d"` or a number of seconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum Lifetime {
    Seconds(u64),
    Text(String),
}

/// A new token: its record and, this once, the secret.
#[derive(Serialize)]
struct Created {
    #[serde(flatten)]
    record: TokenRecord,
    token: String,
}

#[derive(Serialize)]
struct TokenList {
    items: Vec<TokenRecord>,
}

async fn create(State(app): State<AppState>, body: AppJson<CreateBody>) -> Result<Response> {
    let b = body.value;
    let lifetime = match b.expires_in {
        None => None,
        Some(Lifetime::Seconds(s)) if s >= 60 => Some(std::time::Duration::from_secs(s)),
        Some(Lifetime::Seconds(s)) => {
            return Err(Error::invalid("expires_in", format!("{s} s is shorter than a minute")))
        }
        Some(Lifetime::Text(t)) => Some(tokens::parse_lifetime(&t).map_err(|m| Error::invalid("expires_in", m))?),
    };
    let now = app.auth.authenticator.now();
    let (token, record) = issue_token(app.store.as_ref(), now, &b.name, &b.scopes, lifetime).await?;
    Ok((StatusCode::CREATED, Json(Created { record, token })).into_response())
}

async fn list(State(app): State<AppState>) -> Result<Json<TokenList>> {
    Ok(Json(TokenList { items: app.store.list_tokens().await? }))
}

async fn revoke(State(app): State<AppState>, Path(name): Path<String>) -> Result<Response> {
    if app.store.revoke_token(&name).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(Error::not_found("token_not_found", format!("no token named {name:?}")))
    }
}
