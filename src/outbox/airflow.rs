//! Airflow's REST API (3.x), as far as asset events need it:
//!
//! - `POST {airflow}/auth/token` `{"username", "password"}` → `{"access_token"}`,
//!   a JWT, renewed a minute before its `exp` (or after a 401);
//! - `GET /api/v2/assets?name_pattern=…` (or `uri_pattern=…` for a URI) to
//!   find the asset's id, cached;
//! - `GET /api/v2/assets/events?asset_id=…&order_by=-timestamp` to find an
//!   event sent by an attempt whose answer was lost (batchgate stopped, or
//!   the connection broke, after Airflow stored it);
//! - `POST /api/v2/assets/events` `{"asset_id", "partition_key", "extra"}`.

use std::collections::HashMap;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::clock::Clock;
use crate::config::AirflowAuth;
use crate::domain::push::PendingAssetEvent;

/// Renew a JWT this long before it expires.
const RENEW_BEFORE: chrono::Duration = chrono::Duration::seconds(60);

/// How long a JWT without `exp` is used.
const TOKEN_WITHOUT_EXP: chrono::Duration = chrono::Duration::minutes(5);

/// Recent events of the asset looked through for an earlier attempt's event.
const LOOK_BACK: u32 = 100;

/// Why an asset event was not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Airflow knows no asset of that name or URI.
    UnknownAsset,
    /// Anything else (Airflow down, refused credentials, …).
    Other(String),
}

/// A JWT and when it stops being used.
struct Jwt {
    token: String,
    renew_at: DateTime<Utc>,
}

/// The client: credentials, the JWT in use, and asset ids already looked up.
pub struct Airflow {
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    auth: AirflowAuth,
    jwt: Mutex<Option<Jwt>>,
    /// `(base URL, asset)` → asset id.
    assets: Mutex<HashMap<(String, String), i64>>,
}

impl Airflow {
    pub fn new(http: reqwest::Client, clock: Arc<dyn Clock>, auth: AirflowAuth) -> Self {
        Self { http, clock, auth, jwt: Mutex::new(None), assets: Mutex::new(HashMap::new()) }
    }

    /// Sends `event` to the Airflow at `base`. With `check_first` (an earlier
    /// attempt may have reached Airflow), first looks for the event there.
    pub async fn send(&self, base: &str, event: &PendingAssetEvent, check_first: bool) -> Result<(), Failure> {
        let base = base.trim_end_matches('/');
        let asset_id = self.asset_id(base, event).await?;
        if check_first && self.recorded(base, asset_id, event).await? {
            tracing::info!(
                asset = event.asset,
                partition_key = event.partition_key,
                batch_id = event.extra.batch_id,
                "asset event already in Airflow: not sent again"
            );
            return Ok(());
        }
        let body = json!({"asset_id": asset_id, "partition_key": event.partition_key, "extra": event.extra});
        let resp = self.call(base, reqwest::Method::POST, "/api/v2/assets/events", &[], Some(&body)).await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            // No asset of the cached id any more (it was removed, perhaps
            // made again under a new id): the next attempt looks it up.
            self.assets.lock().await.remove(&(base.to_owned(), event.asset.clone()));
        }
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(Failure::Other(describe("POST /api/v2/assets/events", resp).await))
        }
    }

    /// The asset's id, looked up by name (or URI) once, and again after
    /// Airflow said it has no asset of that id.
    async fn asset_id(&self, base: &str, event: &PendingAssetEvent) -> Result<i64, Failure> {
        let key = (base.to_owned(), event.asset.clone());
        if let Some(id) = self.assets.lock().await.get(&key) {
            return Ok(*id);
        }
        let (param, field) = if event.asset_is_uri() { ("uri_pattern", "uri") } else { ("name_pattern", "name") };
        let resp = self
            .call(
                base,
                reqwest::Method::GET,
                "/api/v2/assets",
                &[(param, event.asset.as_str()), ("limit", "100")],
                None,
            )
            .await?;
        if !resp.status().is_success() {
            return Err(Failure::Other(describe("GET /api/v2/assets", resp).await));
        }
        let list: Value = resp.json().await.map_err(|e| Failure::Other(format!("GET /api/v2/assets: {e}")))?;
        // The pattern matches substrings: only an exact name (or URI) is the asset.
        let id = list["assets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a[field].as_str() == Some(event.asset.as_str()))
            .and_then(|a| a["id"].as_i64())
            .ok_or(Failure::UnknownAsset)?;
        self.assets.lock().await.insert(key, id);
        Ok(id)
    }

    /// Whether Airflow already holds this event (same partition key, batch, version).
    async fn recorded(&self, base: &str, asset_id: i64, event: &PendingAssetEvent) -> Result<bool, Failure> {
        let (id, limit) = (asset_id.to_string(), LOOK_BACK.to_string());
        let query = [("asset_id", id.as_str()), ("order_by", "-timestamp"), ("limit", limit.as_str())];
        let resp = self.call(base, reqwest::Method::GET, "/api/v2/assets/events", &query, None).await?;
        if !resp.status().is_success() {
            return Err(Failure::Other(describe("GET /api/v2/assets/events", resp).await));
        }
        let list: Value = resp.json().await.map_err(|e| Failure::Other(format!("GET /api/v2/assets/events: {e}")))?;
        Ok(list["asset_events"].as_array().into_iter().flatten().any(|e| event.is_recorded_as(e)))
    }

    /// One API call with the credentials; a 401 with a JWT renews it and tries once more.
    async fn call(
        &self,
        base: &str,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<reqwest::Response, Failure> {
        for retry in [false, true] {
            let mut req = self.http.request(method.clone(), format!("{base}{path}")).query(query);
            if let Some(body) = body {
                req = req.json(body);
            }
            if let Some(token) = self.bearer(base, retry).await? {
                req = req.bearer_auth(token);
            }
            let resp = req.send().await.map_err(|e| Failure::Other(format!("cannot reach Airflow: {e}")))?;
            let renewable = matches!(self.auth, AirflowAuth::Password { .. });
            if resp.status() == StatusCode::UNAUTHORIZED && renewable && !retry {
                continue;
            }
            return Ok(resp);
        }
        unreachable!("the second round returns")
    }

    /// The bearer token to send, if any; `renew` drops the JWT in use.
    async fn bearer(&self, base: &str, renew: bool) -> Result<Option<String>, Failure> {
        let (username, password) = match &self.auth {
            AirflowAuth::None => return Ok(None),
            AirflowAuth::Token(t) => return Ok(Some(t.clone())),
            AirflowAuth::Password { username, password } => (username, password),
        };
        let mut jwt = self.jwt.lock().await;
        let now = self.clock.now();
        if let Some(j) = jwt.as_ref().filter(|j| !renew && j.renew_at > now) {
            return Ok(Some(j.token.clone()));
        }
        let resp = self
            .http
            .post(format!("{base}/auth/token"))
            .json(&json!({"username": username, "password": password}))
            .send()
            .await
            .map_err(|e| Failure::Other(format!("cannot reach Airflow for a token: {e}")))?;
        if !resp.status().is_success() {
            return Err(Failure::Other(describe("POST /auth/token", resp).await));
        }
        let v: Value = resp.json().await.map_err(|e| Failure::Other(format!("POST /auth/token: {e}")))?;
        let token = v["access_token"]
            .as_str()
            .ok_or_else(|| Failure::Other("POST /auth/token answered without access_token".into()))?
            .to_owned();
        let renew_at = match expiry(&token) {
            Some(exp) => exp - RENEW_BEFORE,
            None => now + TOKEN_WITHOUT_EXP,
        };
        *jwt = Some(Jwt { token: token.clone(), renew_at });
        Ok(Some(token))
    }
}

/// The `exp` of a JWT (not verified: only to know when to renew it).
fn expiry(jwt: &str) -> Option<DateTime<Utc>> {
    let payload = jwt.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    DateTime::from_timestamp(claims["exp"].as_i64()?, 0)
}

/// An error answer, with the start of its body.
async fn describe(call: &str, resp: reqwest::Response) -> String {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    let body: String = body.chars().take(300).collect();
    format!("Airflow answered {status} to {call}: {body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expiry_of_a_jwt_is_read_from_its_payload() {
        let payload = URL_SAFE_NO_PAD.encode(r#"{"sub":"bg","exp":1798761600}"#);
        let jwt = format!("eyJhbGciOiJIUzUxMiJ9.{payload}.sig");
        assert_eq!(expiry(&jwt), DateTime::from_timestamp(1_798_761_600, 0));
        assert_eq!(expiry("not-a-jwt"), None);
        let no_exp = format!("h.{}.s", URL_SAFE_NO_PAD.encode(r#"{"sub":"bg"}"#));
        assert_eq!(expiry(&no_exp), None);
    }
}
